"""``caovan bench prefill``'s cases, as data: per-GPU GDN shapes, prompt lengths, batches and how a batch of B
sequences splits B x L tokens. Torch-free (the options are checked, and the cases listed, without torch).
"""

from __future__ import annotations

import itertools
import zlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class PrefillShape:
    """Per-GPU head shape of one GDN layer (already divided by the tensor-parallel size)."""

    name: str
    num_k_heads: int  # H
    num_v_heads: int  # HV
    head_k_dim: int  # K
    head_v_dim: int  # V
    note: str = ""


PREFILL_SHAPES: dict[str, PrefillShape] = {
    s.name: s
    for s in (
        # Qwen3.6-27B (and Qwen3.5-27B): 16 key heads, 48 value heads, head dims 128.
        PrefillShape("qwen3.6-27b-tp1", 16, 48, 128, 128, "Qwen3.6-27B on one GPU"),
        PrefillShape("qwen3.6-27b-tp2", 8, 24, 128, 128, "Qwen3.6-27B at TP=2, per GPU"),
        # Small enough for the Triton interpreter on a 2-core CPU (tests).
        PrefillShape("tiny", 2, 4, 32, 32, "CPU / Triton interpreter tests"),
    )
}
DEFAULT_SHAPES: tuple[str, ...] = ("qwen3.6-27b-tp1", "qwen3.6-27b-tp2")
DEFAULT_LENGTHS: tuple[int, ...] = (64, 256, 1024, 4096, 16384, 65536)
DEFAULT_BATCHES: tuple[int, ...] = (1, 4)
ACT_DTYPES = ("float16", "bfloat16")
STATE_DTYPES = ("float16", "bfloat16", "float32")
#: Above this many tokens in a case, the float64 oracle (token by token) is not run: errors are null, with why.
DEFAULT_MAX_REFERENCE_TOKENS = 65536 * 4

_SHORT_DTYPE = {"float16": "fp16", "bfloat16": "bf16", "float32": "fp32"}


def split_lengths(length: int, batch: int) -> tuple[int, ...]:
    """The lengths of ``batch`` sequences of unequal lengths summing to ``batch * length``.

    Factors in pairs around 1: ``1 -+ 0.5 j / (batch // 2)`` for j = 1 .. batch // 2, and 1 itself for an odd batch;
    4 sequences get 0.5, 0.75, 1.25 and 1.5 x ``length``. Rounded, the last taking what makes the sum exact.
    ValueError when a sequence would get no token (a batch too large for so short a length).
    """
    if length < 1 or batch < 1:
        raise ValueError(f"length and batch must be >= 1, got length {length}, batch {batch}")
    lengths = _split(length, batch)
    if min(lengths) < 1:
        least = next(n for n in itertools.count(length + 1) if min(_split(n, batch)) >= 1)
        raise ValueError(
            f"length {length} with batch {batch}: {lengths} leaves a sequence without tokens "
            f"(use a length of at least {least} for batch {batch})"
        )
    return lengths


def _split(length: int, batch: int) -> tuple[int, ...]:
    if batch == 1:
        return (length,)
    half = batch // 2
    steps = [0.5 * j / half for j in range(1, half + 1)]
    factors = sorted([1 - d for d in steps] + [1 + d for d in steps] + ([1.0] if batch % 2 else []))
    lengths = [round(f * length) for f in factors[:-1]]
    return (*lengths, batch * length - sum(lengths))


