"""CPU tests of the DRAM byte count behind the bench's roofline column."""

from __future__ import annotations

import pytest

from caovan.bench.cases import NULL_BLOCK_ID, SpecDecodeCase, plan_batch
from caovan.bench.roofline import roofline_us, spec_decode_traffic


def test_one_sequence_counted_by_hand():
    # tiny: H=1, HV=2, K=V=16, width 4 -> conv_dim = 2*16 + 2*16 = 64; fp16 activations and conv
    # state, fp32 SSM state; one sequence of T = 2 tokens.
    t = spec_decode_traffic(plan_batch(SpecDecodeCase("tiny", num_seqs=1, num_spec_tokens=1)))
    state = 2 * 16 * 16 * 4
    assert t.ssm_state_read == state  # read once
    assert t.ssm_state_write == 2 * state  # written after each of the 2 tokens
    assert t.conv_state_read == 3 * 64 * 2  # width-1 columns
    assert t.conv_state_write == (4 - 2 + 2) * 64 * 2  # width-2+T columns
    assert t.inputs == 2 * (64 + 2 * 2) * 2  # mixed_qkv, a, b rows
    assert t.outputs == 2 * 2 * 16 * 2
    assert t.params == 64 * 4 * 2 + 2 * (4 + 2)  # conv weight, A_log fp32, dt_bias fp16
    assert t.metadata == 4 * (2 + 2 + 1)  # query_start_loc, state indices row, accepted
    assert t.total == 7984
    assert t.as_dict()["total"] == t.total


def test_ssm_state_dominates_and_scales_with_batch_and_tokens():
    def ssm(b, mtp, dtype="float32"):
        case = SpecDecodeCase("qwen3.6-27b-tp2", num_seqs=b, num_spec_tokens=mtp, ssm_dtype=dtype)
        return spec_decode_traffic(plan_batch(case))

    state = 24 * 128 * 128 * 4
    t = ssm(4, 3)
    assert t.ssm_state_read == 4 * state and t.ssm_state_write == 4 * 4 * state
    assert t.ssm_state_read + t.ssm_state_write > 0.9 * t.total
    assert ssm(4, 3, "float16").ssm_state_write * 2 == t.ssm_state_write


def test_null_slots_and_padding_move_no_state():
    base = SpecDecodeCase("small", num_seqs=4, num_spec_tokens=3)
    plain = spec_decode_traffic(plan_batch(base))
    h = base.head_config
    state = h.num_v_heads * h.head_v_dim * h.head_k_dim * 4

    plan = plan_batch(SpecDecodeCase("small", num_seqs=4, num_spec_tokens=3, null_write_slots=True))
    nulled = sum(s.slots.count(NULL_BLOCK_ID) for s in plan.seqs)
    assert nulled > 0
    assert spec_decode_traffic(plan).ssm_state_write == plain.ssm_state_write - nulled * state

    with_null = spec_decode_traffic(plan_batch(SpecDecodeCase("small", 4, 3, null_seqs=2)))
    assert with_null.ssm_state_read == plain.ssm_state_read
    assert with_null.conv_state_write == plain.conv_state_write
    assert with_null.outputs == plain.outputs * 6 // 4  # zero rows are still written

    padded = spec_decode_traffic(plan_batch(SpecDecodeCase("small", 4, 3, padded_seqs=3, padded_tokens=5)))
    assert padded.total - padded.metadata == plain.total - plain.metadata


def test_mixed_lengths_count_only_present_tokens():
    plan = plan_batch(SpecDecodeCase("small", num_seqs=8, num_spec_tokens=3, mixed_lengths=True))
    t = spec_decode_traffic(plan)
    h = plan.case.head_config
    state = h.num_v_heads * h.head_v_dim * h.head_k_dim * 4
    assert t.ssm_state_write == sum(s.length for s in plan.seqs) * state


def test_roofline_time():
    assert roofline_us(4_000_000, 4e12) == pytest.approx(1.0)
    with pytest.raises(ValueError, match="bandwidth must be > 0"):
        roofline_us(1, 0.0)
