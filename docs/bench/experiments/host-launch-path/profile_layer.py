"""Where caovan's layer call spends its host time beyond its kernel call (H200 host, full vLLM 0.21.0).

``caovan bench layer`` builds the two real layers and hands their bound ``_forward_core`` calls to
``time_eager_us``; this script swaps that timer for one that, inside the same forward context, times pieces of
caovan's call and runs cProfile over it. Usage (repository root, vLLM on PYTHONPATH):
``profile_layer.py OUT`` (writes OUT/profile-layer-h200.json).
"""

import cProfile
import inspect
import io
import json
import pstats
import sys
import tempfile
import time
from pathlib import Path

import torch

import caovan.bench.layer as bench_layer
from caovan.adapters.gdn_linear_attn_v020_layer import kernel_tensors
from caovan.bench.kernels import BenchSettings

N = 3000
report = {"calls_per_timing": N, "cases": {}}


def per_call_us(fn):
    for _ in range(200):
        fn()
    torch.cuda.synchronize()
    best = float("inf")
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(N):
            fn()
        torch.cuda.synchronize()
        best = min(best, (time.perf_counter() - t0) / N * 1e6)
    return best


def timer(fns, settings):
    from vllm.forward_context import get_forward_context

    ours = fns[1]
    cells = inspect.getclosurevars(ours).nonlocals
    layer, mine, out = cells["layer"], cells["mine"], cells["out"]
    md = get_forward_context().attn_metadata[layer.prefix]
    conv_dim_first = layer._caovan_plan.conv_dim_first
    row = {
        "forward_core_us": per_call_us(ours),
        "spec_us": per_call_us(lambda: layer._caovan_spec(md, mine.mixed_qkv, mine.b, mine.a, out, None)),
        "kernel_tensors_us": per_call_us(lambda: kernel_tensors(layer, conv_dim_first)),
        "get_forward_context_us": per_call_us(get_forward_context),
        "vllm_forward_core_us": per_call_us(fns[0]),
    }
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(N):
        ours()
    torch.cuda.synchronize()
    prof.disable()
    text = io.StringIO()
    pstats.Stats(prof, stream=text).sort_stats("tottime").print_stats(25)
    row["cprofile_tottime_top25"] = text.getvalue().splitlines()
    timer.row = row
    return [row["vllm_forward_core_us"], row["forward_core_us"]]


bench_layer.time_eager_us = timer
settings = BenchSettings()
for case in (
    bench_layer.LayerCase("qwen3.6-27b-tp2", 1, 1, "float32"),
    bench_layer.LayerCase("qwen3.6-27b-tp2", 8, 3, "float32"),
):
    bench_layer.bench_layer_case(case, Path(tempfile.mkdtemp()), settings)
    report["cases"][case.id] = timer.row
    print(case.id, {k: round(v, 2) for k, v in timer.row.items() if k.endswith("_us")}, flush=True)
    print("\n".join(timer.row["cprofile_tottime_top25"][:40]), flush=True)
out = Path(sys.argv[1]) / "profile-layer-h200.json"
out.write_text(json.dumps(report, indent=1))
