"""CUDA-graph time of V/GDN kernel variants x BV configs at the model cases (H200).

Usage: sweep.py OUT VARIANTS [CONFIGS] (see README.md)
"""

import importlib.util
import json
import os
import statistics
import sys
import time
from dataclasses import replace

import caovan.kernels.gdn_spec_decode as spec
from caovan.bench import accuracy
from caovan.bench.cases import bench_cases, build_inputs
from caovan.bench.kernels import BenchSettings, _bound_call, time_cuda_graph_us
from caovan.kernels.gdn_spec_decode import gdn_spec_decode
from caovan.kernels.gdn_spec_decode.launch_configs import LAUNCH_CONFIGS, VGdnLaunchConfig
from caovan.kernels.gdn_spec_decode.naive import gdn_spec_decode_reference


def load(name):
    s = importlib.util.spec_from_file_location(f"variant_{name}", f".exp/variants/k_{name}.py")
    m = importlib.util.module_from_spec(s)
    s.loader.exec_module(m)
    return m._caovan_sm75_fused_v_gdn_spec_decode_kernel


VARIANTS = {v: load(v) for v in sys.argv[2].split(",")}
base = LAUNCH_CONFIGS["sm90"]


def cfg(bv, w=1):
    return replace(base, v_gdn=VGdnLaunchConfig(num_warps=w, num_stages=1, BV=bv))


CONFIGS = {"bv8": (cfg(8), "all"), "bv4": (cfg(4), "all"), "bv16": (cfg(16), "B8"), "bv8w2": (cfg(8, 2), "B8")}
only = sys.argv[3].split(",") if len(sys.argv) > 3 else list(CONFIGS)
out = sys.argv[1]
recorded = json.load(open("docs/bench/bench-kernels-h200.json"))["cases"]
vllm_graph = {c["id"]: c["vllm"]["graph_us"] for c in recorded}
settings = BenchSettings(warmup=3, eager_iters=0, graph_calls=20, graph_replays=20)
res = {"cases": {}, "problems": {}}
t0 = time.time()
for case in bench_cases("model"):
    inp = build_inputs(case, "cuda")
    ref = accuracy.run_reference(gdn_spec_decode_reference, inp)
    row = {}
    for cname in only:
        config, which = CONFIGS[cname]
        if which == "B8" and case.num_seqs != 8:
            continue
        for vname, kern in VARIANTS.items():
            spec._caovan_sm75_fused_v_gdn_spec_decode_kernel = kern
            spec._plans.clear()
            spec._direct.clear()

            def fn(*a, config=config, **k):
                return gdn_spec_decode(*a, launch_config=config, **k)

            problems = accuracy.check_standalone(case, accuracy.measure(fn, inp, ref))
            if problems:
                res["problems"][f"{case.id}|{vname}|{cname}"] = problems
            call = _bound_call(fn, inp.clone())
            row[f"{vname}|{cname}"] = statistics.median(time_cuda_graph_us(call, settings) for _ in range(3))
    res["cases"][case.id] = row
    print(
        f"{case.id:38s} tgt {vllm_graph[case.id] / 2:5.1f} " + " ".join(f"{k} {v:5.1f}" for k, v in row.items()),
        f"[{time.time() - t0:.0f}s]",
        flush=True,
    )
keys = sorted({k for r in res["cases"].values() for k in r})
for k in keys:
    ids = [c for c in res["cases"] if k in res["cases"][c]]
    ok = sum(vllm_graph[c] / res["cases"][c][k] >= 2.0 for c in ids)
    gm = statistics.geometric_mean(res["cases"][c][k] for c in ids)
    print(f"{k:20s} n={len(ids)} geomean {gm:6.2f} us  >=2x in {ok}/{len(ids)}")
print("problems:", len(res["problems"]), list(res["problems"].items())[:3])
json.dump(res, open(os.path.join(out, "sweep6.json"), "w"), indent=1)
