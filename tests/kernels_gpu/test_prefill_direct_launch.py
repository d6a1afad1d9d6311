"""Kernel tier (CUDA GPU): the prefill's direct launch gives what Triton's own dispatch gives.

After the first call of a layout, ``gdn_prefill``'s fused path calls the compiled kernels' launchers directly
(``caovan.kernels.gdn_prefill.direct``). A later call of the same layer and batch size with other lengths and values
must take that path and write the same bits as Triton's dispatch does.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

torch = pytest.importorskip("torch", reason="kernel tier needs PyTorch")

pytestmark = [
    pytest.mark.kernel,
    pytest.mark.skipif(
        not torch.cuda.is_available(), reason="no CUDA GPU: the kernel tier runs Triton kernels on a GPU"
    ),
]

from helpers.prefill_inputs import PrefillScenario, call, make_inputs  # noqa: E402

from caovan.kernels.gdn_prefill import direct, gdn_prefill  # noqa: E402

#: Qwen3.6-27B's per-GPU shape at TP=2; the second batch has other lengths (other grids, the same kernels).
FIRST = PrefillScenario("tp2", seq_lens=(300, 17, 1024), num_k_heads=8, group=3, head_k_dim=128, head_v_dim=128)
SECOND = replace(FIRST, seq_lens=(5, 2000, 64), seed=3)


def test_a_later_call_of_the_layout_launches_directly_and_writes_what_triton_writes():
    direct._launches.clear()
    call(gdn_prefill, make_inputs(FIRST, "cuda"))
    assert len(direct._launches) == 1, "the first aligned call of a layout should cache its launchers"
    second = make_inputs(SECOND, "cuda")
    via_direct = call(gdn_prefill, second)
    assert len(direct._launches) == 1, "same layer and batch size: no new key"
    saved = dict(direct._launches)
    direct._launches.clear()
    try:
        via_triton = call(gdn_prefill, second)
    finally:
        direct._launches.update(saved)
    for name in ("out", "ssm_state"):
        assert torch.equal(via_direct["tensors"][name], via_triton["tensors"][name]), name
