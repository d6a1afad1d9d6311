"""Kernel tier (CUDA GPU): the V/GDN kernel's value block follows the one-wave rule on this GPU.

The rule itself (residency arithmetic, candidate order) is unit-tested with fakes in
tests/unit/test_value_block_occupancy.py; here the register counts come from the compiled kernels on the
GPU, and the plan a real call makes is checked against them. Numerics at whichever block is chosen are
checked by the rest of the kernel tier (the model-shape cases run through the same planning).
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

import triton  # noqa: E402

import caovan.kernels.gdn_spec_decode as spec  # noqa: E402
from caovan.bench.cases import SpecDecodeCase, build_inputs  # noqa: E402
from caovan.kernels.gdn_spec_decode import launcher, plans, triton_kernels  # noqa: E402
from caovan.kernels.gdn_spec_decode.occupancy import SMLimits, resident_programs_per_sm  # noqa: E402


def _plan_and_compiled_blocks(case):
    """The plan of one real call, and {BV: (registers, shared bytes)} of every V/GDN kernel compiled for it."""
    plans.cached.clear()
    launcher.direct_launches.clear()
    compiled = {}
    warmup = triton_kernels._caovan_sm75_fused_v_gdn_spec_decode_kernel.warmup

    def recording_warmup(*args, **kwargs):
        kernel = warmup(*args, **kwargs)
        kernel.run  # noqa: B018 - loads it, as the planner does
        bv = kwargs["grid"][0]
        compiled[bv] = (kernel.n_regs, kernel.metadata.shared)
        return kernel

    inputs = build_inputs(case, "cuda")
    args, kwargs = inputs.kernel_args()
    triton_kernels._caovan_sm75_fused_v_gdn_spec_decode_kernel.warmup = recording_warmup
    try:
        spec.gdn_spec_decode(*args, **kwargs)
    finally:
        del triton_kernels._caovan_sm75_fused_v_gdn_spec_decode_kernel.warmup
    torch.cuda.synchronize()
    (plan,) = plans.cached.values()
    V = case.head_config.head_v_dim
    return plan, {V // blocks: info for blocks, info in compiled.items()}


@pytest.mark.parametrize("num_seqs", [1, 4, 8])
@pytest.mark.parametrize("head", ["qwen3.6-27b-tp2", "qwen3-next-80b-tp2"])
def test_plan_uses_the_first_value_block_whose_grid_fits_in_one_wave(head, num_seqs):
    case = SpecDecodeCase(head, num_seqs=num_seqs, num_spec_tokens=3, ssm_dtype="float32")
    plan, compiled = _plan_and_compiled_blocks(case)
    config = plans.launch_config_for(torch.device("cuda", torch.cuda.current_device()))
    heads = case.head_config
    limits = SMLimits.of_device(torch.cuda.get_device_properties(0))
    preferred = min(triton.next_power_of_2(config.v_gdn.BV), triton.next_power_of_2(heads.head_v_dim))
    print(f"{case.id}: preferred BV={preferred}, chosen BV={plan.v_block}, compiled (regs, smem) {compiled}")

    def waves(bv):
        regs, shared = compiled[bv]
        resident = resident_programs_per_sm(regs, config.v_gdn.num_warps, shared, limits) * limits.multiprocessors
        return -(-(heads.head_v_dim // bv) * num_seqs * heads.num_v_heads // resident)

    assert plan.v_grid[0] * plan.v_block == heads.head_v_dim
    if plan.v_block == preferred:
        # Kept: it fits, or no larger block was compiled that would need fewer waves.
        assert (
            preferred not in compiled or waves(preferred) <= 1 or all(waves(bv) >= waves(preferred) for bv in compiled)
        )
    else:
        assert plan.v_block > preferred and waves(preferred) > 1 and waves(plan.v_block) < waves(preferred)
