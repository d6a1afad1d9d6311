"""``caovan bench tune``: measure launch configurations of caovan's kernels on this GPU.

Launch configurations are data (``caovan.kernels.gdn_spec_decode.launch_configs``); this command produces
the numbers an entry for a new architecture is chosen from. It sweeps the QK kernel's ``num_warps``, the
V/GDN kernel's ``BV`` x ``num_warps`` and (on sm_90+) programmatic dependent launch, one at a time (the rest at
the architecture's current entry), then measures the combination of each one's best, at the model shapes, and
times each configuration with CUDA-graph replay (GPU time, no host noise).
Every configuration is first checked against the float64 reference (a fast wrong kernel is not a candidate).
The winner is the configuration with the lowest geometric-mean graph time over the cases; the JSON records
every number, so the entry in launch_configs.py can cite it.
"""

from __future__ import annotations

import statistics
import sys
from collections.abc import Callable, Sequence
from dataclasses import asdict, replace
from typing import Any

from . import accuracy
from .cases import SpecDecodeCase, build_inputs, expand_grid
from .kernels import BenchSettings, _bound_call, median_graph_us

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
# graph_repeats: the median of a few graph timings (one replay loop on a shared GPU can be off by 10-20 %).
TUNE_SETTINGS = BenchSettings(warmup=3, eager_iters=0, graph_calls=20, graph_replays=20, graph_repeats=3)


def candidate_configs(base: Any) -> list[Any]:
    """The base entry, then its QK variants, its V/GDN variants and its PDL toggle (one aspect varied at a time;
    PDL only where the architecture has it)."""
    from caovan.kernels.gdn_spec_decode.launch_configs import QKLaunchConfig, VGdnLaunchConfig, has_pdl

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
    if has_pdl(base.capability):
        out.append(replace(base, pdl=not base.pdl, tuned=False, note="tune candidate"))
    return out


def combined_config(base: Any, results: Sequence[dict[str, Any]], configs: Sequence[Any]) -> Any | None:
    """The base with each aspect (QK options, V/GDN options, PDL) taken from the fastest valid candidate that
    changed it, when that beats the base; None when it equals a configuration already measured."""
    timed = {cfg: r["geomean_graph_us"] for cfg, r in zip(configs, results, strict=True) if r["valid"]}
    if base not in timed:
        return None
    best = base
    for aspect in ("qk", "v_gdn", "pdl"):
        changed = [c for c in timed if getattr(c, aspect) != getattr(base, aspect)]
        if changed:
            winner = min(changed, key=timed.__getitem__)
            if timed[winner] < timed[base]:
                best = replace(best, **{aspect: getattr(winner, aspect)})
    best = replace(best, tuned=False, note="tune candidate (best of each aspect)")
    return None if any(_same_launch(best, c) for c in configs) else best


def _same_launch(a: Any, b: Any) -> bool:
    return (a.qk, a.v_gdn, a.pdl) == (b.qk, b.v_gdn, b.pdl)


def _label(cfg: Any) -> str:
    v = cfg.v_gdn
    cap = f",r{v.maxnreg}" if v.maxnreg is not None else ""
    own = [f"r{v.preferred_block_maxnreg}"] if v.preferred_block_maxnreg is not None else []
    if v.preferred_block_constant_slab_offsets:
        own.insert(0, "const-offsets")
    if own:  # options of the entry's own BV only (launch_configs.py)
        cap += f",BV{v.BV}:" + "+".join(own)
    if v.row_split_block is not None:  # where the entry's state-write threshold holds (launch_configs.py)
        cap += f",BV{v.row_split_block}:rows{v.row_split_lanes}+r{v.row_split_maxnreg}"
    return f"qk(w{cfg.qk.num_warps}) v(BV{cfg.v_gdn.BV},w{cfg.v_gdn.num_warps}{cap})" + (" pdl" if cfg.pdl else "")


def geomean(values: Sequence[float]) -> float:
    return statistics.geometric_mean(values)


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

    def measure(cfg: Any, tag: str) -> dict[str, Any]:
        progress(f"[{tag}] {_label(cfg)}")
        row: dict[str, Any] = {"config": asdict(cfg), "label": _label(cfg), "graph_us": {}, "problems": {}}
        for case in cases:
            fn = _with_config(ours, cfg)
            report = accuracy.measure(fn, inputs[case.id], refs[case.id])
            problems = accuracy.check_standalone(case, report)
            if problems:
                row["problems"][case.id] = problems
                continue
            call = _bound_call(fn, inputs[case.id].clone())
            row["graph_us"][case.id] = median_graph_us(call, settings)
        times = list(row["graph_us"].values())
        row["valid"] = not row["problems"] and len(times) == len(cases)
        row["geomean_graph_us"] = geomean(times) if row["valid"] else None
        return row

    results = [measure(cfg, f"{i}/{len(configs)}") for i, cfg in enumerate(configs, 1)]
    combined = combined_config(base, results, configs)
    if combined is not None:
        results.append(measure(combined, "combined"))
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
