"""What a spec-decode benchmark/test case is: head configurations, ``SpecDecodeCase`` and grids of cases.

A case names a head configuration, a batch (B sequences of T = 1 + MTP tokens), dtypes, cache layouts and the edge
features vLLM produces (null slots, CUDA-graph padding, mixed lengths, mixed prefill+spec batches). Torch-free.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any

#: Bytes per element of the dtypes cases may name (torch-free: roofline maths needs no torch).
DTYPE_BYTES: dict[str, int] = {"float16": 2, "bfloat16": 2, "float32": 4, "float64": 8}
STATE_DTYPES = ("float16", "bfloat16", "float32")
#: vLLM's metadata builder makes int32 query_start_loc / state indices / accepted counts.
INDEX_DTYPE_BYTES = 4
SSM_LAYOUTS = ("vk", "kv")  # (HV, V, K) for vLLM >= 0.16, (HV, K, V) before
#: Conv state stored (state_len, dim), transposed by the core ("SD"), or dim-first ("DS", >= 0.20).
CONV_LAYOUTS = ("SD", "DS")
ACCEPTED_MODES = ("random", "sweep")

#: vLLM's NULL_BLOCK_ID (>= 0.20): block 0 is reserved, a state index of 0 means "no slot".
NULL_BLOCK_ID = 0


@dataclass(frozen=True)
class HeadConfig:
    """Per-GPU head configuration of one GDN layer (already divided by the tensor-parallel size)."""

    name: str
    num_k_heads: int  # H
    num_v_heads: int  # HV
    head_k_dim: int  # K
    head_v_dim: int  # V
    conv_width: int = 4

    @property
    def key_dim(self) -> int:
        return self.num_k_heads * self.head_k_dim

    @property
    def value_dim(self) -> int:
        return self.num_v_heads * self.head_v_dim

    @property
    def conv_dim(self) -> int:
        return 2 * self.key_dim + self.value_dim


HEAD_CONFIGS: dict[str, HeadConfig] = {
    h.name: h
    for h in (
        # Small enough for the Triton interpreter on a 2-core CPU.
        HeadConfig("tiny", num_k_heads=1, num_v_heads=2, head_k_dim=16, head_v_dim=16),
        # Small GPU shapes covering the three HV/H ratios real models use (1, 2, 3).
        HeadConfig("small", num_k_heads=2, num_v_heads=6, head_k_dim=32, head_v_dim=32),
        HeadConfig("small-ratio1", num_k_heads=4, num_v_heads=4, head_k_dim=64, head_v_dim=64),
        HeadConfig("small-ratio2", num_k_heads=2, num_v_heads=4, head_k_dim=64, head_v_dim=64),
        # Qwen3.6-27B / Qwen3.5-27B at TP=2: H=16, HV=48 split over two GPUs; conv dim 5120.
        HeadConfig("qwen3.6-27b-tp2", num_k_heads=8, num_v_heads=24, head_k_dim=128, head_v_dim=128),
        # Qwen3-Next-80B at TP=2: H=16, HV=32 split over two GPUs.
        HeadConfig("qwen3-next-80b-tp2", num_k_heads=8, num_v_heads=16, head_k_dim=128, head_v_dim=128),
    )
}

_SHORT_DTYPE = {"float16": "fp16", "bfloat16": "bf16", "float32": "fp32", "float64": "fp64"}


@dataclass(frozen=True)
class SpecDecodeCase:
    """One spec-decode (MTP verify) batch to build, time and check."""

    head: str  # key of HEAD_CONFIGS
    num_seqs: int  # B: real sequences with tokens and valid cache slots
    num_spec_tokens: int  # MTP draft tokens; every sequence has up to T = 1 + MTP query tokens
    ssm_dtype: str = "float32"
    act_dtype: str = "float16"  # SM75 has no bf16
    conv_dtype: str | None = None  # conv-state dtype (vLLM's --mamba-cache-dtype); None: act_dtype
    ssm_layout: str = "vk"
    conv_layout: str = "SD"  # vLLM 0.21.0's default
    conv_bias: bool = False  # Qwen3-Next / Qwen3.5 conv1d has no bias
    accepted: str = "random"  # "random": num_accepted_tokens uniform in 1..T; "sweep": 1 + n % T
    mixed_lengths: bool = False  # query lengths uniform in 1..T instead of all T
    null_seqs: int = 0  # extra sequences WITH tokens whose every slot is the null block
    padded_seqs: int = 0  # CUDA-graph padded rows: zero length, null slots, num_accepted_tokens 1
    padded_tokens: int = 0  # token rows past the last sequence (vLLM pads num_actual_tokens)
    null_write_slots: bool = False  # null out one non-initial, non-zero column per sequence
    mixed_batch_tokens: int = 0  # >0: non-spec (prefill) rows interleaved, spec rows via token_index
    strided_inputs: bool = False  # mixed_qkv / a / b as row-strided slices of wider buffers
    seed: int = 0

    def __post_init__(self) -> None:
        def bad(what: str) -> ValueError:
            return ValueError(f"SpecDecodeCase({self.head!r}, B={self.num_seqs}): {what}")

        if self.head not in HEAD_CONFIGS:
            raise bad(f"head must be one of {sorted(HEAD_CONFIGS)}, got {self.head!r}")
        if self.num_seqs < 0 or self.null_seqs < 0 or self.padded_seqs < 0:
            raise bad("num_seqs, null_seqs and padded_seqs must be >= 0")
        if self.padded_tokens < 0 or self.mixed_batch_tokens < 0:
            raise bad("padded_tokens and mixed_batch_tokens must be >= 0")
        if self.num_spec_tokens < 1:
            raise bad(f"num_spec_tokens (MTP) must be >= 1, got {self.num_spec_tokens}")
        for name in ("ssm_dtype", "act_dtype"):
            if getattr(self, name) not in STATE_DTYPES:
                raise bad(f"{name} must be one of {STATE_DTYPES}, got {getattr(self, name)!r}")
        if self.conv_dtype is not None and self.conv_dtype not in STATE_DTYPES:
            raise bad(f"conv_dtype must be None or one of {STATE_DTYPES}, got {self.conv_dtype!r}")
        if self.ssm_layout not in SSM_LAYOUTS:
            raise bad(f"ssm_layout must be one of {SSM_LAYOUTS}, got {self.ssm_layout!r}")
        if self.conv_layout not in CONV_LAYOUTS:
            raise bad(f"conv_layout must be one of {CONV_LAYOUTS}, got {self.conv_layout!r}")
        if self.accepted not in ACCEPTED_MODES:
            raise bad(f"accepted must be one of {ACCEPTED_MODES}, got {self.accepted!r}")

    @property
    def head_config(self) -> HeadConfig:
        return HEAD_CONFIGS[self.head]

    @property
    def max_query_len(self) -> int:
        """T = 1 + MTP: columns of the state-index table, and the longest query."""
        return 1 + self.num_spec_tokens

    @property
    def conv_state_dtype(self) -> str:
        return self.conv_dtype or self.act_dtype

    @property
    def id(self) -> str:
        """Stable, readable case id (pytest ids, table rows, JSON rows)."""
        parts = [
            self.head,
            f"B{self.num_seqs}",
            f"mtp{self.num_spec_tokens}",
            f"ssm-{_SHORT_DTYPE[self.ssm_dtype]}",
        ]
        if self.act_dtype != "float16":
            parts.append(f"act-{_SHORT_DTYPE[self.act_dtype]}")
        if self.conv_dtype is not None and self.conv_dtype != self.act_dtype:
            parts.append(f"conv-{_SHORT_DTYPE[self.conv_dtype]}")
        if self.ssm_layout != "vk":
            parts.append(f"ssm-{self.ssm_layout}")
        if self.conv_layout != "SD":
            parts.append(f"conv-{self.conv_layout}")
        if self.conv_bias:
            parts.append("bias")
        if self.accepted != "random":
            parts.append(f"acc-{self.accepted}")
        if self.mixed_lengths:
            parts.append("varlen")
        if self.null_seqs:
            parts.append(f"null{self.null_seqs}")
        if self.padded_seqs or self.padded_tokens:
            parts.append(f"pad{self.padded_seqs}r{self.padded_tokens}t")
        if self.null_write_slots:
            parts.append("nullw")
        if self.mixed_batch_tokens:
            parts.append(f"mixed{self.mixed_batch_tokens}")
        if self.strided_inputs:
            parts.append("strided")
        if self.seed:
            parts.append(f"s{self.seed}")
        return "/".join(parts)

    def as_dict(self) -> dict[str, Any]:
        """Plain JSON-able description (every field plus the derived head numbers)."""
        d = {f.name: getattr(self, f.name) for f in fields(self)}
        h = self.head_config
        d.update(
            id=self.id,
            num_k_heads=h.num_k_heads,
            num_v_heads=h.num_v_heads,
            head_k_dim=h.head_k_dim,
            head_v_dim=h.head_v_dim,
            conv_width=h.conv_width,
            conv_dim=h.conv_dim,
        )
        return d


def expand_grid(grid: Mapping[str, Sequence[Any]], **fixed: Any) -> list[SpecDecodeCase]:
    """Cartesian product of ``grid`` (field -> values) in declaration order, plus ``fixed``."""
    names = list(grid)
    return [
        SpecDecodeCase(**dict(zip(names, values, strict=True)), **fixed)
        for values in itertools.product(*(grid[n] for n in names))
    ]


def cases_by_id(cases: Iterable[SpecDecodeCase]) -> dict[str, SpecDecodeCase]:
    out: dict[str, SpecDecodeCase] = {}
    for c in cases:
        if c.id in out:
            raise ValueError(f"duplicate case id {c.id!r}")
        out[c.id] = c
    return out
