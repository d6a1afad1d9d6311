"""``bench prefill``'s sm_75 figures: what caovan's prefill would run on an RTX 2080 Ti for each case.

The ``sm75`` launch entry's kernels are compiled ahead of time for sm_75 with the installed Triton
(``caovan.kernels.gdn_prefill.aot``, as the sm_75 gate does), whatever GPU the bench runs on: shared memory,
registers, spills and programs resident per SM of each kernel, per shape and dtypes; then, per case, the path that
entry takes and the waves each launch fills on the card's 68 SMs (programs / (68 x programs per SM)). Figures, not
times: no 2080 Ti runs here.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable, Mapping
from dataclasses import asdict
from typing import Any

from caovan.bench.prefill_cases import PrefillCase, PrefillShape
from caovan.kernels.gdn_prefill.launch_configs import (
    LAUNCH_CONFIGS,
    PrefillLaunchConfig,
    launch_grids,
    takes_chunked_path,
)
from caovan.kernels.gdn_spec_decode.occupancy import RTX_2080_TI

DEVICE = f"NVIDIA GeForce RTX 2080 Ti ({RTX_2080_TI.multiprocessors} SMs, sm_75)"
_WY = "_caovan_gdn_prefill_wy_kernel"


def kernel_figures(shape: PrefillShape, act_dtype: str, state_dtype: str) -> dict[str, dict[str, Any]] | str:
    """Each compiled kernel of the ``sm75`` entry at this shape and these dtypes, by name (the chunked path's WY
    launch as ``aot.PAIRED_SUFFIX``), or why there are none."""
    if "bfloat16" in (act_dtype, state_dtype):
        return "not compiled: no RTX 2080 Ti runs bf16 (sm_75 has no bf16 instructions)"
    if os.environ.get("TRITON_INTERPRET") == "1":
        return "not compiled: the kernels were imported under TRITON_INTERPRET=1"
    from caovan.kernels.gdn_prefill import aot

    model_shape = aot.ModelShape(shape.name, shape.num_k_heads, shape.num_v_heads, shape.head_k_dim, shape.head_v_dim)
    try:
        infos = aot.compile_prefill_kernels(
            LAUNCH_CONFIGS["sm75"], aot.DtypeCombo(act_dtype, state_dtype), shape=model_shape, capability=(7, 5)
        )
    except Exception as exc:  # a compiler failure is a finding to record, not a reason to lose the run's times
        return f"not compiled: {type(exc).__name__}: {exc}"
    return {
        info.kernel: {
            "num_warps": info.num_warps,
            "block_v": info.block_v,
            "shared_bytes": info.shared_bytes,
            "registers": info.registers,
            "spill_bytes": info.spill_bytes,
            "blocks_per_sm": info.blocks_per_sm,
        }
        for info in infos
    }


def case_waves(
    case: PrefillCase, figures: Mapping[str, Mapping[str, Any]], entry: PrefillLaunchConfig | None = None
) -> dict[str, Any]:
    """The path ``entry`` (default: the ``sm75`` entry) takes for this case and each launch's grid, programs and
    waves on 68 SMs."""
    from caovan.kernels.gdn_prefill.aot import PAIRED_SUFFIX

    entry, head = entry or LAUNCH_CONFIGS["sm75"], case.head
    chunked = takes_chunked_path(entry, case.total_tokens)
    launches = []
    for name, grid in launch_grids(entry, case.total_tokens, case.batch, head.num_v_heads, head.head_v_dim).items():
        figure = figures.get(name + PAIRED_SUFFIX if chunked and name == _WY else name, {})
        per_sm, programs = figure.get("blocks_per_sm"), math.prod(grid)
        waves = None if not per_sm else round(programs / (RTX_2080_TI.multiprocessors * per_sm), 2)
        launches.append({"kernel": name, "grid": list(grid), "programs": programs, "waves": waves})
    return {"path": "chunked" if chunked else "fused", "launches": launches}


def sm75_section(cases: Iterable[PrefillCase]) -> dict[str, Any]:
    """The record's ``sm75`` section: the entry, the kernel figures per ``shape act=.. ssm=..``, and the path and
    waves per case id (for cases whose kernels compiled)."""
    figures: dict[str, Any] = {}
    by_case: dict[str, Any] = {}
    for case in cases:
        key = f"{case.shape} act={case.act_dtype} ssm={case.state_dtype}"
        if key not in figures:
            figures[key] = kernel_figures(case.head, case.act_dtype, case.state_dtype)
        if isinstance(figures[key], dict):
            by_case[case.id] = case_waves(case, figures[key])
    return {
        "device": DEVICE,
        "method": "compiled ahead of time for sm_75 (caovan.kernels.gdn_prefill.aot), not timed",
        "launch_entry": asdict(LAUNCH_CONFIGS["sm75"]),
        "kernels": figures,
        "cases": by_case,
    }


def format_sm75(section: Mapping[str, Any]) -> str:
    """A few lines for the terminal: each kernel's figures, then each case's path and waves."""
    lines = [f"{section['device']}, {section['method']}:"]
    for key, kernels in section["kernels"].items():
        if isinstance(kernels, str):
            lines.append(f"  {key}: {kernels}")
            continue
        parts = [
            f"{name.removeprefix('_caovan_gdn_prefill_')} {k['registers']} regs {k['shared_bytes']} B "
            f"{k['blocks_per_sm']}/SM"
            for name, k in kernels.items()
        ]
        lines.append(f"  {key}: " + "; ".join(parts))
    for case_id, case in section["cases"].items():
        waves = ", ".join(
            f"{launch['kernel'].removeprefix('_caovan_gdn_prefill_').removesuffix('_kernel')} {launch['waves']}"
            for launch in case["launches"]
        )
        lines.append(f"  {case_id}: {case['path']} path, waves {waves}")
    return "\n".join(lines)
