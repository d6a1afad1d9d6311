"""The Q/K kernel launched as a programmatic dependent of the kernel before it, or not, in the same run.

CAOVAN_QK_PDL=1/0 toggles it (this branch only); CUDA-graph time at the bench cases matching REGEX, accuracy
checked. Usage (repository root, PYTHONPATH=src): ab.py OUT [REGEX]
"""

import json
import os
import re
import statistics
import sys
import time

import torch

import caovan.kernels.gdn_spec_decode as spec
from caovan.bench import accuracy
from caovan.bench.cases import bench_cases, build_inputs
from caovan.bench.kernels import BenchSettings, _bound_call, time_cuda_graph_us
from caovan.kernels.gdn_spec_decode import gdn_spec_decode
from caovan.kernels.gdn_spec_decode.naive import gdn_spec_decode_reference

filt = re.compile(sys.argv[2] if len(sys.argv) > 2 else ".")
recorded = json.load(open("docs/bench/bench-kernels-h200.json"))["cases"]
vllm_graph = {c["id"]: c["vllm"]["graph_us"] for c in recorded}
settings = BenchSettings(warmup=3, eager_iters=0, graph_calls=20, graph_replays=20)
res = {"cases": {}, "problems": {}, "counters_nonzero": 0}
t0 = time.time()
for case in bench_cases("all"):
    if not filt.search(case.id):
        continue
    inp = build_inputs(case, "cuda")
    ref = accuracy.run_reference(gdn_spec_decode_reference, inp)
    row = {}
    for rep in range(2):
        for name, flag in (("qkpdl", "1"), ("plain", "0")):
            os.environ["CAOVAN_QK_PDL"] = flag
            spec._plans.clear()
            spec._direct.clear()
            if rep == 0:
                problems = accuracy.check_standalone(case, accuracy.measure(gdn_spec_decode, inp, ref))
                if problems:
                    res["problems"][f"{case.id}|{name}"] = problems
            call = _bound_call(gdn_spec_decode, inp.clone())
            t = statistics.median(time_cuda_graph_us(call, settings) for _ in range(3))
            row[name] = min(row.get(name, 1e9), t)
            torch.cuda.synchronize()
    res["cases"][case.id] = row
    tgt = vllm_graph[case.id] / 2
    print(
        f"{case.id:38s} tgt {tgt:5.2f} " + " ".join(f"{k} {v:5.2f}" for k, v in row.items()),
        f"[{time.time() - t0:.0f}s]",
        flush=True,
    )
ids = [c for c in res["cases"] if not c.startswith("small")]
for k in ("qkpdl", "plain"):
    ok = sum(vllm_graph[c] / res["cases"][c][k] >= 2.0 for c in ids)
    gm = statistics.geometric_mean(res["cases"][c][k] for c in ids)
    print(f"{k:8s} model n={len(ids)} geomean {gm:6.3f} us  >=2x in {ok}/{len(ids)}")
print("problems:", len(res["problems"]), list(res["problems"].items())[:3])
json.dump(res, open(os.path.join(sys.argv[1], "qkpdl-sweep.json"), "w"), indent=1)
