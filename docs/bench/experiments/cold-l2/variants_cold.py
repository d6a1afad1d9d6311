"""Warm- and cold-L2 CUDA-graph time of V/GDN kernel variants and launch options (H200).

The record's "layers" time (cold L2: the calls cycle through enough input copies to touch 2x L2) is where
27B B8 fp32 MTP 3/4 fall below 2x vLLM; every earlier sweep ranked options by the warm-L2 graph time only.
Options per run: a kernel variant (``current`` = src, else .exp/variants2/k_NAME.py = src with the one-line
patch beside this script), BVxW, ``s0`` (no staggered start), ``nofit`` (BV as given, even if the grid then
needs more than one wave of resident programs) and ``qN`` (the Q/K kernel with N warps instead of the entry's).
Usage (repository root, PYTHONPATH=src): variants_cold.py OUT REGEX 'current:8x1,8x1s0;late23:8x1' [NAME]
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

CURRENT = spec._caovan_sm75_fused_v_gdn_spec_decode_kernel
FIT = spec._fit_value_block
HOOKS_SET = spec._launch_hooks_set
NO_DIRECT = set()  # variants whose module sets NO_DIRECT_LAUNCH (their launch is not main's grid and arguments)
NO_QK = set()  # variants whose module sets NO_QK_KERNEL (one kernel does the whole call: main's Q/K kernel stays off)
OWN_QK = {}  # variants whose module sets VARIANT_QK_KERNEL: their own Q/K kernel runs instead of main's
QK_KERNEL = spec._caovan_sm75_prepare_qk_conv_spec_decode_kernel


class _NotLaunched:
    """Stands in for main's Q/K kernel while a NO_QK_KERNEL variant runs: ``kernel[grid](...)`` launches nothing."""

    def __getitem__(self, grid):
        return lambda *args, **kwargs: None


def kernel(name):
    if name == "current":
        return CURRENT
    s = importlib.util.spec_from_file_location(f"variant_{name}", f".exp/variants2/k_{name}.py")
    m = importlib.util.module_from_spec(s)
    s.loader.exec_module(m)
    if getattr(m, "NO_DIRECT_LAUNCH", False):
        NO_DIRECT.add(name)
    if getattr(m, "NO_QK_KERNEL", False):
        NO_QK.add(name)
    if getattr(m, "VARIANT_QK_KERNEL", False):
        OWN_QK[name] = m._caovan_sm75_prepare_qk_conv_spec_decode_kernel
    return m._caovan_sm75_fused_v_gdn_spec_decode_kernel


def parse(option):  # "8x1s0nofitq16" -> (8, 1, stagger?, fit?, Q/K warps or None)
    m = re.fullmatch(r"(\d+)x(\d+)(s0)?(nofit)?(?:q(\d+))?", option)
    return int(m[1]), int(m[2]), m[3] is None, m[4] is None, int(m[5]) if m[5] else None


base = LAUNCH_CONFIGS["sm90"]
RUNS = {v.split(":")[0]: v.split(":")[1].split(",") for v in sys.argv[3].split(";")}
kernels = {name: kernel(name) for name in RUNS}
filt = re.compile(sys.argv[2])
recorded = {c["id"]: c for c in json.load(open("docs/bench/bench-kernels-h200.json"))["cases"]}
settings = BenchSettings(warmup=3, eager_iters=0, graph_calls=20, graph_replays=20, graph_repeats=3)
res = {"settings": asdict(settings), "cases": {}, "problems": {}}
for case in bench_cases("all"):
    if not filt.search(case.id):
        continue
    inp = build_inputs(case, "cuda")
    ref = accuracy.run_reference(gdn_spec_decode_reference, inp)
    n_layers = layer_copies(spec_decode_traffic(inp.plan).total, inp.nbytes(), _l2_bytes("cuda"), settings)
    copies = [inp.clone() for _ in range(n_layers)]
    row = {}
    for vname, options in RUNS.items():
        spec._caovan_sm75_fused_v_gdn_spec_decode_kernel = kernels[vname]
        spec._launch_hooks_set = (lambda: True) if vname in NO_DIRECT else HOOKS_SET
        spec._caovan_sm75_prepare_qk_conv_spec_decode_kernel = (
            _NotLaunched() if vname in NO_QK else OWN_QK.get(vname, QK_KERNEL)
        )
        for option in options:
            bv, w, stagger, fit, qk_warps = parse(option)
            config = replace(
                base,
                qk=base.qk if qk_warps is None else replace(base.qk, num_warps=qk_warps),
                v_gdn=VGdnLaunchConfig(num_warps=w, num_stages=1, BV=bv),
                stagger_min_state_write_bytes=base.stagger_min_state_write_bytes if stagger else None,
            )
            spec._fit_value_block = FIT if fit else (lambda device, preferred, *a: preferred)
            spec._plans.clear()
            spec._direct.clear()

            def fn(*a, config=config, **k):
                return gdn_spec_decode(*a, launch_config=config, **k)

            problems = accuracy.check_standalone(case, accuracy.measure(fn, inp, ref))
            if problems:
                res["problems"][f"{case.id}|{vname}|{option}"] = problems
            warm = statistics.median(time_cuda_graph_us(_bound_call(fn, inp.clone()), settings) for _ in range(3))
            cold = _layers_graph_us(fn, copies, settings, time_cuda_graph_us)
            row[f"{vname}|{option}"] = {"warm": warm, "cold": cold, "bv": [p.v_block for p in spec._plans.values()]}
    rec = recorded[case.id]
    res["cases"][case.id] = {"layers": n_layers, "target_warm": rec["vllm"]["graph_us"] / 2,
                             "target_cold": rec["vllm"]["graph_layers_us"] / 2, "runs": row}  # fmt: skip
    print(f"{case.id} targets warm {rec['vllm']['graph_us'] / 2:.2f} cold {rec['vllm']['graph_layers_us'] / 2:.2f}")
    for k, v in row.items():
        print(f"    {k:24s} warm {v['warm']:6.2f} cold {v['cold']:6.2f} bv {v['bv']}", flush=True)
    del copies
spec._fit_value_block = FIT
spec._launch_hooks_set = HOOKS_SET
spec._caovan_sm75_prepare_qk_conv_spec_decode_kernel = QK_KERNEL
print("problems:", len(res["problems"]), list(res["problems"].items())[:3])
json.dump(res, open(os.path.join(sys.argv[1], sys.argv[4] if len(sys.argv) > 4 else "cold-h200.json"), "w"), indent=1)
