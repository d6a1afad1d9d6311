"""sm_75 gate: every launch configuration x every supported dtype combination compiles ahead of
time for Turing (no GPU needed), within Turing's 64 KiB shared memory, without bf16 in the
PTX unless an input is bf16 (sm_75 has no bf16 instructions) and without register spills; and the
sm75 entry's V/GDN grid fits in one wave of resident programs on an RTX 2080 Ti up to 4 sequences."""

from __future__ import annotations

import dataclasses

import pytest

pytestmark = pytest.mark.sm75_gate

triton = pytest.importorskip("triton", reason="triton is not installed: nothing to compile")

from caovan.kernels.gdn_spec_decode import KERNEL_NAMES, aot  # noqa: E402

_MATRIX = aot.sm75_gate_matrix()


def _case_id(case) -> str:
    config, combo, layout = case
    v = config.v_gdn
    rows = f"-rows{v.row_split_lanes}" if v.splits_rows(v.BV, True) else ""
    return f"{config.arch}-BV{v.BV}{rows}-{combo.name}-{layout.name}"


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


def test_gate_covers_the_row_split_block_with_the_states_it_splits():
    # The sm90 entry splits the slab's rows at BV 16 for large fp32-state calls: that kernel must pass the gate
    # too, with every fp32-state combination. A 16-bit state never splits (its kernel would spill at the cap).
    from caovan.kernels.gdn_spec_decode.launch_configs import LAUNCH_CONFIGS

    split = {combo for c, combo, _ in _MATRIX if c.v_gdn.splits_rows(c.v_gdn.BV, True)}
    assert LAUNCH_CONFIGS["sm90"].v_gdn.row_split_block == 16
    assert split == {combo for combo in aot.SUPPORTED_DTYPE_COMBOS if combo.ssm_state == "float32"}


# Turing has no bf16: an SM75 deployment runs --dtype half (fp16 or fp32 caches).
_SM75_DTYPE_COMBOS = [c for c in aot.SUPPORTED_DTYPE_COMBOS if not c.has_bf16]
_RTX_2080_TI_ONE_WAVE_UP_TO = 4  # sequences per batch


