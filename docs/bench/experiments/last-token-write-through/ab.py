"""Interleaved CUDA-graph timing of kernel variants (H200): every variant timed once per pass, passes repeated.

Like ``../cold-l2/variants_cold.py`` (same variant modules, same launch of main's ``gdn_spec_decode``, same
accuracy check against the float64 reference), but the variants take turns within each pass and the result is
the median over passes, so that a drift of the host or the GPU during the run moves all variants alike. Options
per variant: BVxW or ``e`` (the sm90 entry's own V/GDN options: its BV, caps, constant offsets and row split),
``s0`` (no staggered start), ``qN`` (Q/K kernel with N warps), ``mN`` (V/GDN maxnreg N; with ``e``: the row
split's cap), ``b0`` (with ``e``: the split rows without the row butterfly). A
variant module that sets ``NO_DIRECT_LAUNCH`` (its launch is not main's grid) runs with the direct launch off; one
that defines ``extend_plan(plan, args)`` gets main's launch plan (``args``: those of ``_validate_and_plan``) to
change, e.g. to append arguments to its Q/K kernel's launch; one that sets ``NO_QK_KERNEL`` (a bound: its V/GDN
kernel runs alone) gets no Q/K kernel launched at all.

Usage (repository root, PYTHONPATH=src; no vLLM; variants made by make_variants.py):
    python3 docs/bench/experiments/last-token-write-through/ab.py OUT REGEX 'current:8x1;rot:8x1s0' NAME [PASSES]
The cold-L2 time (``graph_layers_us`` of ``bench kernels``) is measured in the first pass only.
"""

import importlib.util
import json
import os
import re
import statistics
import sys
from dataclasses import asdict, replace

import caovan.kernels.gdn_spec_decode as spec
from caovan.bench import accuracy
from caovan.bench.cases import bench_cases, build_inputs
from caovan.bench.kernels import (
    BenchSettings,
    _bound_call,
    _l2_bytes,
    _layers_graph_us,
    layer_copies,
    time_cuda_graph_us,
)
from caovan.bench.roofline import spec_decode_traffic
from caovan.kernels.gdn_spec_decode import gdn_spec_decode
from caovan.kernels.gdn_spec_decode.launch_configs import LAUNCH_CONFIGS, VGdnLaunchConfig
from caovan.kernels.gdn_spec_decode.naive import gdn_spec_decode_reference

V_MAIN = spec._caovan_sm75_fused_v_gdn_spec_decode_kernel
QK_MAIN = spec._caovan_sm75_prepare_qk_conv_spec_decode_kernel
FIT = spec._fit_value_block
HOOKS_SET = spec._launch_hooks_set
PLAN = spec._validate_and_plan
NO_DIRECT = set()  # kernels of variant modules that set NO_DIRECT_LAUNCH (they launch another grid than main's)
PLAN_HOOKS = {}  # kernel -> _validate_and_plan with the variant module's extend_plan applied


class _NotLaunched:
    """Stands in for the Q/K kernel of a NO_QK_KERNEL variant: ``kernel[grid](...)`` launches nothing."""

    def __getitem__(self, grid):
        return lambda *args, **kwargs: None


def load(name):
    if name == "current":
        return V_MAIN, QK_MAIN
    s = importlib.util.spec_from_file_location(f"variant_{name}", f".exp/variants2/k_{name}.py")
    m = importlib.util.module_from_spec(s)
    s.loader.exec_module(m)
    qk = m._caovan_sm75_prepare_qk_conv_spec_decode_kernel if getattr(m, "VARIANT_QK_KERNEL", False) else QK_MAIN
    if getattr(m, "NO_QK_KERNEL", False):
        assert getattr(m, "NO_DIRECT_LAUNCH", False), "a NO_QK_KERNEL variant must set NO_DIRECT_LAUNCH too"
        qk = _NotLaunched()
    if getattr(m, "NO_DIRECT_LAUNCH", False):
        NO_DIRECT.add(id(m._caovan_sm75_fused_v_gdn_spec_decode_kernel))
    extend = getattr(m, "extend_plan", None)
    if extend is not None:
        PLAN_HOOKS[id(m._caovan_sm75_fused_v_gdn_spec_decode_kernel)] = lambda *a, **k: extend(PLAN(*a, **k), a)
    return m._caovan_sm75_fused_v_gdn_spec_decode_kernel, qk


