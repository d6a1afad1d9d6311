"""``caovan bench tune``: measure launch configurations of caovan's kernels on this GPU.

Launch configurations are data (``caovan.kernels.gdn_spec_decode.launch_configs``); this command produces
the numbers an entry for a new architecture is chosen from. It sweeps the QK kernel's ``num_warps`` and the
V/GDN kernel's ``BV`` x ``num_warps`` one kernel at a time (the other kernel at the architecture's current
entry), at the model shapes, and times each configuration with CUDA-graph replay (GPU time, no host noise).
Every configuration is first checked against the float64 reference (a fast wrong kernel is not a candidate).
The winner is the configuration with the lowest geometric-mean graph time over the cases; the JSON records
every number, so the entry in launch_configs.py can cite it.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable, Sequence
from dataclasses import asdict, replace
from typing import Any

from . import accuracy
from .cases import SpecDecodeCase, build_inputs, expand_grid
from .kernels import BenchSettings, _bound_call, time_cuda_graph_us

JSON_SCHEMA = "caovan-bench-tune/1"

TUNE_GRID: dict[str, Sequence[Any]] = {
    "head": ("qwen3.6-27b-tp2", "qwen3-next-80b-tp2"),
    "num_seqs": (1, 8),
    "num_spec_tokens": (1, 3),
    "ssm_dtype": ("float16", "float32"),
}
QK_WARPS = (1, 2, 4)
V_BV = (8, 16, 32)
V_WARPS = (1, 2, 4)
TUNE_SETTINGS = BenchSettings(warmup=3, eager_iters=0, graph_calls=10, graph_replays=10)


def candidate_configs(base: Any) -> list[Any]:
    """The base entry, its QK variants and its V/GDN variants (one kernel varied at a time)."""
    from caovan.kernels.gdn_spec_decode.launch_configs import QKLaunchConfig, VGdnLaunchConfig

    out = [base]
    for w in QK_WARPS:
        cfg = replace(base, qk=QKLaunchConfig(num_warps=w, num_stages=1), tuned=False, note="tune candidate")
        if cfg.qk != base.qk:
            out.append(cfg)
    for bv in V_BV:
        for w in V_WARPS:
            v = VGdnLaunchConfig(num_warps=w, num_stages=1, BV=bv)
            if v != base.v_gdn:
                out.append(replace(base, v_gdn=v, tuned=False, note="tune candidate"))
    return out


def _label(cfg: Any) -> str:
    return f"qk(w{cfg.qk.num_warps}) v(BV{cfg.v_gdn.BV},w{cfg.v_gdn.num_warps})"


def geomean(values: Sequence[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values))


def run_tune(
    *,
    ours: Callable[..., None],
    reference: Callable[..., None],
    base: Any,
    cases: Sequence[SpecDecodeCase] | None = None,
    settings: BenchSettings = TUNE_SETTINGS,
    progress: Callable[[str], None] = lambda line: print(line, file=sys.stderr, flush=True),
) -> dict[str, Any]:
    cases = list(cases if cases is not None else expand_grid(TUNE_GRID))
    configs = candidate_configs(base)
    inputs = {case.id: build_inputs(case, "cuda") for case in cases}
    refs = {case.id: accuracy.run_reference(reference, inputs[case.id]) for case in cases}
    results = []
    for i, cfg in enumerate(configs, 1):
        label = _label(cfg)
        progress(f"[{i}/{len(configs)}] {label}")
        row: dict[str, Any] = {"config": asdict(cfg), "label": label, "graph_us": {}, "problems": {}}
        for case in cases:
            fn = _with_config(ours, cfg)
            report = accuracy.measure(fn, inputs[case.id], refs[case.id])
            problems = accuracy.check_standalone(case, report)
            if problems:
                row["problems"][case.id] = problems
                continue
            row["graph_us"][case.id] = time_cuda_graph_us(_bound_call(fn, inputs[case.id].clone()), settings)
        times = list(row["graph_us"].values())
        row["valid"] = not row["problems"] and len(times) == len(cases)
        row["geomean_graph_us"] = geomean(times) if row["valid"] else None
        results.append(row)
    valid = [r for r in results if r["valid"]]
    best = min(valid, key=lambda r: r["geomean_graph_us"]) if valid else None
    base_row = results[0]
    return {
        "schema": JSON_SCHEMA,
        "base": base_row["label"],
        "cases": [case.id for case in cases],
        "settings": asdict(settings),
        "results": results,
        "best": None
        if best is None
        else {
            "label": best["label"],
            "config": best["config"],
            "geomean_graph_us": best["geomean_graph_us"],
            "vs_base": (base_row["geomean_graph_us"] / best["geomean_graph_us"]) if base_row["valid"] else None,
        },
    }


def _with_config(fn: Callable[..., None], cfg: Any) -> Callable[..., None]:
    def call(*args: Any, **kwargs: Any) -> None:
        fn(*args, launch_config=cfg, **kwargs)

    return call
