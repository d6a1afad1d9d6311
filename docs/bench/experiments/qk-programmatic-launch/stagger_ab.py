"""The staggered V/GDN start off, as the plan decides it (full grids only), and always on, in the same run (H200).

The mode is set by replacing the plan's rule `stagger_value_programs`; CUDA-graph time at the bench cases
matching REGEX, accuracy checked. Usage (repository root, PYTHONPATH=src, branch kernels/stagger):
stagger_ab.py OUT [REGEX]
"""

import json
import os
import re
import statistics
import sys
import time

import caovan.kernels.gdn_spec_decode as spec
from caovan.bench import accuracy
from caovan.bench.cases import bench_cases, build_inputs
from caovan.bench.kernels import BenchSettings, _bound_call, time_cuda_graph_us
from caovan.kernels.gdn_spec_decode import gdn_spec_decode
from caovan.kernels.gdn_spec_decode.naive import gdn_spec_decode_reference

rule = spec.stagger_value_programs
MODES = {"off": lambda n, sms: False, "gated": rule, "always": lambda n, sms: True}
filt = re.compile(sys.argv[2] if len(sys.argv) > 2 else ".")
recorded = json.load(open("docs/bench/bench-kernels-h200.json"))["cases"]
vllm_graph = {c["id"]: c["vllm"]["graph_us"] for c in recorded}
settings = BenchSettings(warmup=3, eager_iters=0, graph_calls=20, graph_replays=20)
res = {"cases": {}, "stagger": {}, "problems": {}}
t0 = time.time()
for case in bench_cases("all"):
    if not filt.search(case.id):
        continue
    inp = build_inputs(case, "cuda")
    ref = accuracy.run_reference(gdn_spec_decode_reference, inp)
    row = {}
    for rep in range(2):
        for name, mode in MODES.items():
            spec.stagger_value_programs = mode
            spec._plans.clear()
            spec._direct.clear()
            if rep == 0:
                problems = accuracy.check_standalone(case, accuracy.measure(gdn_spec_decode, inp, ref))
                if problems:
                    res["problems"][f"{case.id}|{name}"] = problems
            call = _bound_call(gdn_spec_decode, inp.clone())
            t = statistics.median(time_cuda_graph_us(call, settings) for _ in range(3))
            row[name] = min(row.get(name, 1e9), t)
            res["stagger"][f"{case.id}|{name}"] = [p.stagger for p in spec._plans.values()]
    res["cases"][case.id] = row
    print(f"{case.id:38s} tgt {vllm_graph[case.id] / 2:5.2f} " + " ".join(f"{k} {v:5.2f}" for k, v in row.items()))
    print(f"    gated staggers: {res['stagger'][f'{case.id}|gated']} [{time.time() - t0:.0f}s]", flush=True)
spec.stagger_value_programs = rule
ids = [c for c in res["cases"] if not c.startswith("small")]
for k in MODES:
    ok = sum(vllm_graph[c] / res["cases"][c][k] >= 2.0 for c in ids)
    gm = statistics.geometric_mean(res["cases"][c][k] for c in ids)
    print(f"{k:8s} model n={len(ids)} geomean {gm:6.3f} us  >=2x in {ok}/{len(ids)}")
print("problems:", len(res["problems"]), list(res["problems"].items())[:3])
json.dump(res, open(os.path.join(sys.argv[1], "stagger-ab-h200.json"), "w"), indent=1)
