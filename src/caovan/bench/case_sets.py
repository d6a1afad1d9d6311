"""The case sets, as data: bench sets (timed), kernel-tier test grids and edge cases, ``caovan verify``'s cases."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .case_definition import SpecDecodeCase, expand_grid

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
