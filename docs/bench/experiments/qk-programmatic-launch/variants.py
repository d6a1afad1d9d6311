"""CUDA-graph time of V/GDN kernel variants x launch configurations, Q/K kernel as a programmatic dependent (H200).

Variants are copies of triton_kernels.py with one edit each (patches beside this script), loaded from
.exp/variants2/k_NAME.py; `nomath` is timing only (no state arithmetic, wrong results, not checked).
Usage (repository root, PYTHONPATH=src, this branch): variants.py OUT REGEX 'base:16x1,8x1;nomath:16x1'
"""

import importlib.util
import json
import os
import re
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
    s = importlib.util.spec_from_file_location(f"variant_{name}", f".exp/variants2/k_{name}.py")
    m = importlib.util.module_from_spec(s)
    s.loader.exec_module(m)
    return m._caovan_sm75_fused_v_gdn_spec_decode_kernel


base = LAUNCH_CONFIGS["sm90"]
# argv[3]: "variant:BVxW,BVxW;variant:..." (V/GDN configurations per variant)
RUNS = {
    v.split(":")[0]: tuple(tuple(int(x) for x in c.split("x")) for c in v.split(":")[1].split(","))
    for v in sys.argv[3].split(";")
}
kernels = {name: load(name) for name in RUNS}
filt = re.compile(sys.argv[2])
recorded = json.load(open("docs/bench/bench-kernels-h200.json"))["cases"]
vllm_graph = {c["id"]: c["vllm"]["graph_us"] for c in recorded}
settings = BenchSettings(warmup=3, eager_iters=0, graph_calls=20, graph_replays=20)
res = {"cases": {}, "bv_run": {}, "problems": {}}
t0 = time.time()
for case in bench_cases("all"):
    if not filt.search(case.id):
        continue
    inp = build_inputs(case, "cuda")
    ref = accuracy.run_reference(gdn_spec_decode_reference, inp)
    row = {}
    for rep in range(2):
        for vname, shapes in RUNS.items():
            spec._caovan_sm75_fused_v_gdn_spec_decode_kernel = kernels[vname]
            for bv, w in shapes:
                config = replace(base, v_gdn=VGdnLaunchConfig(num_warps=w, num_stages=1, BV=bv))
                name = f"{vname}|bv{bv}w{w}"
                spec._plans.clear()
                spec._direct.clear()

                def fn(*a, config=config, **k):
                    return gdn_spec_decode(*a, launch_config=config, **k)

                if rep == 0 and vname != "nomath":
                    problems = accuracy.check_standalone(case, accuracy.measure(fn, inp, ref))
                    if problems:
                        res["problems"][f"{case.id}|{name}"] = problems
                call = _bound_call(fn, inp.clone())
                t = statistics.median(time_cuda_graph_us(call, settings) for _ in range(3))
                row[name] = min(row.get(name, 1e9), t)
                res["bv_run"][f"{case.id}|{name}"] = [p.v_block for p in spec._plans.values()]
    res["cases"][case.id] = row
    tgt = vllm_graph[case.id] / 2
    print(f"{case.id:38s} tgt {tgt:5.2f} " + " ".join(f"{k} {v:5.2f}" for k, v in row.items()), flush=True)
    print(f"    [{time.time() - t0:.0f}s]", flush=True)
ids = [c for c in res["cases"] if not c.startswith("small")]
for k in sorted({k for r in res["cases"].values() for k in r}):
    ok = sum(vllm_graph[c] / res["cases"][c][k] >= 2.0 for c in ids)
    gm = statistics.geometric_mean(res["cases"][c][k] for c in ids)
    print(f"{k:22s} model n={len(ids)} geomean {gm:6.3f} us  >=2x in {ok}/{len(ids)}")
print("problems:", len(res["problems"]), list(res["problems"].items())[:3])
name = sys.argv[4] if len(sys.argv) > 4 else "variants-h200.json"
json.dump(res, open(os.path.join(sys.argv[1], name), "w"), indent=1)
