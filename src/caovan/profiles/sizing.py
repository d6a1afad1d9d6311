"""DynamicTP and AutoMem together, as ``caovan serve`` runs them: one rule for what vLLM is given.

The tensor-parallel size must fit in what vLLM will be given on each GPU it uses, which is AutoMem's share of that
GPU's total memory (or the user's ``--gpu-memory-utilization``); AutoMem then sets that share for the first TP
visible GPUs, the ones vLLM's workers take.
"""

from __future__ import annotations

from collections.abc import Sequence

from .auto_mem import auto_mem, auto_share
from .dynamic_tp import ProfileLine, dynamic_tp
from .gpus import Gpu
from .model_facts import ModelFacts
from .modes import DEFAULT_MODE, MODES, ProfileMode


def size_server(
    facts: ModelFacts,
    gpus: Sequence[Gpu],
    *,
    kv_dtype: str,
    user_tp: int | None = None,
    user_share: float | None = None,
    mode: ProfileMode = MODES[DEFAULT_MODE],
) -> tuple[ProfileLine, ProfileLine]:
    """(DynamicTP's line, AutoMem's line); ProfileError where the request cannot be served."""

    def usable(gpu: Gpu) -> int:
        share = user_share if user_share is not None else auto_share(gpu, mode.margin_bytes, mode.max_share)
        return int(share * gpu.total_bytes)

    tp_line = dynamic_tp(facts, gpus, user_tp=user_tp, kv_dtype=kv_dtype, reserve=mode.reserve, usable=usable)
    mem_line = auto_mem(
        gpus[: int(tp_line.value)], user_value=user_share, margin_bytes=mode.margin_bytes, max_share=mode.max_share
    )
    return tp_line, mem_line
