"""Per-kernel GPU durations (CUPTI via torch.profiler) of caovan's two launches in CUDA-graph replay."""

import torch
from torch.profiler import ProfilerActivity, profile

import caovan.kernels.gdn_spec_decode as spec
from caovan.bench.cases import SpecDecodeCase, build_inputs
from caovan.bench.kernels import _bound_call

for head, b, m, dt in [
    ("qwen3.6-27b-tp2", 8, 4, "float32"),
    ("qwen3.6-27b-tp2", 8, 2, "float32"),
    ("qwen3.6-27b-tp2", 8, 4, "float16"),
    ("qwen3-next-80b-tp2", 8, 4, "float32"),
    ("qwen3.6-27b-tp2", 1, 3, "float16"),
]:
    case = SpecDecodeCase(head, num_seqs=b, num_spec_tokens=m, ssm_dtype=dt)
    inp = build_inputs(case, "cuda")
    call = _bound_call(spec.gdn_spec_decode, inp.clone())
    call()
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        call()
    torch.cuda.synchronize()
    with torch.cuda.graph(g):
        for _ in range(10):
            call()
    for _ in range(5):
        g.replay()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as p:
        for _ in range(5):
            g.replay()
        torch.cuda.synchronize()
    st, en = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    st.record()
    for _ in range(20):
        g.replay()
    en.record()
    torch.cuda.synchronize()
    per_call = st.elapsed_time(en) * 1000 / 200
    plan = next(iter(spec._plans.values())) if len(spec._plans) == 1 else [p for p in spec._plans.values()][-1]
    rows = {
        e.key: (e.count, e.device_time_total / max(e.count, 1)) for e in p.key_averages() if e.device_time_total > 0
    }
    print(
        case.id,
        f"BV={plan.v_block} per-call {per_call:.2f} us",
        {k[-30:]: f"n={c} {t:.2f}us" for k, (c, t) in rows.items()},
        flush=True,
    )
    spec._plans.clear()
    spec._direct.clear()
