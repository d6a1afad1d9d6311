"""Kernel tier (CUDA GPU): caovan's GDN prefill vs the installed vLLM's prefill vs float64, at real shapes.

Per-GPU shapes of Qwen3.6-27B (K = V = 128; TP=2: 8 key heads, 24 value heads; HV/H 1 and 2 besides), varlen
batches of 1 to 8K tokens per sequence, with and without cached initial states, null slots, fp16 and bf16
activations, fp32 and fp16 states, in the installed family's SSM layout and null-slot rule, on both of caovan's paths
(fused and chunked, each forced at every length). Inputs, oracle and
rule: ``helpers/prefill_inputs.py`` (caovan within ``ACTIVATION_ULPS`` of float64 and not above vLLM's error plus
two ulps of the stored dtype, for the output and the live slots' states; other slots untouched).
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

from helpers.prefill_inputs import PrefillScenario, call, compare, make_inputs, run_oracle  # noqa: E402

_TP2 = PrefillScenario(id="tp2", num_k_heads=8, group=3, head_k_dim=128, head_v_dim=128)

CASES = [
    replace(_TP2, id="tp2_varlen_fp16", seq_lens=(100, 1, 1000, 64, 2047), seed=901),
    replace(_TP2, id="tp2_8k_fp16", seq_lens=(8192,), initial="all", seed=902),
    replace(_TP2, id="tp2_varlen_bf16", act_dtype="bfloat16", seq_lens=(513, 65, 4000), seed=903),
    replace(_TP2, id="tp2_fp16_state", ssm_dtype="float16", seq_lens=(300, 1200), seed=904),
    replace(_TP2, id="tp2_bf16_bf16_state", act_dtype="bfloat16", ssm_dtype="bfloat16", seq_lens=(700,), seed=905),
    replace(_TP2, id="tp2_null_slots", seq_lens=(50, 200, 70, 9), null_seqs=(1, 3), seed=906),
    replace(_TP2, id="tp2_no_initial", seq_lens=(1024, 1024), initial="none", seed=907),
    replace(_TP2, id="tp2_prenormalised", l2norm_in_kernel=False, seq_lens=(333, 4096), seed=908),
    replace(_TP2, id="g1_varlen", group=1, num_k_heads=4, seq_lens=(129, 2500), seed=909),
    replace(_TP2, id="g2_varlen", group=2, num_k_heads=4, seq_lens=(1, 2, 3, 4, 1500), seed=910),
]


@pytest.fixture(scope="module")
def family():
    from caovan.adapters.registry import recognised_family

    found, refusal = recognised_family()
    if refusal is not None:
        pytest.skip(f"caovan does not serve this release: {refusal}")
    return found


@pytest.mark.parametrize("path", ["fused", "chunked"])
@pytest.mark.parametrize("sc", CASES, ids=[c.id for c in CASES])
def test_prefill_error_not_above_vllm_at_real_shapes(family, sc, path):
    import functools

    from caovan.bench.vllm_prefill_path import VllmPrefill
    from caovan.kernels.gdn_prefill import gdn_prefill
    from caovan.kernels.gdn_prefill.entry import launch_config
    from caovan.kernels.gdn_prefill.launch_configs import path_forced

    sc = replace(sc, ssm_layout=family.ssm_layout, null_slot_max=family.null_slot_max)
    inputs = make_inputs(sc, device="cuda")
    entry = path_forced(launch_config(torch.device("cuda")), path)
    ours = call(functools.partial(gdn_prefill, config=entry), inputs)
    theirs = call(VllmPrefill(family), inputs)
    ref = run_oracle(inputs)
    result = compare(inputs, ours, ref, theirs)
    print(f"{sc.id} ({path}): caovan {result['errors']} vLLM {result['vllm_errors']}")
    assert result["ok"], result["detail"]
