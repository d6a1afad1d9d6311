import json, os, statistics, sys
import torch
from caovan.bench.cases import bench_cases, build_inputs
from caovan.bench.kernels import BenchSettings, _bound_call, time_cuda_graph_us
from caovan.bench import accuracy
from caovan.kernels.gdn_spec_decode import gdn_spec_decode
import caovan.kernels.gdn_spec_decode as G
from caovan.kernels.gdn_spec_decode.naive import gdn_spec_decode_reference
out = sys.argv[1]
vllm_graph = {c["id"]: c["vllm"]["graph_us"] for c in json.load(open("docs/bench/bench-kernels-h200.json"))["cases"]}
settings = BenchSettings(warmup=3, eager_iters=0, graph_calls=20, graph_replays=20)
res = {"cases": {}, "problems": {}}
for case in bench_cases("model"):
    inp = build_inputs(case, "cuda")
    ref = accuracy.run_reference(gdn_spec_decode_reference, inp)
    row = {}
    for il in ("prefetch", "inloop", "inloop2d"):
        G._QK_INLOOP = il != "prefetch"; G._QK2D = il == "inloop2d"; G._plans.clear(); G._direct.clear()
        rep = accuracy.measure(gdn_spec_decode, inp, ref)
        probs = accuracy.check_standalone(case, rep)
        if probs: res["problems"][f"{case.id}|{il}"] = probs
        call = _bound_call(gdn_spec_decode, inp.clone())
        row[il] = statistics.median(time_cuda_graph_us(call, settings) for _ in range(3))
    res["cases"][case.id] = row
    print(f"{case.id:38s} tgt {vllm_graph[case.id]/2:5.1f} prefetch {row['prefetch']:5.1f} inloop {row['inloop']:5.1f} inloop2d {row['inloop2d']:5.1f}", flush=True)
for il in ("prefetch", "inloop", "inloop2d"):
    ok = sum(vllm_graph[c] / res["cases"][c][il] >= 2.0 for c in res["cases"])
    gm = statistics.geometric_mean(res["cases"][c][il] for c in res["cases"])
    print(f"inloop={il:5s} geomean {gm:6.2f} us  >=2x in {ok}/{len(res['cases'])}")
print("problems:", len(res["problems"]), list(res["problems"].items())[:3])
json.dump(res, open(os.path.join(out, "sweep4.json"), "w"), indent=1)