@pytest.mark.parametrize("num_spec_tokens", [1, 2, 3, 4])
@pytest.mark.parametrize("head", ["qwen3.6-27b-tp2", "qwen3-next-80b-tp2"])
def test_sm75_entry_fits_one_wave_on_an_rtx_2080_ti_up_to_4_sequences(head, num_spec_tokens):
    # On the H200 a V/GDN grid that fits in one wave of resident programs ran 5-21 % faster than one needing 1.4
    # waves (docs/bench/kernel-design.md). No RTX 2080 Ti is at hand, so its residency is computed
    # from the sm_75 compile's register count with its limits: a kernel change that costs registers on sm_75
    # (168 is the most that keeps 6 two-warp programs per SM) shows up here, not first on a user's GPU.
    import triton

    from caovan.bench.cases import HEAD_CONFIGS
    from caovan.kernels.gdn_spec_decode.launch_configs import LAUNCH_CONFIGS
    from caovan.kernels.gdn_spec_decode.occupancy import (
        RTX_2080_TI,
        choose_value_block,
        resident_programs_per_sm,
        value_block_candidates,
    )

    entry = LAUNCH_CONFIGS["sm75"]
    hc = HEAD_CONFIGS[head]
    shape = aot.ModelShape(
        num_k_heads=hc.num_k_heads,
        num_v_heads=hc.num_v_heads,
        head_k_dim=hc.head_k_dim,
        head_v_dim=hc.head_v_dim,
        t_max=1 + num_spec_tokens,
    )
    candidates = value_block_candidates(
        entry.v_gdn.BV,
        triton.next_power_of_2(hc.head_k_dim),
        entry.v_gdn.num_warps,
        triton.next_power_of_2(hc.head_v_dim),
    )
    for combo in _SM75_DTYPE_COMBOS:
        residency = {}

        def resident_on_gpu(bv, combo=combo, residency=residency):
            config = dataclasses.replace(entry, v_gdn=dataclasses.replace(entry.v_gdn, BV=bv))
            v_gdn = aot.compile_spec_decode_kernels(config, combo, shape=shape)[1]
            assert v_gdn.registers is not None, "ptxas -v gave no register count: the residency cannot be computed"
            assert aot.gate_problems([v_gdn]) == []  # a register cap must not buy residency with spills
            per_sm = resident_programs_per_sm(v_gdn.registers, v_gdn.num_warps, v_gdn.shared_bytes, RTX_2080_TI)
            residency[bv] = (v_gdn.registers, per_sm)
            return per_sm * RTX_2080_TI.multiprocessors

        def programs(bv, num_seqs):
            return -(-hc.head_v_dim // bv) * num_seqs * hc.num_v_heads

        for num_seqs in range(1, 9):
            bv = choose_value_block(candidates, lambda bv, n=num_seqs: programs(bv, n), resident_on_gpu)
            registers, per_sm = residency[bv]
            waves = programs(bv, num_seqs) / (per_sm * RTX_2080_TI.multiprocessors)
            print(
                f"{head} MTP {num_spec_tokens} {combo.name} B{num_seqs}: BV={bv}, {registers} registers, "
                f"{per_sm} programs per SM, {programs(bv, num_seqs)} programs = {waves:.2f} waves"
            )
            if num_seqs <= _RTX_2080_TI_ONE_WAVE_UP_TO:
                assert waves <= 1, (
                    f"{head} MTP {num_spec_tokens} {combo.name}: {num_seqs} sequences need {waves:.2f} waves of "
                    f"resident V/GDN programs on an RTX 2080 Ti ({registers} registers on sm_75, {per_sm} per SM)"
                )


@pytest.mark.parametrize("layout", aot.EXTRA_LAYOUTS, ids=lambda layout: layout.name)
def test_sm75_entry_register_cap_costs_no_spills_in_any_layout_at_mtp4(layout):
    # MTP 4 is where the cap binds (uncapped: 197-204 registers on sm_75); the gate matrix above compiles the
    # other layouts at MTP 3 only.
    from caovan.kernels.gdn_spec_decode.launch_configs import LAUNCH_CONFIGS

    entry = LAUNCH_CONFIGS["sm75"]
    assert entry.v_gdn.maxnreg is not None
    for combo in _SM75_DTYPE_COMBOS:
        infos = aot.compile_spec_decode_kernels(entry, combo, layout, shape=aot.ModelShape(t_max=5))
        assert infos[1].registers is not None and infos[1].registers <= entry.v_gdn.maxnreg
        assert aot.gate_problems(infos) == []


def test_gate_rules_catch_violations():
    # The checks themselves must be able to fail.
    base = dict(
        kernel="k", target="sm75", config="sm75", dtypes="d", layout="l", num_warps=2, num_stages=1, seconds=0.0
    )
    too_big = aot.CompiledKernelInfo(**base, shared_bytes=65537, ptx_has_bf16=False, bf16_inputs=False)
    stray_bf16 = aot.CompiledKernelInfo(**base, shared_bytes=0, ptx_has_bf16=True, bf16_inputs=False)
    allowed_bf16 = aot.CompiledKernelInfo(**base, shared_bytes=65536, ptx_has_bf16=True, bf16_inputs=True)
    spills = aot.CompiledKernelInfo(**base, shared_bytes=0, ptx_has_bf16=False, bf16_inputs=False, spill_bytes=8)
    unknown = aot.CompiledKernelInfo(**base, shared_bytes=0, ptx_has_bf16=False, bf16_inputs=False, spill_bytes=None)
    problems = aot.gate_problems([too_big, stray_bf16, allowed_bf16, spills, unknown])
    assert len(problems) == 3 and "8 B of register spills" in problems[-1]


def test_bf16_detector_sees_bf16_in_real_ptx():
    # On sm_75 Triton emulates bf16 with integer ops, so the gate's bf16 check would never fire
    # there; on sm_90 the same kernels use bf16 conversions, which the detector must report.
    bf16 = next(c for c in aot.SUPPORTED_DTYPE_COMBOS if c.activation == "bfloat16")
    fp16 = aot.SUPPORTED_DTYPE_COMBOS[0]
    sm90 = next(c for c in aot.ALL_LAUNCH_CONFIGS if c.arch == "sm90")
    assert all(i.ptx_has_bf16 for i in aot.compile_spec_decode_kernels(sm90, bf16, capability=(9, 0)))
    assert not any(i.ptx_has_bf16 for i in aot.compile_spec_decode_kernels(sm90, fp16, capability=(9, 0)))
