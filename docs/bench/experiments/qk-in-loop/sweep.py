"""CUDA-graph time of three V/GDN kernel variants at the 64 model cases (needs variants.patch applied)."""

import json
import os
import statistics
import sys

import caovan.kernels.gdn_spec_decode as spec
from caovan.bench import accuracy
from caovan.bench.cases import bench_cases, build_inputs
from caovan.bench.kernels import BenchSettings, _bound_call, time_cuda_graph_us
from caovan.kernels.gdn_spec_decode import gdn_spec_decode
from caovan.kernels.gdn_spec_decode.naive import gdn_spec_decode_reference

VARIANTS = ("prefetch", "inloop", "inloop2d")

out = sys.argv[1]
recorded = json.load(open("docs/bench/bench-kernels-h200.json"))["cases"]
vllm_graph = {c["id"]: c["vllm"]["graph_us"] for c in recorded}
settings = BenchSettings(warmup=3, eager_iters=0, graph_calls=20, graph_replays=20)
res = {"cases": {}, "problems": {}}
for case in bench_cases("model"):
    inp = build_inputs(case, "cuda")
    ref = accuracy.run_reference(gdn_spec_decode_reference, inp)
    row = {}
    for variant in VARIANTS:
        spec._QK_INLOOP = variant != "prefetch"
        spec._QK2D = variant == "inloop2d"
        spec._plans.clear()
        spec._direct.clear()
        problems = accuracy.check_standalone(case, accuracy.measure(gdn_spec_decode, inp, ref))
        if problems:
            res["problems"][f"{case.id}|{variant}"] = problems
        call = _bound_call(gdn_spec_decode, inp.clone())
        row[variant] = statistics.median(time_cuda_graph_us(call, settings) for _ in range(3))
    res["cases"][case.id] = row
    times = " ".join(f"{v} {row[v]:5.1f}" for v in VARIANTS)
    print(f"{case.id:38s} tgt {vllm_graph[case.id] / 2:5.1f} {times}", flush=True)
for variant in VARIANTS:
    ok = sum(vllm_graph[c] / res["cases"][c][variant] >= 2.0 for c in res["cases"])
    gm = statistics.geometric_mean(res["cases"][c][variant] for c in res["cases"])
    print(f"inloop={variant:5s} geomean {gm:6.2f} us  >=2x in {ok}/{len(res['cases'])}")
print("problems:", len(res["problems"]), list(res["problems"].items())[:3])
json.dump(res, open(os.path.join(out, "sweep4.json"), "w"), indent=1)
