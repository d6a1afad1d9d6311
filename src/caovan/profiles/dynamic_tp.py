"""DynamicTP: the tensor-parallel size ``caovan serve`` adds when the user gave none.

The smallest TP that vLLM accepts for the model's heads (:func:`memory.tp_problems`) whose per-GPU weights, one
sequence at the context served in vLLM's KV cache layout (its attention blocks and its GDN state slots,
:mod:`caovan.profiles.kv_layout`: vLLM's own start-up check) and the reserve fit in what vLLM gets on the tightest
of the GPUs it would use (vLLM takes the first TP visible ones; :mod:`sizing` says what it gets). The user's own
``--tensor-parallel-size`` is kept, and only checked against the GPUs there are.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from .gpus import GIB, Gpu
from .kv_layout import KvCacheLayout, cdiv, hybrid_layout
from .memory import Reserve, tp_problems, weights_per_gpu
from .model_facts import ModelFacts


class ProfileError(Exception):
    """What the user asked for cannot be served on these GPUs: one line, what and how much is missing."""


@dataclass(frozen=True)
class ProfileLine:
    """One profile's decision: the flag and value it adds (or the user's, kept), and why, with its numbers;
    ``caovan serve`` prints it as ``[Caovan] serve: DynamicTP: --tensor-parallel-size 2 added: ...``."""

    profile: str
    flag: str
    value: str
    kept: bool
    reasons: tuple[str, ...] = field(default_factory=tuple)
    #: True where vLLM's own default is the profile's choice: the line explains, nothing is added.
    vllm_default: bool = False
    #: Said after "added" where the value is not what the user would expect (Elastic-KV's lowered context).
    warning: str | None = None

    @property
    def added(self) -> bool:
        return not self.kept and not self.vllm_default

    def render(self) -> str:
        how = "kept (yours)" if self.kept else "left to vLLM's default" if self.vllm_default else "added"
        if self.warning:
            how += f", {self.warning}"
        return f"{self.profile}: {self.flag} {self.value} {how}: " + "; ".join(self.reasons)


def gib(n: int) -> str:
    return f"{n / GIB:.2f} GiB"


def needed_per_gpu(facts: ModelFacts, layout: KvCacheLayout, reserve: Reserve) -> dict[str, int]:
    """The bytes one GPU needs at ``layout.tp`` to serve one sequence of ``facts.max_positions`` tokens, by part:
    the attention KV and the GDN state are its blocks in vLLM's layout (``kv`` + ``gdn_state`` is
    ``layout.bytes_per_request``)."""
    attention_blocks = layout.attention_groups * cdiv(facts.max_positions, layout.block_size)
    return {
        "weights": weights_per_gpu(facts, layout.tp),
        "kv": layout.block_row_bytes * attention_blocks,
        "gdn_state": layout.block_row_bytes * layout.gdn_groups * layout.gdn_slots_per_group,
        "reserve": reserve.total,
    }


def kv_token_bytes(layout: KvCacheLayout) -> int:
    """One token's attention KV on one GPU, every attention layer (padding layers included)."""
    return layout.attention_groups * layout.group_size * layout.attention_token_bytes


def dynamic_tp(
    facts: ModelFacts,
    gpus: Sequence[Gpu],
    *,
    user_tp: int | None = None,
    kv_dtype: str,
    reserve: Reserve | None = None,
    usable: Callable[[Gpu], int] | None = None,
    layout_for: Callable[[int], KvCacheLayout] | None = None,
) -> ProfileLine:
    """The TP line for ``caovan serve``; ProfileError where no TP fits or the user's TP has no GPUs. ``usable``: the
    bytes vLLM will have on a GPU (its share of the total, as AutoMem or the user sets it); default: its free
    memory. ``layout_for``: vLLM's KV cache layout at a TP (default: ``kv_dtype``, no speculative decoding)."""
    flag = "--tensor-parallel-size"
    reserve = reserve or Reserve()
    usable = usable or (lambda gpu: gpu.free_bytes)
    layout_for = layout_for or (lambda tp: hybrid_layout(facts, tp, kv_dtype))
    if user_tp is not None:
        if user_tp > len(gpus):
            raise ProfileError(f"{flag} {user_tp}: only {len(gpus)} GPU(s) visible ({_names(gpus)})")
        problems = tp_problems(facts, user_tp)
        reasons = tuple(problems) if problems else ("vLLM accepts it for this model's heads",)
        return ProfileLine("DynamicTP", flag, str(user_tp), kept=True, reasons=reasons)
    tried = []
    for tp in range(1, len(gpus) + 1):
        problems = tp_problems(facts, tp)
        if problems:
            tried.append(f"TP={tp}: {problems[0]}")
            continue
        layout = layout_for(tp)
        parts = needed_per_gpu(facts, layout, reserve)
        tightest = min(gpus[:tp], key=usable)
        need, have = sum(parts.values()), usable(tightest)
        if need <= have:
            slots = layout.gdn_groups * layout.gdn_slots_per_group
            reasons = (
                f"weights {gib(parts['weights'])} per GPU ({facts.weight_source})",
                f"KV {kv_token_bytes(layout)} B per token x {facts.max_positions} tokens (in "
                f"{cdiv(facts.max_positions, layout.block_size)} blocks of {layout.block_size}) = {gib(parts['kv'])}",
                f"GDN state {gib(parts['gdn_state'])} per sequence ({slots} state slots in vLLM's layout)",
                f"reserve {gib(parts['reserve'])}",
                f"{gib(need)} of the {gib(have)} vLLM gets on GPU {tightest.index}",
                *tried,
            )
            return ProfileLine("DynamicTP", flag, str(tp), kept=False, reasons=reasons)
        tried.append(
            f"TP={tp} needs {gib(need)} per GPU, {gib(need - have)} more than the {gib(have)} vLLM gets on GPU "
            f"{tightest.index}"
        )
    raise ProfileError(
        f"{facts.folder} fits no tensor-parallel size on {len(gpus)} GPU(s) ({_names(gpus)}) at a context of "
        f"{facts.max_positions} tokens: " + "; ".join(tried)
    )


def _names(gpus: Sequence[Gpu]) -> str:
    return ", ".join(f"GPU {g.index} {gib(g.free_bytes)} free" for g in gpus)
