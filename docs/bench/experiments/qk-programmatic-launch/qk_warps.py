"""Q/K kernel num_warps at the write-bound cases (and one small one), on the source as taken (H200).

Does a Q/K program resident beside the V/GDN programs (the V/GDN grid at 8 sequences fills one wave) delay
them? Fewer Q/K warps leave more room. Usage (repository root, PYTHONPATH=src): qk_warps.py OUT [W,W,...]
(default 1,2,4; writes qk-warps-h200.json, or qk-warps-W-W-h200.json for other lists)
"""

import json
import os
import statistics
import sys
from dataclasses import replace

import caovan.kernels.gdn_spec_decode as spec
from caovan.bench import accuracy
from caovan.bench.cases import bench_cases, build_inputs
from caovan.bench.kernels import BenchSettings, _bound_call, time_cuda_graph_us
from caovan.kernels.gdn_spec_decode import gdn_spec_decode
from caovan.kernels.gdn_spec_decode.launch_configs import LAUNCH_CONFIGS, QKLaunchConfig
from caovan.kernels.gdn_spec_decode.naive import gdn_spec_decode_reference

CASES = (
    "qwen3.6-27b-tp2/B8/mtp3/ssm-fp32",
    "qwen3.6-27b-tp2/B8/mtp4/ssm-fp32",
    "qwen3.6-27b-tp2/B8/mtp4/ssm-fp16",
    "qwen3-next-80b-tp2/B8/mtp4/ssm-fp32",
    "qwen3.6-27b-tp2/B1/mtp3/ssm-fp16",
)
WARPS = tuple(int(w) for w in sys.argv[2].split(",")) if len(sys.argv) > 2 else (1, 2, 4)
base = LAUNCH_CONFIGS["sm90"]
settings = BenchSettings(warmup=3, eager_iters=0, graph_calls=20, graph_replays=20)
res = {"cases": {}, "problems": {}}
for case in bench_cases("model"):
    if case.id not in CASES:
        continue
    inp = build_inputs(case, "cuda")
    ref = accuracy.run_reference(gdn_spec_decode_reference, inp)
    row = {}
    for rep in range(3):
        for w in WARPS:
            config = replace(base, qk=QKLaunchConfig(num_warps=w, num_stages=1))
            spec._plans.clear()
            spec._direct.clear()

            def fn(*a, config=config, **k):
                return gdn_spec_decode(*a, launch_config=config, **k)

            if rep == 0:
                problems = accuracy.check_standalone(case, accuracy.measure(fn, inp, ref))
                if problems:
                    res["problems"][f"{case.id}|qk-w{w}"] = problems
            call = _bound_call(fn, inp.clone())
            t = statistics.median(time_cuda_graph_us(call, settings) for _ in range(3))
            row[f"qk-w{w}"] = min(row.get(f"qk-w{w}", 1e9), t)
    res["cases"][case.id] = row
    print(f"{case.id:38s} " + " ".join(f"{k} {v:5.2f}" for k, v in row.items()), flush=True)
print("problems:", len(res["problems"]))
name = "qk-warps-h200.json" if WARPS == (1, 2, 4) else f"qk-warps-{'-'.join(map(str, WARPS))}-h200.json"
json.dump(res, open(os.path.join(sys.argv[1], name), "w"), indent=1)
