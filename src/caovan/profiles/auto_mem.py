"""AutoMem: the ``--gpu-memory-utilization`` ``caovan serve`` adds when the user gave none.

vLLM reads the value as the share of each GPU's total memory its instance may take, and refuses to start when a GPU
has less than that free. So the share comes from the tightest of the GPUs the server uses: its free memory (what other
processes hold already left out) minus a margin kept for the CUDA context and allocator slack that vLLM's profiling
does not count, over its total, rounded down to a hundredth and capped at vLLM's own default ceiling of sensible use.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from .dynamic_tp import ProfileError, ProfileLine, gib
from .gpus import GIB, Gpu

#: Kept free on top of vLLM's share: 22 GB RTX 2080 Tis with a display or a second process need it.
MARGIN_BYTES = GIB
#: No more than this share, even on an empty card (vLLM's profiling run and graph capture overshoot a little).
MAX_UTILIZATION = 0.95
#: Below this share a server has no room for a KV cache worth starting.
MIN_UTILIZATION = 0.30


def auto_share(gpu: Gpu, margin_bytes: int = MARGIN_BYTES, max_share: float = MAX_UTILIZATION) -> float:
    """The share of ``gpu``'s total memory that leaves ``margin_bytes`` of its free memory unused, in hundredths
    rounded down, at most ``max_share``."""
    return min(math.floor((gpu.free_bytes - margin_bytes) / gpu.total_bytes * 100) / 100, max_share)


def auto_mem(
    gpus: Sequence[Gpu],
    *,
    user_value: float | None = None,
    margin_bytes: int = MARGIN_BYTES,
    max_share: float = MAX_UTILIZATION,
) -> ProfileLine:
    """The utilisation line for the GPUs the server uses (the first TP visible ones)."""
    flag = "--gpu-memory-utilization"
    tightest = min(gpus, key=lambda g: g.free_bytes)
    if user_value is not None:
        wanted = user_value * tightest.total_bytes
        if wanted > tightest.free_bytes:
            raise ProfileError(
                f"{flag} {user_value}: GPU {tightest.index} has {gib(tightest.free_bytes)} free of "
                f"{gib(tightest.total_bytes)}, {gib(int(wanted - tightest.free_bytes))} less than the "
                f"{gib(int(wanted))} asked for (vLLM would refuse to start)"
            )
        return ProfileLine("AutoMem", flag, f"{user_value:g}", kept=True, reasons=(tightest.describe(),))
    share = auto_share(tightest, margin_bytes, max_share)
    if share < MIN_UTILIZATION:
        raise ProfileError(
            f"GPU {tightest.index} has {gib(tightest.free_bytes)} free of {gib(tightest.total_bytes)} "
            f"({gib(tightest.used_bytes)} held by other processes): less than {MIN_UTILIZATION:.0%} of it would be "
            f"left to vLLM after the {gib(margin_bytes)} margin"
        )
    reasons = (
        f"tightest GPU {tightest.index}: {gib(tightest.free_bytes)} free of {gib(tightest.total_bytes)}, "
        f"{gib(tightest.used_bytes)} held by others",
        f"margin {gib(margin_bytes)} kept",
        f"{share:.2f} x {gib(tightest.total_bytes)} = {gib(int(share * tightest.total_bytes))} for vLLM",
    )
    return ProfileLine("AutoMem", flag, f"{share:.2f}", kept=False, reasons=reasons)
