"""CPU tests of the bench's case declarations, batch plans and vLLM-shaped input builder."""

from __future__ import annotations

import inspect

import pytest

from caovan.bench.cases import (
    BENCH_CASE_SETS,
    HEAD_CONFIGS,
    KERNEL_EDGE_CASES,
    KERNEL_TEST_GRID,
    NULL_BLOCK_ID,
    PAGE_PADDING_FILL,
    TENSOR_ARGS,
    VERIFY_CASES,
    SpecDecodeCase,
    bench_cases,
    cases_by_id,
    expand_grid,
    plan_batch,
)

torch = pytest.importorskip("torch", reason="the input builder makes torch tensors")

from caovan.bench.cases import build_inputs  # noqa: E402


# ------------------------------------------------------------------------------------ declarations
def test_model_head_configs_match_the_real_models_at_tp2():
    q27 = HEAD_CONFIGS["qwen3.6-27b-tp2"]
    assert (q27.num_k_heads, q27.num_v_heads, q27.head_k_dim, q27.head_v_dim) == (8, 24, 128, 128)
    assert q27.conv_dim == 5120 and q27.conv_width == 4
    q80 = HEAD_CONFIGS["qwen3-next-80b-tp2"]
    assert (q80.num_k_heads, q80.num_v_heads) == (8, 16)
    ratios = {h.num_v_heads // h.num_k_heads for h in HEAD_CONFIGS.values()}
    assert {1, 2, 3} <= ratios


def test_bench_sets_have_the_declared_sizes_and_unique_ids():
    assert len(bench_cases("model")) == 2 * 4 * 4 * 2
    assert len(bench_cases("small")) == 2 * 2 * 2 * 2
    assert len(bench_cases("all")) == len(bench_cases("model")) + len(bench_cases("small"))
    quick = bench_cases("all", quick=True)
    assert 0 < len(quick) < 10
    assert {c.num_spec_tokens for c in bench_cases("model")} == {1, 2, 3, 4}
    assert {c.num_seqs for c in bench_cases("model")} == {1, 2, 4, 8}
    for which in BENCH_CASE_SETS:
        cases_by_id(bench_cases(which))
    cases_by_id([*expand_grid(KERNEL_TEST_GRID), *KERNEL_EDGE_CASES])
    cases_by_id(VERIFY_CASES)


def test_unknown_bench_set_is_refused_by_name():
    with pytest.raises(ValueError, match="bench case set must be one of"):
        bench_cases("huge")


def test_duplicate_case_ids_are_refused():
    c = SpecDecodeCase("small", num_seqs=1, num_spec_tokens=1)
    with pytest.raises(ValueError, match="duplicate case id"):
        cases_by_id([c, c])


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        (dict(head="nope"), "head must be one of"),
        (dict(num_spec_tokens=0), "num_spec_tokens"),
        (dict(ssm_dtype="float64"), "ssm_dtype must be one of"),
        (dict(conv_dtype="int8"), "conv_dtype"),
        (dict(ssm_layout="hv"), "ssm_layout"),
        (dict(conv_layout="XY"), "conv_layout"),
        (dict(accepted="all"), "accepted"),
        (dict(num_seqs=-1), "must be >= 0"),
    ],
)
def test_bad_case_fields_name_the_field(kwargs, match):
    base = dict(head="small", num_seqs=1, num_spec_tokens=1)
    with pytest.raises(ValueError, match=match):
        SpecDecodeCase(**{**base, **kwargs})


def test_case_ids_name_every_edge_feature():
    c = SpecDecodeCase(
        "small", 3, 2, ssm_dtype="float16", ssm_layout="kv", conv_layout="DS", conv_bias=True,
        accepted="sweep", mixed_lengths=True, null_seqs=1, padded_seqs=2, padded_tokens=3,
        null_write_slots=True, mixed_batch_tokens=4, strided_inputs=True, seed=7,
    )  # fmt: skip
    assert c.id == ("small/B3/mtp2/ssm-fp16/ssm-kv/conv-DS/bias/acc-sweep/varlen/null1/pad2r3t/nullw/mixed4/strided/s7")
    d = c.as_dict()
    assert d["id"] == c.id and d["num_v_heads"] == 6 and d["conv_dim"] == c.head_config.conv_dim


# ------------------------------------------------------------------------------------------ plans
def test_plan_gives_every_real_token_its_own_block_and_block0_to_nobody_real():
    case = SpecDecodeCase("small", num_seqs=8, num_spec_tokens=4)
    plan = plan_batch(case)
    slots = [b for s in plan.seqs for b in s.slots]
    assert len(slots) == len(set(slots)) == 8 * 5
    assert NULL_BLOCK_ID not in slots
    assert max(slots) < plan.num_blocks
    assert plan.num_blocks > 1 + len(slots)  # spare blocks catch stray writes
    assert plan.query_start_loc == [5 * i for i in range(9)]
    assert all(1 <= s.num_accepted <= 5 for s in plan.seqs)
    assert plan.token_index is None and plan.num_state_rows == 8


