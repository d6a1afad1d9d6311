"""``--caovan-profile safe|normal|fast``: how much each profile keeps back, as the community's launchers do.

``normal`` (the default) keeps 1 GiB of the tightest GPU's free memory unused and counts a 2 GiB reserve per GPU for
what vLLM takes besides weights and caches; ``safe`` keeps more of both for cards shared with a display or other
processes; ``fast`` less, for a card that serves alone. Chosen values, not yet calibrated against vLLM's own
figures on a GPU (issue 51).
"""

from __future__ import annotations

from dataclasses import dataclass

from .gpus import GIB
from .memory import Reserve


@dataclass(frozen=True)
class ProfileMode:
    name: str
    #: Left unused on the tightest GPU by AutoMem's share.
    margin_bytes: int
    #: AutoMem's share never goes above this.
    max_share: float
    #: What DynamicTP counts per GPU besides weights, KV and GDN state.
    reserve: Reserve


MODES: dict[str, ProfileMode] = {
    mode.name: mode
    for mode in (
        ProfileMode("safe", 2 * GIB, 0.90, Reserve(activations=2 * GIB, cuda_graphs=GIB)),
        ProfileMode("normal", GIB, 0.95, Reserve()),
        ProfileMode("fast", GIB // 2, 0.95, Reserve(activations=GIB * 3 // 4, cuda_graphs=GIB // 4)),
    )
}
DEFAULT_MODE = "normal"
