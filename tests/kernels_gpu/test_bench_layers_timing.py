"""Kernel tier (CUDA GPU): the "layers" graph timing of ``caovan bench kernels`` captures real launches.

Each captured call must run on its own copy of the inputs (one GDN layer's caches each): after one replay every
copy's output rows hold the kernel's result, not only the first copy's.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch", reason="kernel tier needs PyTorch")

pytestmark = [
    pytest.mark.kernel,
    pytest.mark.skipif(
        not torch.cuda.is_available(), reason="no CUDA GPU: the kernel tier runs Triton kernels on a GPU"
    ),
]

from caovan.bench import kernels as kb  # noqa: E402
from caovan.bench.cases import SpecDecodeCase, build_inputs  # noqa: E402
from caovan.kernels.gdn_spec_decode import gdn_spec_decode  # noqa: E402


def test_layers_timing_runs_every_copy():
    case = SpecDecodeCase("qwen3.6-27b-tp2", num_seqs=2, num_spec_tokens=2, ssm_dtype="float32")
    inputs = build_inputs(case, "cuda")
    copies = [inputs.clone() for _ in range(3)]
    settings = kb.BenchSettings(graph_calls=3, graph_replays=1, graph_repeats=1)
    assert kb._layers_graph_us(gdn_spec_decode, copies, settings, kb.time_cuda_graph_us) > 0

    # The captured calls themselves cycle: replaying the graph alone rewrites every copy's output rows.
    cycled = kb._cycling_call([kb._bound_call(gdn_spec_decode, c) for c in copies])
    cycled(), cycled(), cycled()  # compile and cache outside the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(len(copies)):
            cycled()
    for c in copies:
        c.out.zero_()
    graph.replay()
    torch.cuda.synchronize()
    for i, c in enumerate(copies):
        assert c.out.abs().sum().item() > 0, f"copy {i} was not run by the replay"
    assert kb.layer_copies(1 << 20, 1 << 20, kb._l2_bytes("cuda"), kb.BenchSettings()) >= 2
