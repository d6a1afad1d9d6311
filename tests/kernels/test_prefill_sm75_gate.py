"""sm_75 gate of the GDN prefill: every launch configuration x every supported dtype combination compiles ahead of
time (no GPU needed), for the oldest GPU that runs it (the sm75 entry for sm_75), at Qwen3.6-27B's per-GPU shapes
(TP=1 and TP=2) within Turing's 64 KiB of shared memory,
without bf16 in the PTX unless an input is bf16, without register spills, and with at least two state-kernel
programs resident per RTX 2080 Ti SM (``caovan.kernels.gdn_prefill.aot`` says why and how it is computed)."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.sm75_gate

triton = pytest.importorskip("triton", reason="triton is not installed: nothing to compile")

from caovan.kernels.gdn_prefill import aot  # noqa: E402
from caovan.kernels.gdn_prefill.launch_configs import ALL_LAUNCH_CONFIGS  # noqa: E402

_MATRIX = aot.sm75_gate_matrix()


def _case_id(case) -> str:
    config, combo, shape, variant = case
    return f"{config.arch}-BV{config.state.BV}-{combo.name}-{shape.name}-{variant.name}"


@pytest.mark.parametrize("case", _MATRIX, ids=[_case_id(c) for c in _MATRIX])
def test_compiles_for_sm75_within_limits(case):
    config, combo, shape, variant = case
    infos = aot.compile_prefill_kernels(config, combo, variant, shape)
    assert [i.kernel for i in infos] == list(aot.COMPILED_NAMES if config.chunked else aot.KERNEL_NAMES[:2])
    for info in infos:
        print(
            f"{info.kernel} [{info.target}, {info.num_warps} warps, {info.num_stages} stages, BV={info.block_v}]: "
            f"shared={info.shared_bytes} B regs={info.registers} spills={info.spill_bytes} B "
            f"blocks/SM={info.blocks_per_sm} bf16_in_ptx={info.ptx_has_bf16} ({info.seconds} s)"
        )
    problems = aot.gate_problems(infos)
    assert not problems, "\n".join(problems)


def test_gate_covers_every_config_dtype_combo_and_shape():
    covered = {(c.arch, d, s) for c, d, s, _ in _MATRIX}
    wanted = {(c.arch, d, s) for c in ALL_LAUNCH_CONFIGS for d in aot.SUPPORTED_DTYPE_COMBOS for s in aot.SHAPES}
    assert wanted <= covered
    assert {v for *_, v in _MATRIX} == {aot.DEFAULT_VARIANT, *aot.EXTRA_VARIANTS}


def test_sm75_targets_16_bit_activations_and_bf16_targets_sm80():
    # Turing has no bf16: an SM75 deployment runs --dtype half; bf16 is compiled for the next architecture.
    assert {c.capability for c in aot.SUPPORTED_DTYPE_COMBOS if not c.has_bf16} == {(7, 5)}
    assert {c.capability for c in aot.SUPPORTED_DTYPE_COMBOS if c.has_bf16} == {(8, 0)}


def test_each_entry_compiles_for_the_oldest_gpu_that_runs_it():
    from caovan.kernels.gdn_prefill.launch_configs import LAUNCH_CONFIGS

    fp16, bf16 = aot.SUPPORTED_DTYPE_COMBOS[0], aot.SUPPORTED_DTYPE_COMBOS[2]
    assert aot.target_for(LAUNCH_CONFIGS["sm75"], fp16) == (7, 5)
    assert aot.target_for(LAUNCH_CONFIGS["sm75"], bf16) == (8, 0)
    assert aot.target_for(LAUNCH_CONFIGS["sm80"], fp16) == (8, 0)


def test_gate_rules_catch_violations():
    # The checks themselves must be able to fail.
    base = dict(
        target="sm75",
        config="sm75",
        dtypes="d",
        shape="s",
        variant="v",
        num_warps=4,
        num_stages=1,
        block_v=32,
        seconds=0.0,
        ptx_has_bf16=False,
        bf16_inputs=False,
        shared_bytes=0,
    )
    state, wy = aot.KERNEL_NAMES[1], aot.KERNEL_NAMES[0]
    big_grid = 2 * 68
    infos = [
        aot.CompiledKernelInfo(kernel=wy, **{**base, "shared_bytes": 65537}),
        aot.CompiledKernelInfo(kernel=wy, **{**base, "ptx_has_bf16": True}),
        aot.CompiledKernelInfo(kernel=wy, **{**base, "ptx_has_bf16": True, "bf16_inputs": True}),  # allowed
        aot.CompiledKernelInfo(kernel=wy, **base, spill_bytes=8),
        aot.CompiledKernelInfo(kernel=wy, **base, spill_bytes=None),  # no ptxas: not judged
        aot.CompiledKernelInfo(kernel=wy, **base, blocks_per_sm=1, grid_programs=big_grid),  # WY: not judged
        aot.CompiledKernelInfo(kernel=state, **base, blocks_per_sm=1, grid_programs=big_grid - 1),  # small grid
        aot.CompiledKernelInfo(kernel=state, **base, blocks_per_sm=1, grid_programs=big_grid),
    ]
    problems = aot.gate_problems(infos)
    assert len(problems) == 4, problems
    assert "8 B of register spills" in problems[2] and "fewer than 2" in problems[3]


def test_blocks_per_sm_follow_the_occupancy_formula():
    # RTX 2080 Ti per SM: 64 K registers (allocated per warp in units of 256), 32 warps, 64 KiB shared, 16 blocks.
    from caovan.kernels.gdn_spec_decode.occupancy import RTX_2080_TI, resident_programs_per_sm

    assert resident_programs_per_sm(128, 4, 16384, RTX_2080_TI) == 4  # registers: 65536 // (128 * 32) // 4
    assert resident_programs_per_sm(64, 4, 40000, RTX_2080_TI) == 1  # shared memory: 65536 // 40000
    assert resident_programs_per_sm(32, 8, 0, RTX_2080_TI) == 4  # warps: 32 // 8
    assert resident_programs_per_sm(255, 4, 0, RTX_2080_TI) == 2  # 255 registers round up to 256 per thread
