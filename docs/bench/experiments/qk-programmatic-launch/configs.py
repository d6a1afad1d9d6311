"""V/GDN launch configurations (BV, num_warps) at the write-bound cases, Q/K kernel PDL on and off (H200).

The one-wave rule may raise a configuration's BV; the block a plan really ran with is recorded as `bv_run`.
Usage (repository root, PYTHONPATH=src, this branch): configs.py OUT
"""

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

CASES = (
    "qwen3.6-27b-tp2/B8/mtp2/ssm-fp32",
    "qwen3.6-27b-tp2/B8/mtp3/ssm-fp32",
    "qwen3.6-27b-tp2/B8/mtp4/ssm-fp32",
    "qwen3.6-27b-tp2/B8/mtp4/ssm-fp16",
    "qwen3-next-80b-tp2/B8/mtp4/ssm-fp32",
)
SHAPES = ((16, 1), (8, 1), (8, 2), (16, 2), (32, 2), (16, 4), (32, 4), (64, 4))
base = LAUNCH_CONFIGS["sm90"]
recorded = json.load(open("docs/bench/bench-kernels-h200.json"))["cases"]
vllm_graph = {c["id"]: c["vllm"]["graph_us"] for c in recorded}
settings = BenchSettings(warmup=3, eager_iters=0, graph_calls=20, graph_replays=20)
res = {"cases": {}, "bv_run": {}, "problems": {}}
t0 = time.time()
for case in bench_cases("model"):
    if case.id not in CASES:
        continue
    inp = build_inputs(case, "cuda")
    ref = accuracy.run_reference(gdn_spec_decode_reference, inp)
    row = {}
    for rep in range(2):
        for bv, w in SHAPES:
            config = replace(base, v_gdn=VGdnLaunchConfig(num_warps=w, num_stages=1, BV=bv))
            for qk_pdl in ("1", "0"):
                name = f"bv{bv}w{w}|qkpdl{qk_pdl}"
                os.environ["CAOVAN_QK_PDL"] = qk_pdl
                spec._plans.clear()
                spec._direct.clear()

                def fn(*a, config=config, **k):
                    return gdn_spec_decode(*a, launch_config=config, **k)

                if rep == 0:
                    problems = accuracy.check_standalone(case, accuracy.measure(fn, inp, ref))
                    if problems:
                        res["problems"][f"{case.id}|{name}"] = problems
                call = _bound_call(fn, inp.clone())
                t = statistics.median(time_cuda_graph_us(call, settings) for _ in range(3))
                row[name] = min(row.get(name, 1e9), t)
                res["bv_run"][f"{case.id}|{name}"] = [p.v_block for p in spec._plans.values()]
    res["cases"][case.id] = row
    best = sorted(row.items(), key=lambda kv: kv[1])[:4]
    print(f"{case.id:38s} tgt {vllm_graph[case.id] / 2:5.2f} best", best, f"[{time.time() - t0:.0f}s]", flush=True)
    print("   ", " ".join(f"{k} {v:5.2f}" for k, v in row.items()), flush=True)
print("problems:", len(res["problems"]), list(res["problems"].items())[:3])
json.dump(res, open(os.path.join(sys.argv[1], "configs-h200.json"), "w"), indent=1)