def parse(option):  # "8x1s0q16m168", "e", "es0m144", "eb0"
    m = re.fullmatch(r"(?:(e)|(\d+)x(\d+))(s0)?(?:q(\d+))?(?:m(\d+))?(b0)?", option)
    assert m, option
    maxnreg = int(m[6]) if m[6] else None
    if m[1]:
        v_gdn = base.v_gdn if maxnreg is None else replace(base.v_gdn, row_split_maxnreg=maxnreg)
        if m[7]:
            v_gdn = replace(v_gdn, row_split_butterfly=False)
    else:
        v_gdn = VGdnLaunchConfig(num_warps=int(m[3]), num_stages=1, BV=int(m[2]), maxnreg=maxnreg)
    return v_gdn, m[4] is None, int(m[5]) if m[5] else None


out_dir, pattern, spec_text, file_name = sys.argv[1:5]
passes = int(sys.argv[5]) if len(sys.argv) > 5 else 3
base = LAUNCH_CONFIGS["sm90"]
runs = []  # (label, v kernel, qk kernel, config)
for part in spec_text.split(";"):
    name, options = part.split(":")
    v_kernel, qk_kernel = load(name)
    for option in options.split(","):
        v_gdn, stagger, qk_warps = parse(option)
        config = replace(
            base,
            qk=base.qk if qk_warps is None else replace(base.qk, num_warps=qk_warps),
            v_gdn=v_gdn,
            stagger_min_state_write_bytes=base.stagger_min_state_write_bytes if stagger else None,
        )
        runs.append((f"{name}|{option}", v_kernel, qk_kernel, config))

recorded = {c["id"]: c for c in json.load(open("docs/bench/bench-kernels-h200.json"))["cases"]}
settings = BenchSettings(warmup=3, eager_iters=0, graph_calls=20, graph_replays=20, graph_repeats=3)
res = {"settings": asdict(settings), "passes": passes, "runs": [r[0] for r in runs], "cases": {}, "problems": {}}
filt = re.compile(pattern)
for case in bench_cases("all"):
    if not filt.search(case.id):
        continue
    inp = build_inputs(case, "cuda")
    ref = accuracy.run_reference(gdn_spec_decode_reference, inp)
    n_layers = layer_copies(spec_decode_traffic(inp.plan).total, inp.nbytes(), _l2_bytes("cuda"), settings)
    copies = [inp.clone() for _ in range(n_layers)]
    warm = {r[0]: [] for r in runs}
    cold, bvs = {}, {}
    for p in range(passes):
        for label, v_kernel, qk_kernel, config in runs:
            spec._caovan_sm75_fused_v_gdn_spec_decode_kernel = v_kernel
            spec._caovan_sm75_prepare_qk_conv_spec_decode_kernel = qk_kernel
            spec._fit_value_block = FIT
            spec._launch_hooks_set = (lambda: True) if id(v_kernel) in NO_DIRECT else HOOKS_SET
            spec._validate_and_plan = PLAN_HOOKS.get(id(v_kernel), PLAN)
            spec._plans.clear()
            spec._direct.clear()

            def fn(*a, config=config, **k):
                return gdn_spec_decode(*a, launch_config=config, **k)

            if p == 0:
                problems = accuracy.check_standalone(case, accuracy.measure(fn, inp, ref))
                if problems:
                    res["problems"][f"{case.id}|{label}"] = problems
                cold[label] = _layers_graph_us(fn, copies, settings, time_cuda_graph_us)
                bvs[label] = [[pl.v_block, pl.row_lanes] for pl in spec._plans.values()]
            warm[label].append(
                statistics.median(time_cuda_graph_us(_bound_call(fn, inp.clone()), settings) for _ in range(3))
            )
    rec = recorded[case.id]
    row = {
        lab: {"warm": statistics.median(w), "warm_passes": w, "cold": cold[lab], "bv": bvs[lab]}
        for lab, w in warm.items()
    }
    res["cases"][case.id] = {"layers": n_layers, "target_warm": rec["vllm"]["graph_us"] / 2,
                             "target_cold": rec["vllm"]["graph_layers_us"] / 2, "runs": row}  # fmt: skip
    print(f"{case.id} targets warm {rec['vllm']['graph_us'] / 2:.2f} cold {rec['vllm']['graph_layers_us'] / 2:.2f}")
    for k, v in row.items():
        spread = " ".join(f"{x:.2f}" for x in v["warm_passes"])
        print(f"    {k:22s} warm {v['warm']:6.2f} [{spread}] cold {v['cold']:6.2f} bv {v['bv']}", flush=True)
    del copies
    json.dump(res, open(os.path.join(out_dir, file_name), "w"), indent=1)
spec._caovan_sm75_fused_v_gdn_spec_decode_kernel, spec._caovan_sm75_prepare_qk_conv_spec_decode_kernel = V_MAIN, QK_MAIN
spec._launch_hooks_set = HOOKS_SET
spec._validate_and_plan = PLAN
print("problems:", len(res["problems"]), list(res["problems"].items())[:3])
