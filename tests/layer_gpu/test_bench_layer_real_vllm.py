"""Kernel tier (CUDA GPU, real vLLM): ``caovan bench layer`` runs one case end to end.

Both real layers are built and timed, and caovan's layer takes the spec step (the counters say so); the two
layers' numerical agreement is tests/layer_gpu/test_real_layer_equivalence.py's job.
"""

from __future__ import annotations

import pytest
from helpers.gpu_visibility import visible_note as cuda_visible_note

torch = pytest.importorskip("torch", reason="kernel tier needs PyTorch")

pytestmark = [
    pytest.mark.kernel,
    pytest.mark.skipif(
        not torch.cuda.is_available(),
        reason=f"no CUDA GPU: the real vLLM GDN layer runs its Triton kernels on CUDA only{cuda_visible_note()}",
    ),
]


def test_quick_case_times_both_layers(tmp_path):
    from caovan.bench import kernels as kb
    from caovan.bench import layer as lb

    (case,) = lb.layer_cases(quick=True)
    row = lb.bench_layer_case(case, tmp_path, kb.QUICK_SETTINGS)
    assert row["error"] is None, row
    assert row["caovan_took_the_step"] and row["counters"]["dispatched"] == {"spec": 1}
    assert row["vllm"]["eager_us"] > 0 and row["ours"]["eager_us"] > 0
    assert row["case"]["num_tokens"] == case.num_seqs * (case.num_spec + 1)
