"""Spec-decode benchmark/test cases and their vLLM-shaped inputs: the public names, re-exported.

``case_definition`` (head configurations, ``SpecDecodeCase``, grids), ``case_sets`` (the bench, test and verify
sets, as data), ``batch_plan`` (a batch's rows, slots and accepted counts, no torch) and ``case_inputs``
(``build_inputs``: tensors laid out like vLLM 0.21.0's mamba caches).
"""

from __future__ import annotations

from .batch_plan import NUM_CACHE_BLOCKS, BatchPlan, SeqPlan, plan_batch
from .case_definition import (
    ACCEPTED_MODES,
    CONV_LAYOUTS,
    DTYPE_BYTES,
    HEAD_CONFIGS,
    INDEX_DTYPE_BYTES,
    NULL_BLOCK_ID,
    SSM_LAYOUTS,
    STATE_DTYPES,
    HeadConfig,
    SpecDecodeCase,
    cases_by_id,
    expand_grid,
)
from .case_inputs import (
    PAGE_ALIGN,
    PAGE_MAX_MTP,
    PAGE_PADDING_BYTES,
    PAGE_PADDING_FILL,
    TENSOR_ARGS,
    SpecDecodeInputs,
    build_inputs,
    page_size_bytes,
    state_bytes,
)
from .case_sets import (
    BENCH_CASE_SETS,
    BENCH_GRIDS,
    BENCH_GRIDS_QUICK,
    KERNEL_EDGE_CASES,
    KERNEL_TEST_GRID,
    MODEL_HEADS,
    VERIFY_CASES,
    bench_cases,
    busy_server_case,
)

__all__ = [
    "ACCEPTED_MODES",
    "BENCH_CASE_SETS",
    "BENCH_GRIDS",
    "BENCH_GRIDS_QUICK",
    "CONV_LAYOUTS",
    "DTYPE_BYTES",
    "HEAD_CONFIGS",
    "INDEX_DTYPE_BYTES",
    "KERNEL_EDGE_CASES",
    "KERNEL_TEST_GRID",
    "MODEL_HEADS",
    "NULL_BLOCK_ID",
    "NUM_CACHE_BLOCKS",
    "PAGE_ALIGN",
    "PAGE_MAX_MTP",
    "PAGE_PADDING_BYTES",
    "PAGE_PADDING_FILL",
    "SSM_LAYOUTS",
    "STATE_DTYPES",
    "TENSOR_ARGS",
    "VERIFY_CASES",
    "BatchPlan",
    "HeadConfig",
    "SeqPlan",
    "SpecDecodeCase",
    "SpecDecodeInputs",
    "bench_cases",
    "build_inputs",
    "busy_server_case",
    "cases_by_id",
    "expand_grid",
    "page_size_bytes",
    "plan_batch",
    "state_bytes",
]