def test_plan_is_deterministic_in_the_seed():
    case = SpecDecodeCase("small", num_seqs=4, num_spec_tokens=3, mixed_lengths=True)
    assert plan_batch(case) == plan_batch(case)
    other = plan_batch(SpecDecodeCase("small", 4, 3, mixed_lengths=True, seed=1))
    assert other != plan_batch(case)


def test_plan_null_and_padded_sequences_look_like_vllm_makes_them():
    case = SpecDecodeCase("small", num_seqs=3, num_spec_tokens=3, null_seqs=2, padded_seqs=4, padded_tokens=5)
    plan = plan_batch(case)
    kinds = [s.kind for s in plan.seqs]
    assert kinds[-4:] == ["padded"] * 4 and sorted(kinds[:5]) == ["null"] * 2 + ["real"] * 3
    for s in plan.seqs:
        if s.kind == "null":
            assert s.slots == [NULL_BLOCK_ID] * 4 and s.length == 4
        if s.kind == "padded":
            assert s.slots == [NULL_BLOCK_ID] * 4 and s.length == 0 and s.num_accepted == 1
    qsl = plan.query_start_loc
    assert qsl[-1] == qsl[-5] == 5 * 4  # zero-length padded rows repeat the total
    assert plan.num_token_rows == 20 + 5
    # Full-graph padding: vLLM sizes the state-index table by the padded token count.
    assert plan.num_state_rows == 25
    assert len(plan.state_index_rows()) == 25 and len(plan.accepted_rows()) == 25
    assert plan.accepted_rows()[len(plan.seqs) :] == [1] * (25 - len(plan.seqs))


def test_plan_null_write_slots_spare_the_conv_and_initial_columns():
    case = SpecDecodeCase("small", num_seqs=8, num_spec_tokens=4, null_write_slots=True)
    plan = plan_batch(case)
    nulled = 0
    for s in plan.seqs:
        assert s.slots[0] != NULL_BLOCK_ID and s.slots[s.num_accepted - 1] != NULL_BLOCK_ID
        nulled += s.slots.count(NULL_BLOCK_ID)
    assert nulled >= 1


def test_plan_sweep_and_mixed_lengths():
    plan = plan_batch(SpecDecodeCase("small", 8, 3, accepted="sweep", mixed_lengths=True))
    assert [s.num_accepted for s in plan.seqs] == [1, 2, 3, 4, 1, 2, 3, 4]
    assert all(1 <= s.length <= 4 for s in plan.seqs)


def test_plan_mixed_batch_scatters_spec_rows_via_token_index():
    plan = plan_batch(SpecDecodeCase("small", 4, 2, mixed_batch_tokens=7))
    assert plan.num_token_rows == 4 * 3 + 7
    ti = plan.token_index
    assert ti == sorted(ti) and len(ti) == 12 and len(set(ti)) == 12 and max(ti) < 19
    assert [r for s in plan.seqs for r in s.rows] == ti


# ------------------------------------------------------------------------------------------ inputs
def test_inputs_are_page_strided_views_of_one_cache_like_vllm():
    case = SpecDecodeCase("small", num_seqs=2, num_spec_tokens=3, ssm_dtype="float32")
    x = build_inputs(case)
    h = case.head_config
    L = h.conv_width - 1 + 3
    nb = x.plan.num_blocks
    assert x.conv_state.shape == (nb, h.conv_dim, L)
    assert x.conv_state.stride(1) == 1  # SD: stored (L, dim), passed transposed
    assert x.ssm_state.shape == (nb, h.num_v_heads, h.head_v_dim, h.head_k_dim)
    assert not x.ssm_state.is_contiguous() and not x.conv_state.is_contiguous()
    page = x.backing["cache"].numel() // nb
    assert x.ssm_state.stride(0) * 4 == page and x.conv_state.stride(0) * 2 == page
    assert x.ssm_state.stride()[1:] == (h.head_v_dim * h.head_k_dim, h.head_k_dim, 1)
    assert x.conv_state.untyped_storage().data_ptr() == x.ssm_state.untyped_storage().data_ptr()
    assert x.mixed_qkv.shape == (8, h.conv_dim) and x.mixed_qkv.dtype == torch.float16
    assert x.A_log.dtype == torch.float32 and x.dt_bias.dtype == torch.float16
    assert x.conv_weight.shape == (h.conv_dim, h.conv_width) and x.conv_bias is None
    assert x.state_indices.shape == (2, 4) and x.state_indices.dtype == torch.int32
    assert torch.isnan(x.out).all() and x.out.shape == (8, h.num_v_heads, h.head_v_dim)
    assert x.page_padding_intact()


