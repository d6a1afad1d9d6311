"""sm_75 gate: every launch configuration x every supported dtype combination compiles ahead of
time for Turing (no GPU needed), within Turing's 64 KiB shared memory, and without bf16 in the
PTX unless an input is bf16 (sm_75 has no bf16 instructions)."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.sm75_gate

triton = pytest.importorskip("triton", reason="triton is not installed: nothing to compile")

from caovan.kernels.gdn_spec_decode import KERNEL_NAMES, aot  # noqa: E402

_MATRIX = aot.sm75_gate_matrix()


def _case_id(case) -> str:
    config, combo, layout = case
    return f"{config.arch}-BV{config.v_gdn.BV}-{combo.name}-{layout.name}"


@pytest.mark.parametrize("case", _MATRIX, ids=[_case_id(c) for c in _MATRIX])
def test_compiles_for_sm75_within_limits(case):
    config, combo, layout = case
    infos = aot.compile_spec_decode_kernels(config, combo, layout, capability=(7, 5))
    assert [i.kernel for i in infos] == list(KERNEL_NAMES)
    for info in infos:
        print(
            f"{info.kernel}: shared={info.shared_bytes} B regs={info.registers} "
            f"spills={info.spill_bytes} B bf16_in_ptx={info.ptx_has_bf16} ({info.seconds} s)"
        )
    assert aot.gate_problems(infos) == []


def test_gate_covers_every_config_and_dtype_combo():
    from caovan.kernels.gdn_spec_decode.launch_configs import ALL_LAUNCH_CONFIGS

    covered = {(c.arch, c.v_gdn, d) for c, d, _ in _MATRIX}
    wanted = {(c.arch, c.v_gdn, d) for c in ALL_LAUNCH_CONFIGS for d in aot.SUPPORTED_DTYPE_COMBOS}
    assert wanted <= covered


def test_gate_covers_the_value_blocks_the_one_wave_rule_can_switch_to():
    # A launch may run an entry with a larger BV (occupancy.py): those kernels must pass the gate too, and
    # the sm90 entry (BV=8, one warp) is one that can switch (to BV=16) at the model shape.
    from caovan.kernels.gdn_spec_decode.launch_configs import LAUNCH_CONFIGS
    from caovan.kernels.gdn_spec_decode.occupancy import value_block_candidates

    shape = aot.QWEN36_27B_TP2_MTP3
    covered = {(c.arch, c.v_gdn.BV, c.v_gdn.num_warps, d) for c, d, _ in _MATRIX}
    switchable = 0
    for entry in LAUNCH_CONFIGS.values():
        v = entry.v_gdn
        candidates = value_block_candidates(v.BV, shape.head_k_dim, v.num_warps, shape.head_v_dim)
        switchable += len(candidates) > 1
        for bv in candidates:
            for combo in aot.SUPPORTED_DTYPE_COMBOS:
                assert (entry.arch, bv, v.num_warps, combo) in covered, (entry.arch, bv, combo.name)
    assert switchable >= 1


def test_gate_rules_catch_violations():
    # The checks themselves must be able to fail.
    base = dict(
        kernel="k", target="sm75", config="sm75", dtypes="d", layout="l", num_warps=2, num_stages=1, seconds=0.0
    )
    too_big = aot.CompiledKernelInfo(**base, shared_bytes=65537, ptx_has_bf16=False, bf16_inputs=False)
    stray_bf16 = aot.CompiledKernelInfo(**base, shared_bytes=0, ptx_has_bf16=True, bf16_inputs=False)
    allowed_bf16 = aot.CompiledKernelInfo(**base, shared_bytes=65536, ptx_has_bf16=True, bf16_inputs=True)
    assert len(aot.gate_problems([too_big, stray_bf16, allowed_bf16])) == 2


def test_bf16_detector_sees_bf16_in_real_ptx():
    # On sm_75 Triton emulates bf16 with integer ops, so the gate's bf16 check would never fire
    # there; on sm_90 the same kernels use bf16 conversions, which the detector must report.
    bf16 = next(c for c in aot.SUPPORTED_DTYPE_COMBOS if c.activation == "bfloat16")
    fp16 = aot.SUPPORTED_DTYPE_COMBOS[0]
    sm90 = next(c for c in aot.ALL_LAUNCH_CONFIGS if c.arch == "sm90")
    assert all(i.ptx_has_bf16 for i in aot.compile_spec_decode_kernels(sm90, bf16, capability=(9, 0)))
    assert not any(i.ptx_has_bf16 for i in aot.compile_spec_decode_kernels(sm90, fp16, capability=(9, 0)))