@dataclass(frozen=True)
class PrefillCase:
    """One varlen prefill batch: ``batch`` sequences, ``batch x length`` tokens in all."""

    shape: str  # key of PREFILL_SHAPES
    length: int  # L: the mean prompt length
    batch: int  # B: sequences
    act_dtype: str = "float16"
    state_dtype: str = "float32"
    seed: int = 0

    def __post_init__(self) -> None:
        if self.shape not in PREFILL_SHAPES:
            raise ValueError(f"PrefillCase: shape must be one of {sorted(PREFILL_SHAPES)}, got {self.shape!r}")
        if self.act_dtype not in ACT_DTYPES:
            raise ValueError(f"PrefillCase: act_dtype must be one of {ACT_DTYPES}, got {self.act_dtype!r}")
        if self.state_dtype not in STATE_DTYPES:
            raise ValueError(f"PrefillCase: state_dtype must be one of {STATE_DTYPES}, got {self.state_dtype!r}")
        split_lengths(self.length, self.batch)  # raises for a batch with an empty sequence

    @property
    def head(self) -> PrefillShape:
        return PREFILL_SHAPES[self.shape]

    @property
    def seq_lens(self) -> tuple[int, ...]:
        return split_lengths(self.length, self.batch)

    @property
    def total_tokens(self) -> int:
        return self.batch * self.length

    @property
    def has_initial_state(self) -> tuple[bool, ...]:
        """Half of the sequences (every other one, the first included) start from a cached state."""
        return tuple(i % 2 == 0 for i in range(self.batch))

    @property
    def id(self) -> str:
        parts = [self.shape, f"L{self.length}", f"B{self.batch}"]
        if self.act_dtype != "float16":
            parts.append(f"act-{_SHORT_DTYPE[self.act_dtype]}")
        if self.state_dtype != "float32":
            parts.append(f"ssm-{_SHORT_DTYPE[self.state_dtype]}")
        return "/".join(parts)

    @property
    def input_seed(self) -> int:
        """The seed of this case's random inputs: ``seed`` and the id, so that every case draws its own."""
        return (zlib.crc32(self.id.encode()) ^ self.seed) & 0x7FFFFFFF

    def as_dict(self) -> dict[str, Any]:
        h = self.head
        return {
            "id": self.id,
            "shape": self.shape,
            "num_k_heads": h.num_k_heads,
            "num_v_heads": h.num_v_heads,
            "head_k_dim": h.head_k_dim,
            "head_v_dim": h.head_v_dim,
            "length": self.length,
            "batch": self.batch,
            "seq_lens": list(self.seq_lens),
            "total_tokens": self.total_tokens,
            "has_initial_state": list(self.has_initial_state),
            "act_dtype": self.act_dtype,
            "state_dtype": self.state_dtype,
            "seed": self.seed,
        }


def prefill_cases(
    shapes: Iterable[str] = DEFAULT_SHAPES,
    lengths: Iterable[int] = DEFAULT_LENGTHS,
    batches: Iterable[int] = DEFAULT_BATCHES,
    *,
    act_dtype: str = "float16",
    state_dtype: str = "float32",
    seed: int = 0,
) -> list[PrefillCase]:
    """Every shape x length x batch, in that order (the shape outermost)."""
    return [
        PrefillCase(shape, length, batch, act_dtype=act_dtype, state_dtype=state_dtype, seed=seed)
        for shape, length, batch in itertools.product(shapes, lengths, batches)
    ]


# --------------------------------------------------------------------------------------------------
# Options
# --------------------------------------------------------------------------------------------------
def parse_counts(option: str, text: str) -> tuple[int, ...]:
    """``"64,256"`` as (64, 256): distinct integers >= 1; ValueError with one line naming ``option`` otherwise."""
    try:
        values = tuple(int(item) for item in text.split(","))
    except ValueError:
        raise ValueError(f"{option} {text!r}: expected whole numbers separated by commas") from None
    if min(values) < 1 or len(set(values)) != len(values):
        raise ValueError(f"{option} {text!r}: expected distinct numbers >= 1")
    return values


def parse_shapes(text: str) -> tuple[str, ...]:
    """``"qwen3.6-27b-tp2,tiny"``: names of PREFILL_SHAPES, distinct; ValueError naming the unknown ones."""
    names = tuple(item.strip() for item in text.split(","))
    unknown = [n for n in names if n not in PREFILL_SHAPES]
    if unknown:
        known = ", ".join(PREFILL_SHAPES)
        raise ValueError(f"--shapes {text!r}: unknown shape {', '.join(map(repr, unknown))} (known: {known})")
    if len(set(names)) != len(names):
        raise ValueError(f"--shapes {text!r}: a shape is named twice")
    return names


def check_splits(lengths: Sequence[int], batches: Sequence[int]) -> None:
    """ValueError (one line, naming both options) when a length cannot be split over a batch."""
    for length, batch in itertools.product(lengths, batches):
        try:
            split_lengths(length, batch)
        except ValueError as exc:
            raise ValueError(f"--lengths/--batches: {exc}") from None
