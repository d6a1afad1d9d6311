"""Spec-decode benchmark/test cases declared as data, and a builder of vLLM-shaped random inputs.

A case (``SpecDecodeCase``) names a head configuration, a batch (B sequences of T = 1 + MTP tokens),
dtypes, cache layouts and the edge features vLLM produces (null slots, CUDA-graph padding, mixed
lengths, mixed prefill+spec batches). ``build_inputs`` turns a case into tensors laid out the way
vLLM 0.21.0 lays out its mamba caches (``GPUModelRunner._reshape_kv_cache_tensors``): one raw byte
buffer of pages, each page holding the conv state then the SSM state of one cache block, viewed with
``as_strided`` so dim 0 strides over whole pages (the views are not contiguous). Every tensor is
also described by host-side metadata (lengths, accepted counts, slots) so byte counts and masks need
no device sync.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
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
#: Cache pages are padded like vLLM pads mamba pages to the attention page size (page_size_padded):
#: one page size per head config, big enough for MTP <= PAGE_MAX_MTP with fp32 states, plus at
#: least PAGE_PADDING_BYTES, rounded up to PAGE_ALIGN. One size for every MTP and dtype is also what
#: keeps Triton from compiling a kernel per case (vLLM's kernels take the page stride as constexpr).
#: The unused tail of every page is filled with PAGE_PADDING_FILL: tests prove nobody writes it.
PAGE_MAX_MTP = 4
#: Blocks in every case's cache (more when a case needs them): B=8 at MTP=4 uses 1 + 40.
NUM_CACHE_BLOCKS = 64
PAGE_PADDING_BYTES = 256
PAGE_ALIGN = 4096
PAGE_PADDING_FILL = 0xA5


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


# --------------------------------------------------------------------------------------------------
# Case sets (data). Bench sets are timed; test sets are checked against vLLM and float64.
# --------------------------------------------------------------------------------------------------
MODEL_HEADS = ("qwen3.6-27b-tp2", "qwen3-next-80b-tp2")

BENCH_GRIDS: dict[str, dict[str, Sequence[Any]]] = {
    "small": {
        "head": ("small", "small-ratio1"),
        "num_seqs": (1, 4),
        "num_spec_tokens": (1, 3),
        "ssm_dtype": ("float16", "float32"),
    },
    "model": {
        "head": MODEL_HEADS,
        "num_seqs": (1, 2, 4, 8),
        "num_spec_tokens": (1, 2, 3, 4),
        "ssm_dtype": ("float16", "float32"),
    },
}
#: --quick: the deployment that matters most (27B TP=2, MTP=3) at a few batch sizes.
BENCH_GRIDS_QUICK: dict[str, dict[str, Sequence[Any]]] = {
    "small": {
        "head": ("small",),
        "num_seqs": (4,),
        "num_spec_tokens": (3,),
        "ssm_dtype": ("float32",),
    },
    "model": {
        "head": ("qwen3.6-27b-tp2",),
        "num_seqs": (1, 4, 8),
        "num_spec_tokens": (3,),
        "ssm_dtype": ("float16", "float32"),
    },
}
BENCH_CASE_SETS = ("small", "model", "all")


def bench_cases(which: str = "all", *, quick: bool = False) -> list[SpecDecodeCase]:
    """The cases ``caovan bench kernels --cases WHICH [--quick]`` runs."""
    if which not in BENCH_CASE_SETS:
        raise ValueError(f"bench case set must be one of {BENCH_CASE_SETS}, got {which!r}")
    grids = BENCH_GRIDS_QUICK if quick else BENCH_GRIDS
    names = ("small", "model") if which == "all" else (which,)
    return [case for name in names for case in expand_grid(grids[name])]


#: Kernel-tier test grid: every B and MTP at a small shape and the 27B TP=2 shape, both SSM dtypes.
KERNEL_TEST_GRID: dict[str, Sequence[Any]] = {
    "head": ("small", "qwen3.6-27b-tp2"),
    "num_seqs": (1, 2, 4, 8),
    "num_spec_tokens": (1, 2, 3, 4),
    "ssm_dtype": ("float16", "float32"),
}


def busy_server_case(num_seqs: int, num_spec_tokens: int) -> SpecDecodeCase:
    """Everything a busy server mixes into one batch, at the 27B shape: every accepted count, mixed lengths,
    a null-slot sequence, CUDA-graph padded rows and tokens, and null per-token write slots."""
    return SpecDecodeCase(
        head="qwen3.6-27b-tp2",
        num_seqs=num_seqs,
        num_spec_tokens=num_spec_tokens,
        accepted="sweep",
        mixed_lengths=True,
        null_seqs=1,
        padded_seqs=2,
        padded_tokens=3,
        null_write_slots=True,
    )


def _edge_cases() -> list[SpecDecodeCase]:
    cases: list[SpecDecodeCase] = []
    for head in ("small", "qwen3.6-27b-tp2"):
        for ssm_dtype in ("float16", "float32"):
            common = dict(head=head, num_spec_tokens=3, ssm_dtype=ssm_dtype)
            cases += [
                SpecDecodeCase(num_seqs=4, null_seqs=2, **common),
                SpecDecodeCase(num_seqs=3, padded_seqs=5, padded_tokens=6, **common),
                SpecDecodeCase(num_seqs=4, null_write_slots=True, **common),
                SpecDecodeCase(num_seqs=8, mixed_lengths=True, **common),
                SpecDecodeCase(num_seqs=8, accepted="sweep", **common),
                SpecDecodeCase(num_seqs=4, mixed_batch_tokens=9, **common),
                SpecDecodeCase(num_seqs=4, strided_inputs=True, conv_bias=True, **common),
                SpecDecodeCase(num_seqs=4, conv_layout="DS", **common),
                SpecDecodeCase(num_seqs=4, ssm_layout="kv", **common),
            ]
    # Everything at once (what a busy server produces), every accepted count at MTP 1..4.
    for mtp in (1, 2, 4):
        cases.append(busy_server_case(num_seqs=2 * (1 + mtp), num_spec_tokens=mtp))
    cases += [
        SpecDecodeCase(head="small-ratio1", num_seqs=4, num_spec_tokens=2),
        SpecDecodeCase(head="small-ratio2", num_seqs=4, num_spec_tokens=2, ssm_dtype="float16"),
        SpecDecodeCase(head="qwen3-next-80b-tp2", num_seqs=4, num_spec_tokens=3),
        SpecDecodeCase(head="qwen3.6-27b-tp2", num_seqs=4, num_spec_tokens=3, conv_dtype="float32"),
    ]
    return cases


#: Kernel-tier edge cases: the batches vLLM really produces besides the plain grid.
KERNEL_EDGE_CASES: list[SpecDecodeCase] = _edge_cases()

#: ``caovan verify``: model shapes and the edge cases a server hits, no vLLM needed.
VERIFY_CASES: list[SpecDecodeCase] = [
    *expand_grid(
        {
            "head": MODEL_HEADS,
            "num_seqs": (1, 4),
            "num_spec_tokens": (1, 3, 4),
            "ssm_dtype": ("float16", "float32"),
        }
    ),
    busy_server_case(num_seqs=6, num_spec_tokens=3),
    SpecDecodeCase(head="qwen3.6-27b-tp2", num_seqs=4, num_spec_tokens=3, mixed_batch_tokens=7),
]


# --------------------------------------------------------------------------------------------------
# Host-side plan of a batch (no torch): which rows, slots and accepted counts each sequence has.
# --------------------------------------------------------------------------------------------------
@dataclass
class SeqPlan:
    kind: str  # "real", "null" (tokens but null slots) or "padded" (zero length)
    length: int
    num_accepted: int
    slots: list[int]  # T_max state indices; NULL_BLOCK_ID = no slot
    rows: list[int] = field(default_factory=list)  # rows of mixed_qkv / a / b / out


@dataclass
class BatchPlan:
    case: SpecDecodeCase
    seqs: list[SeqPlan]
    num_state_rows: int  # N' >= N rows of state_indices / num_accepted_tokens
    num_token_rows: int  # rows of mixed_qkv / a / b / out
    num_blocks: int
    token_index: list[int] | None  # spec token i -> row (mixed batches only)

    @property
    def query_start_loc(self) -> list[int]:
        qsl = [0]
        for s in self.seqs:
            qsl.append(qsl[-1] + s.length)
        return qsl

    def state_index_rows(self) -> list[list[int]]:
        extra = [[NULL_BLOCK_ID] * self.case.max_query_len] * (self.num_state_rows - len(self.seqs))
        return [s.slots for s in self.seqs] + extra

    def accepted_rows(self) -> list[int]:
        # vLLM fills padded rows with 1 (gdn_attn.py: num_accepted_tokens[...].fill_(1)).
        return [s.num_accepted for s in self.seqs] + [1] * (self.num_state_rows - len(self.seqs))

    def rows_of(self, kind: str) -> list[int]:
        return [r for s in self.seqs if s.kind == kind for r in s.rows]


def plan_batch(case: SpecDecodeCase) -> BatchPlan:
    """Sequences, slots, accepted counts and token rows of ``case`` (deterministic in its seed)."""
    rng = random.Random(f"caovan-plan-{case.seed}")
    t_max = case.max_query_len
    kinds = ["real"] * case.num_seqs + ["null"] * case.null_seqs
    rng.shuffle(kinds)  # null sequences sit among the real ones
    kinds += ["padded"] * case.padded_seqs  # vLLM pads at the back
    seqs: list[SeqPlan] = []
    for n, kind in enumerate(kinds):
        if kind == "padded":
            length = 0
        else:
            length = rng.randint(1, t_max) if case.mixed_lengths else t_max
        if kind == "padded":
            accepted = 1
        elif case.accepted == "sweep":
            accepted = 1 + n % t_max
        else:
            accepted = rng.randint(1, t_max)
        seqs.append(SeqPlan(kind=kind, length=length, num_accepted=accepted, slots=[NULL_BLOCK_ID] * t_max))

    # One distinct cache block per (real sequence, token column); block 0 is the null block and
    # spare blocks stay unused so a stray write anywhere is caught by comparing whole caches. The
    # cache has a fixed block count (like vLLM's) unless a case needs more: vLLM's conv kernel
    # takes the number of cache lines as a constexpr, so this also spares a compile per case.
    num_real = sum(s.kind == "real" for s in seqs)
    num_blocks = max(NUM_CACHE_BLOCKS, 1 + num_real * t_max + 3)
    free_blocks = list(range(1, num_blocks))
    rng.shuffle(free_blocks)
    for s in seqs:
        if s.kind != "real":
            continue
        s.slots = [free_blocks.pop() for _ in range(t_max)]
        if case.null_write_slots:
            # A column that is neither the conv column (0) nor the initial-state column.
            choices = [t for t in range(1, t_max) if t != s.num_accepted - 1]
            if choices:
                s.slots[rng.choice(choices)] = NULL_BLOCK_ID

    num_spec_tokens = sum(s.length for s in seqs)
    if case.mixed_batch_tokens:
        total = num_spec_tokens + case.mixed_batch_tokens
        token_index = sorted(rng.sample(range(total), num_spec_tokens))
    else:
        total = num_spec_tokens
        token_index = None
    i = 0
    for s in seqs:
        spec_ids = range(i, i + s.length)
        s.rows = [token_index[j] for j in spec_ids] if token_index is not None else list(spec_ids)
        i += s.length
    num_token_rows = total + case.padded_tokens
    padded = case.padded_seqs > 0 or case.padded_tokens > 0
    # Under full CUDA graphs vLLM sizes the spec state-index table by the padded token count.
    num_state_rows = max(len(seqs), num_token_rows) if padded else len(seqs)
    return BatchPlan(case, seqs, num_state_rows, num_token_rows, num_blocks, token_index)


# --------------------------------------------------------------------------------------------------
# Tensors
# --------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class _ViewSpec:
    backing: str  # key into SpecDecodeInputs.backing
    dtype: Any  # torch dtype the backing is reinterpreted as (raw byte buffers hold mixed dtypes)
    size: tuple[int, ...]
    stride: tuple[int, ...]
    offset: int  # elements of ``dtype``
    transpose_last: bool = False  # logical view = stored view with its last two dims swapped


def _make_view(backing: dict[str, Any], spec: _ViewSpec):
    import torch

    base = backing[spec.backing]
    if base.dtype != spec.dtype:
        base = base.view(spec.dtype)
    v = torch.as_strided(base, spec.size, spec.stride, spec.offset)
    return v.transpose(-1, -2) if spec.transpose_last else v


#: Positional tensor arguments of ``gdn_spec_decode``, in order.
TENSOR_ARGS = (
    "mixed_qkv",
    "a",
    "b",
    "A_log",
    "dt_bias",
    "conv_weight",
    "conv_bias",
    "conv_state",
    "ssm_state",
    "query_start_loc",
    "state_indices",
    "num_accepted_tokens",
    "out",
)


@dataclass
class SpecDecodeInputs:
    """Tensors of one case, as views into backing buffers so clones keep vLLM's exact strides."""

    case: SpecDecodeCase
    plan: BatchPlan
    backing: dict[str, Any]
    views: dict[str, _ViewSpec]
    token_index: Any = None  # int64 tensor or None

    def __getattr__(self, name: str):
        views = self.__dict__.get("views", {})
        if name in views:
            return _make_view(self.backing, views[name])
        raise AttributeError(name)

    @property
    def conv_bias(self):
        return _make_view(self.backing, self.views["conv_bias"]) if "conv_bias" in self.views else None

    # ------------------------------------------------------------------ copies
    def clone(self) -> SpecDecodeInputs:
        """Deep copy with identical strides and offsets (clone the backing buffers, re-view)."""
        return replace(self, backing={k: v.clone() for k, v in self.backing.items()})

    def nbytes(self) -> int:
        """Memory of the backing buffers (what one clone allocates)."""
        return sum(v.numel() * v.element_size() for v in self.backing.values())

    def copy_from(self, other: SpecDecodeInputs) -> None:
        """Overwrite this copy's buffers in place with ``other``'s values (CUDA-graph inputs)."""
        for k, v in self.backing.items():
            v.copy_(other.backing[k])

    def to_float64(self) -> SpecDecodeInputs:
        """Same logical values, every float tensor upcast to float64 (for the float64 reference).

        Upcasting fp16/fp32 is exact, so the reference sees the very same inputs; its outputs and
        states are then stored in float64 without rounding.
        """
        import torch

        backing: dict[str, Any] = {}
        views: dict[str, _ViewSpec] = {}
        for name, spec in self.views.items():
            t = _make_view(self.backing, spec)
            if t.is_floating_point():
                t = t.to(torch.float64)
            t = t.clone()  # plain dense tensor with the same logical shape
            backing[name] = t
            views[name] = _ViewSpec(name, t.dtype, tuple(t.shape), tuple(t.stride()), 0)
        return replace(self, backing=backing, views=views)

    def with_ssm_layout(self, layout: str) -> SpecDecodeInputs:
        """A copy whose SSM state is stored in ``layout`` (same page-strided cache otherwise).

        vLLM >= 0.16 only handles "vk"; tests run vLLM on the "vk" copy of a "kv" case so its
        numerical error can still be measured (the maths does not depend on where numbers live).
        """
        if layout not in SSM_LAYOUTS:
            raise ValueError(f"ssm layout must be one of {SSM_LAYOUTS}, got {layout!r}")
        new = self.clone()
        if layout == self.case.ssm_layout:
            return new
        spec = self.views["ssm_state"]
        blocks, hv, d1, d2 = spec.size
        s0 = spec.stride[0]
        new_spec = replace(spec, size=(blocks, hv, d2, d1), stride=(s0, d1 * d2, d1, 1))
        _make_view(new.backing, new_spec).copy_(self.ssm_state.transpose(-1, -2))
        new.views = {**new.views, "ssm_state": new_spec}
        new.case = replace(self.case, ssm_layout=layout)
        return new

    def ssm_state_vk(self):
        """The SSM state as a logical (blocks, HV, V, K) view whatever the storage layout."""
        s = self.ssm_state
        return s if self.case.ssm_layout == "vk" else s.transpose(-1, -2)

    # ------------------------------------------------------------------ calling conventions
    def kernel_args(self) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """Positional and keyword arguments of ``gdn_spec_decode`` (the shared contract)."""
        h = self.case.head_config
        args = tuple(getattr(self, name) for name in TENSOR_ARGS)
        kwargs = dict(
            num_k_heads=h.num_k_heads,
            head_k_dim=h.head_k_dim,
            head_v_dim=h.head_v_dim,
            ssm_layout=self.case.ssm_layout,
            null_slot_max=NULL_BLOCK_ID,
            token_index=self.token_index,
        )
        return args, kwargs

    def page_padding_intact(self) -> bool:
        """True when no byte of the cache pages past the conv and SSM states changed."""
        raw = self.backing.get("cache")
        if raw is None:
            return True
        page_bytes = raw.numel() // self.plan.num_blocks
        used = state_bytes(self.case)
        pad = raw.view(self.plan.num_blocks, page_bytes)[:, sum(used) :]
        return bool((pad == PAGE_PADDING_FILL).all())