def test_dim_first_conv_and_kv_ssm_layouts():
    x = build_inputs(SpecDecodeCase("small", 2, 1, conv_layout="DS", ssm_layout="kv"))
    h = x.case.head_config
    assert x.conv_state.stride(2) == 1
    assert x.ssm_state.shape[2:] == (h.head_k_dim, h.head_v_dim)
    vk = x.with_ssm_layout("vk")
    assert vk.case.ssm_layout == "vk" and vk.ssm_state.stride(3) == 1
    assert torch.equal(vk.ssm_state_vk(), x.ssm_state_vk())
    assert torch.equal(vk.ssm_state, x.ssm_state.transpose(-1, -2))


def test_same_seed_same_values_for_either_conv_layout():
    sd = build_inputs(SpecDecodeCase("small", 2, 2))
    ds = build_inputs(SpecDecodeCase("small", 2, 2, conv_layout="DS"))
    assert torch.equal(sd.conv_state, ds.conv_state)
    assert torch.equal(sd.mixed_qkv, ds.mixed_qkv)


def test_value_seed_changes_values_not_shapes():
    case = SpecDecodeCase("small", 3, 2, mixed_lengths=True)
    a, b = build_inputs(case), build_inputs(case, value_seed=5)
    assert a.plan == b.plan
    for name in TENSOR_ARGS:
        ta, tb = getattr(a, name), getattr(b, name)
        if ta is None:
            continue
        assert ta.shape == tb.shape and ta.stride() == tb.stride()
    assert not torch.equal(a.mixed_qkv, b.mixed_qkv)
    assert torch.equal(a.state_indices, b.state_indices)


def test_strided_inputs_are_row_strided_slices():
    x = build_inputs(SpecDecodeCase("small", 2, 1, strided_inputs=True, conv_bias=True))
    h = x.case.head_config
    assert x.mixed_qkv.stride() == (h.conv_dim + 64, 1)
    assert x.a.stride() == x.b.stride() == (2 * h.num_v_heads, 1)
    assert x.conv_bias.shape == (h.conv_dim,)


def test_clone_keeps_strides_and_owns_its_memory():
    x = build_inputs(SpecDecodeCase("small", 2, 2))
    y = x.clone()
    for name in ("mixed_qkv", "conv_state", "ssm_state", "out"):
        a, b = getattr(x, name), getattr(y, name)
        assert a.stride() == b.stride() and a.storage_offset() == b.storage_offset()
        assert a.data_ptr() != b.data_ptr()
    y.ssm_state.zero_()
    assert not torch.equal(x.ssm_state, y.ssm_state)
    y.copy_from(x)
    assert torch.equal(x.ssm_state, y.ssm_state)


def test_float64_copy_has_identical_values():
    x = build_inputs(SpecDecodeCase("small", 2, 2, ssm_dtype="float16"))
    r = x.to_float64()
    for name in ("mixed_qkv", "a", "conv_state", "ssm_state", "dt_bias", "A_log"):
        assert getattr(r, name).dtype == torch.float64
        assert torch.equal(getattr(r, name), getattr(x, name).to(torch.float64))
    assert r.state_indices.dtype == torch.int32
    assert r.page_padding_intact()  # no cache pages in the float64 copy


def test_page_padding_check_sees_a_stray_write():
    x = build_inputs(SpecDecodeCase("small", 1, 1))
    raw = x.backing["cache"]
    page = raw.numel() // x.plan.num_blocks
    raw[2 * page - 1] = PAGE_PADDING_FILL ^ 0xFF
    assert not x.page_padding_intact()


def test_empty_batch_builds():
    x = build_inputs(SpecDecodeCase("small", num_seqs=0, num_spec_tokens=3))
    assert x.query_start_loc.tolist() == [0] and x.state_indices.shape == (0, 4)
    assert x.out.shape[0] == 0


def test_kernel_args_follow_the_contract_signature():
    from caovan.bench.vllm_spec_path import VllmSpecCore

    params = list(inspect.signature(VllmSpecCore.__call__).parameters)
    assert tuple(params[1 : 1 + len(TENSOR_ARGS)]) == TENSOR_ARGS
    x = build_inputs(SpecDecodeCase("small", 2, 1, mixed_batch_tokens=3))
    args, kwargs = x.kernel_args()
    assert len(args) == len(TENSOR_ARGS)
    assert set(kwargs) == {
        "num_k_heads", "head_k_dim", "head_v_dim", "ssm_layout", "null_slot_max", "token_index",
    }  # fmt: skip
    assert kwargs["null_slot_max"] == 0 and kwargs["token_index"].dtype == torch.int64
