"""Elastic-KV: the KV-cache dtype, the context, and how many sequences and batched tokens ``caovan serve`` adds when
the user gave none, sized by vLLM's own KV cache layout (:mod:`caovan.profiles.kv_layout`).

* ``--kv-cache-dtype``: the smallest the installed vLLM takes on the GPU's capability, as
  :mod:`caovan.sm75.vllm_decisions` answers it (the caller asks); where vLLM cannot be asked, vLLM's ``auto``;
* ``--max-model-len``: the model's own, or the user's; lowered only where one sequence of it (its attention KV and
  its GDN state slots, in vLLM's blocks) does not fit what the GPU leaves for the KV cache, and then said in the
  line with both numbers; a context the user fixed that does not fit is a :class:`ProfileError`;
* ``--max-num-seqs``: vLLM's default for the card, or fewer where the KV pool cannot hold that many sequences at
  once (each takes its GDN state slots and at least one attention block whatever its length);
* ``--max-num-batched-tokens``: vLLM's default for the card, at most the context, at least one decode step of every
  sequence (its speculative tokens included).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from .dynamic_tp import ProfileError, ProfileLine, gib
from .gpus import GIB, Gpu
from .kv_layout import KvCacheLayout, kv_dtype_bytes, slots

PROFILE = "Elastic-KV"


@dataclass(frozen=True)
class KvRoom:
    """What the tightest GPU of the server leaves for the KV cache: vLLM's share of its memory less the weights and
    the reserve (vLLM's ``available_memory`` for ``get_kv_cache_configs``, as the profiles estimate it)."""

    gpu: Gpu
    share: float
    weights: int
    reserve: int

    @property
    def usable(self) -> int:
        return int(self.share * self.gpu.total_bytes)

    @property
    def bytes(self) -> int:
        return self.usable - self.weights - self.reserve

    def describe(self) -> str:
        return (
            f"{gib(self.bytes)} left for the KV cache on GPU {self.gpu.index} ({self.share:.2f} x "
            f"{gib(self.gpu.total_bytes)} = {gib(self.usable)}, less weights {gib(self.weights)} and reserve "
            f"{gib(self.reserve)})"
        )


def kv_room(gpus: Sequence[Gpu], share: float, weights: int, reserve: int) -> KvRoom:
    """The room on the GPU that leaves the least (vLLM takes every rank's ``num_blocks`` down to the smallest)."""
    return min((KvRoom(gpu, share, weights, reserve) for gpu in gpus), key=lambda room: room.bytes)


def vllm_batch_defaults(gpu: Gpu) -> tuple[int, int]:
    """vLLM's ``vllm serve`` defaults (``max_num_seqs``, ``max_num_batched_tokens``) on ``gpu`` (its first one):
    ``EngineArgs.get_batch_defaults`` for ``UsageContext.OPENAI_API_SERVER``, 0.21.0."""
    if gpu.total_bytes >= 70 * GIB and "a100" not in gpu.name.lower():
        return 1024, 8192
    return 256, 2048


def kv_dtype_line(
    accepted: Sequence[str] | str, user_value: str | None, model_dtype: str, capability: tuple[int, int]
) -> ProfileLine:
    """``accepted``: the KV-cache dtypes vLLM's own selection takes on ``capability``, or why it could not be asked.
    The smallest per value wins; ``auto`` (the model dtype) before an equal-sized name."""
    flag, gpu = "--kv-cache-dtype", f"sm_{capability[0]}{capability[1]}"
    if user_value is not None:
        size = kv_dtype_bytes(user_value, model_dtype)
        return ProfileLine(PROFILE, flag, user_value, kept=True, reasons=(f"{size} B per cached value",))
    auto = f"auto is the model dtype, {model_dtype}, {kv_dtype_bytes('auto', model_dtype)} B per value"
    if isinstance(accepted, str):
        reasons = (f"vLLM could not be asked which KV-cache dtypes it takes on {gpu} ({accepted})", auto)
        return ProfileLine(PROFILE, flag, "auto", kept=False, vllm_default=True, reasons=reasons)
    # (bytes, not auto, order vLLM lists it in): the smallest wins, auto first among equals.
    known = [(size, name != "auto", index, name) for index, name in enumerate(accepted)
             if (size := kv_dtype_bytes(name, model_dtype)) is not None]  # fmt: skip
    if not known:
        reasons = (f"vLLM takes none of the KV-cache dtypes caovan knows the size of on {gpu}", auto)
        return ProfileLine(PROFILE, flag, "auto", kept=False, vllm_default=True, reasons=reasons)
    size, _, _, chosen = min(known)
    reasons = (
        f"the smallest KV-cache dtype vLLM's own selection takes on {gpu}: {size} B per value",
        f"it takes {', '.join(accepted)}",
        auto,
    )
    if chosen == "auto":
        return ProfileLine(PROFILE, flag, "auto", kept=False, vllm_default=True, reasons=reasons)
    return ProfileLine(PROFILE, flag, chosen, kept=False, reasons=reasons)


def _one_sequence(layout: KvCacheLayout, tokens: int) -> str:
    blocks = layout.blocks_per_request(tokens)
    gdn = layout.gdn_groups * layout.gdn_slots_per_group
    return (
        f"one {tokens}-token sequence takes {blocks} blocks ({blocks - gdn} of attention KV, {gdn} GDN state slots) "
        f"x {layout.group_size} layers x {layout.page_bytes / (1 << 20):.2f} MiB = "
        f"{gib(layout.bytes_per_request(tokens))}"
    )


def context_line(
    layout: KvCacheLayout, room: KvRoom, *, model_max: int, user_value: int | None, user_auto: bool = False
) -> tuple[ProfileLine, int]:
    """(the ``--max-model-len`` line, the context vLLM will serve). ``user_value``: the user's context;
    ``user_auto``: the user's ``-1``/``auto`` (vLLM fits the longest itself)."""
    flag = "--max-model-len"
    if user_value is not None:
        need = layout.bytes_per_request(user_value)
        if need > room.bytes:
            longest = layout.longest_context(room.bytes, user_value)
            raise ProfileError(
                f"{flag} {user_value} (yours) does not fit at TP={layout.tp}: {_one_sequence(layout, user_value)}, "
                f"{gib(need - room.bytes)} more than the {room.describe()}; "
                + (f"at most {longest} tokens fit" if longest else "not even one block fits")
            )
        reasons = (_one_sequence(layout, user_value), room.describe())
        return ProfileLine(PROFILE, flag, str(user_value), kept=True, reasons=reasons), user_value
    longest = layout.longest_context(room.bytes, model_max)
    if longest == 0:
        raise ProfileError(
            f"no context fits at TP={layout.tp}: {_one_sequence(layout, 1)}, more than the {room.describe()}"
        )
    if user_auto:
        reasons = (
            f"vLLM fits the longest context itself: {longest} of the model's {model_max} tokens",
            room.describe(),
        )
        return ProfileLine(PROFILE, flag, "auto", kept=True, reasons=reasons), longest
    if longest == model_max:
        reasons = (f"the model's own maximum; {_one_sequence(layout, model_max)}", room.describe())
        return ProfileLine(PROFILE, flag, str(model_max), kept=False, reasons=reasons), model_max
    need = layout.bytes_per_request(model_max)
    reasons = (
        f"the model's {model_max} tokens do not fit: {_one_sequence(layout, model_max)}, {gib(need - room.bytes)} "
        f"more than the {room.describe()}",
        f"{longest} tokens ({longest // layout.block_size} blocks of {layout.block_size}) is the longest that fits",
        "give --max-model-len yourself, or more GPUs, for another",
    )
    warning = f"LOWERED from the model's {model_max}"
    return ProfileLine(PROFILE, flag, str(longest), kept=False, reasons=reasons, warning=warning), longest


def num_seqs_line(
    layout: KvCacheLayout, num_blocks: int, *, default: int, user_value: int | None
) -> tuple[ProfileLine, int]:
    """(the ``--max-num-seqs`` line, its value): at most as many sequences as the pool holds at their smallest."""
    flag = "--max-num-seqs"
    smallest = layout.blocks_per_request(1)
    fit = num_blocks // smallest
    held = (
        f"the pool's {num_blocks} blocks hold {fit} sequences at once, each taking at least {smallest} blocks "
        f"({layout.attention_groups} of attention KV, {layout.gdn_groups} GDN groups x "
        f"{slots(layout.gdn_slots_per_group)})"
    )
    if user_value is not None:
        said = (held, f"vLLM preempts past {fit}") if user_value > fit else (held,)
        return ProfileLine(PROFILE, flag, str(user_value), kept=True, reasons=said), user_value
    value = max(1, min(default, fit))
    why = f"vLLM's default {default} for this card" + (" would overcommit them" if fit < default else " fits")
    return ProfileLine(PROFILE, flag, str(value), kept=False, reasons=(held, why)), value


def batched_tokens_line(
    layout: KvCacheLayout, *, context: int, num_seqs: int, default: int, user_value: int | None
) -> tuple[ProfileLine, int]:
    """(the ``--max-num-batched-tokens`` line, its value); ProfileError where vLLM would refuse the user's."""
    flag = "--max-num-batched-tokens"
    if user_value is not None:
        if user_value < num_seqs:  # SchedulerConfig refuses this at start-up
            raise ProfileError(
                f"{flag} {user_value} (yours) is below --max-num-seqs {num_seqs}: vLLM refuses to start with fewer "
                f"batched tokens than sequences ({num_seqs - user_value} short)"
            )
        return ProfileLine(
            PROFILE, flag, str(user_value), kept=True, reasons=(f"--max-num-seqs {num_seqs}",)
        ), user_value
    step = num_seqs * (1 + layout.speculative_tokens)
    value = max(min(default, context), step)
    reasons = [f"vLLM's default {default} for this card"]
    if default > context:
        reasons.append(f"at most the context, {context} tokens")
    if value == step and step > min(default, context):
        reasons.append(
            f"raised to one decode step of {num_seqs} sequences x {1 + layout.speculative_tokens} tokens = {step}"
        )
    return ProfileLine(PROFILE, flag, str(value), kept=False, reasons=tuple(reasons)), value