def state_bytes(case: SpecDecodeCase) -> tuple[int, int]:
    """Bytes of one block's conv state and SSM state (the used head of a cache page)."""
    h = case.head_config
    state_len = h.conv_width - 1 + case.num_spec_tokens
    conv = state_len * h.conv_dim * DTYPE_BYTES[case.conv_state_dtype]
    ssm = h.num_v_heads * h.head_v_dim * h.head_k_dim * DTYPE_BYTES[case.ssm_dtype]
    return conv, ssm


def page_size_bytes(case: SpecDecodeCase) -> int:
    """Cache page size of the case's head config (same for every MTP <= PAGE_MAX_MTP and dtype)."""
    mtp = max(PAGE_MAX_MTP, case.num_spec_tokens)
    widest = replace(case, num_spec_tokens=mtp, ssm_dtype="float32", conv_dtype="float32")
    need = sum(state_bytes(widest)) + PAGE_PADDING_BYTES
    return -(-need // PAGE_ALIGN) * PAGE_ALIGN


def _torch_dtype(name: str):
    import torch

    return getattr(torch, name)


def build_inputs(case: SpecDecodeCase, device: Any = "cpu", *, value_seed: int | None = None) -> SpecDecodeInputs:
    """Random inputs for ``case``, made on ``device`` (deterministic per seed and device type).

    The batch plan (lengths, slots, accepted counts: every shape) comes from ``case.seed``; tensor
    values from ``value_seed`` (default ``case.seed``), so a CUDA-graph test can refill captured
    buffers with new values of the same shapes. Values are drawn on the device itself (a model-size
    cache is tens of millions of numbers: too slow to draw on the CPU for every test case), so a GPU
    and the CPU draw different, equally valid, numbers.

    Value ranges follow the real layer: A_log = log(U[1, 16]), dt_bias = softplus^-1(U[1e-3, 0.1])
    (Mamba-2 initialisation), unit-scale activations and conv history, conv weights ~ N(0, 1/width),
    SSM state ~ N(0, 0.1^2).
    """
    import torch

    plan = plan_batch(case)
    h = case.head_config
    t_max = case.max_query_len
    device = torch.device(device)
    gen = torch.Generator(device=device)
    gen.manual_seed(case.seed if value_seed is None else value_seed)
    act = _torch_dtype(case.act_dtype)
    conv_dt = _torch_dtype(case.conv_state_dtype)
    ssm_dt = _torch_dtype(case.ssm_dtype)

    def randn(*shape, scale=1.0, dtype=act):
        x = torch.randn(*shape, generator=gen, dtype=torch.float32, device=device)
        return (x * scale).to(dtype)

    backing: dict[str, Any] = {}
    views: dict[str, _ViewSpec] = {}

    def dense(name: str, t):
        backing[name] = t
        views[name] = _ViewSpec(name, t.dtype, tuple(t.shape), tuple(t.stride()), 0)

    rows = plan.num_token_rows
    # --- activations (rows past the batch and non-spec rows are random too: nobody may read them)
    if case.strided_inputs:
        # vLLM <= 0.20 sliced mixed_qkv out of the wider in_proj output, a/b out of one ba buffer.
        extra = 64
        proj = randn(rows, h.conv_dim + extra)
        backing["proj"] = proj
        views["mixed_qkv"] = _ViewSpec("proj", act, (rows, h.conv_dim), (h.conv_dim + extra, 1), 0)
        ba = randn(rows, 2 * h.num_v_heads)
        backing["ba"] = ba
        hv = h.num_v_heads
        views["b"] = _ViewSpec("ba", act, (rows, hv), (2 * hv, 1), 0)
        views["a"] = _ViewSpec("ba", act, (rows, hv), (2 * hv, 1), hv)
    else:
        dense("mixed_qkv", randn(rows, h.conv_dim))
        dense("b", randn(rows, h.num_v_heads))
        dense("a", randn(rows, h.num_v_heads))

    # --- layer parameters
    f64 = dict(dtype=torch.float64, device=device)
    a_log = torch.empty(h.num_v_heads, **f64).uniform_(1.0, 16.0, generator=gen).log()
    dense("A_log", a_log.to(torch.float32))
    dt = torch.empty(h.num_v_heads, **f64).uniform_(1e-3, 0.1, generator=gen)
    dense("dt_bias", (dt + torch.log(-torch.expm1(-dt))).to(act))  # softplus^-1(dt)
    dense("conv_weight", randn(h.conv_dim, h.conv_width, scale=h.conv_width**-0.5))
    if case.conv_bias:
        dense("conv_bias", randn(h.conv_dim, scale=0.1))

    # --- caches: raw pages [conv state | SSM state | padding], as vLLM's _reshape_kv_cache_tensors
    state_len = h.conv_width - 1 + case.num_spec_tokens
    conv_bytes, _ = state_bytes(case)
    page_bytes = page_size_bytes(case)
    for itemsize in (DTYPE_BYTES[case.conv_state_dtype], DTYPE_BYTES[case.ssm_dtype]):
        if page_bytes % itemsize or conv_bytes % itemsize:
            raise ValueError(f"case {case.id}: cache page of {page_bytes} B not aligned to {itemsize} B")
    nb = plan.num_blocks
    cache = torch.full((nb * page_bytes,), PAGE_PADDING_FILL, dtype=torch.uint8, device=device)
    backing["cache"] = cache
    conv_page = page_bytes // DTYPE_BYTES[case.conv_state_dtype]
    if case.conv_layout == "SD":
        # stored (blocks, state_len, dim); the core passes .transpose(-1, -2)
        conv_spec = _ViewSpec(
            "cache",
            conv_dt,
            (nb, state_len, h.conv_dim),
            (conv_page, h.conv_dim, 1),
            0,
            transpose_last=True,
        )
    else:  # DS: stored (blocks, dim, state_len)
        conv_spec = _ViewSpec("cache", conv_dt, (nb, h.conv_dim, state_len), (conv_page, state_len, 1), 0)
    views["conv_state"] = conv_spec
    ssm_page = page_bytes // DTYPE_BYTES[case.ssm_dtype]
    ssm_off = conv_bytes // DTYPE_BYTES[case.ssm_dtype]
    d1, d2 = (h.head_v_dim, h.head_k_dim) if case.ssm_layout == "vk" else (h.head_k_dim, h.head_v_dim)
    views["ssm_state"] = _ViewSpec("cache", ssm_dt, (nb, h.num_v_heads, d1, d2), (ssm_page, d1 * d2, d2, 1), ssm_off)
    _make_view(backing, conv_spec).copy_(randn(nb, h.conv_dim, state_len, dtype=conv_dt))
    _make_view(backing, views["ssm_state"]).copy_(randn(nb, h.num_v_heads, d1, d2, scale=0.1, dtype=ssm_dt))

    # --- metadata (int32 like vLLM's GDN metadata builder)
    i32 = dict(dtype=torch.int32, device=device)
    dense("query_start_loc", torch.tensor(plan.query_start_loc, **i32))
    dense("state_indices", torch.tensor(plan.state_index_rows(), **i32).reshape(-1, t_max))
    dense("num_accepted_tokens", torch.tensor(plan.accepted_rows(), **i32))
    # NaN everywhere: a row that should be written and is not shows up in every comparison.
    out_shape = (rows, h.num_v_heads, h.head_v_dim)
    dense("out", torch.full(out_shape, float("nan"), dtype=act, device=device))

    token_index = None
    if plan.token_index is not None:
        token_index = torch.tensor(plan.token_index, dtype=torch.int64, device=device)
    return SpecDecodeInputs(case=case, plan=plan, backing=backing, views=views, token_index=token_index)


def cases_by_id(cases: Iterable[SpecDecodeCase]) -> dict[str, SpecDecodeCase]:
    out: dict[str, SpecDecodeCase] = {}
    for c in cases:
        if c.id in out:
            raise ValueError(f"duplicate case id {c.id!r}")
        out[c.id] = c
    return out
