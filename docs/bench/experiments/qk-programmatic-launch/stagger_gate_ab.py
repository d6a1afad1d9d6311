"""The staggered V/GDN start off, as the sm90 entry's state-write threshold decides it, and always on (H200).

The mode is set through the launch entry (`stagger_min_state_write_bytes` None / as in the data / 0); CUDA-graph
time at the bench cases matching REGEX, accuracy checked. Usage (repository root, PYTHONPATH=src, branch
kernels/stagger): stagger_gate_ab.py OUT [REGEX]
"""

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
from caovan.kernels.gdn_spec_decode.launch_configs import LAUNCH_CONFIGS
from caovan.kernels.gdn_spec_decode.naive import gdn_spec_decode_reference

base = LAUNCH_CONFIGS["sm90"]
MODES = {
    "off": replace(base, stagger_min_state_write_bytes=None),
    "gated": base,
    "always": replace(base, stagger_min_state_write_bytes=0),
}
filt = re.compile(sys.argv[2] if len(sys.argv) > 2 else ".")
recorded = json.load(open("docs/bench/bench-kernels-h200.json"))["cases"]
vllm_graph = {c["id"]: c["vllm"]["graph_us"] for c in recorded}
settings = BenchSettings(warmup=3, eager_iters=0, graph_calls=20, graph_replays=20)
res = {"threshold": base.stagger_min_state_write_bytes, "cases": {}, "stagger": {}, "problems": {}}
t0 = time.time()
for case in bench_cases("all"):
    if not filt.search(case.id):
        continue
    inp = build_inputs(case, "cuda")
    ref = accuracy.run_reference(gdn_spec_decode_reference, inp)
    row = {}
    for rep in range(2):
        for name, config in MODES.items():
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
            res["stagger"][f"{case.id}|{name}"] = [p.stagger for p in spec._plans.values()]
    res["cases"][case.id] = row
    print(f"{case.id:38s} tgt {vllm_graph[case.id] / 2:5.2f} " + " ".join(f"{k} {v:5.2f}" for k, v in row.items()))
    print(f"    gated staggers: {res['stagger'][f'{case.id}|gated']} [{time.time() - t0:.0f}s]", flush=True)
ids = [c for c in res["cases"] if not c.startswith("small")]
for k in MODES:
    ok = sum(vllm_graph[c] / res["cases"][c][k] >= 2.0 for c in ids)
    gm = statistics.geometric_mean(res["cases"][c][k] for c in ids)
    print(f"{k:8s} model n={len(ids)} geomean {gm:6.3f} us  >=2x in {ok}/{len(ids)}")
print("problems:", len(res["problems"]), list(res["problems"].items())[:3])
json.dump(res, open(os.path.join(sys.argv[1], "stagger-gate-ab-h200.json"), "w"), indent=1)
