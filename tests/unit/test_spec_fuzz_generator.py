"""The spec-step fuzzer's generator (tests/helpers/spec_fuzz): the same case for a seed and index, batches as each
family's record says vLLM lays them out, and every accepted count reached."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

torch = pytest.importorskip("torch", reason="the fuzzed cases are torch inputs")

from helpers.spec_fuzz.cases import FuzzCase, FuzzSpace, draw_case  # noqa: E402
from helpers.spec_fuzz.inputs import batch_rows, build_inputs  # noqa: E402
from helpers.spec_fuzz.rules import cannot_express, lay_out, layout_rules  # noqa: E402

from caovan.adapters.families import FAMILIES  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_torch_thread")

SERVED = [f for f in FAMILIES if f.refusal is None]
SPACE = FuzzSpace()
#: Enough draws that every option of the space shows up for every family (each is drawn with probability >= 1/10).
DRAWS = 400


def _cases(family, seed=3, count=DRAWS):
    rules = layout_rules(family)
    return rules, [draw_case(rules, SPACE, seed, i) for i in range(count)]


def test_a_case_is_fixed_by_its_seed_and_index_alone():
    rules = layout_rules(SERVED[0])
    alone = draw_case(rules, SPACE, 11, 137)
    in_a_run = [draw_case(rules, SPACE, 11, i) for i in range(140)][137]
    assert alone == in_a_run
    a, b = build_inputs(alone), build_inputs(in_a_run)
    for name, tensor in a["tensors"].items():
        assert (tensor is None and b["tensors"][name] is None) or torch.equal(tensor, b["tensors"][name]), name
    assert draw_case(rules, SPACE, 12, 137) != alone


def test_a_case_survives_its_json_record():
    rules, cases = _cases(SERVED[0], count=50)
    for case in cases:
        assert FuzzCase.from_json(json.loads(json.dumps(case.to_json()))) == case
    with pytest.raises(ValueError, match="unknown fields"):
        FuzzCase.from_json({**cases[0].to_json(), "surprise": 1})


@pytest.mark.parametrize("family", SERVED, ids=lambda f: f.family_id)
def test_every_drawn_case_is_a_batch_the_family_could_make(family):
    rules, cases = _cases(family)
    for case in cases:
        assert case.problems() == [], case.case_id
        assert cannot_express(case, rules) is None, case.case_id
        assert (case.ssm_layout, case.null_slot_max) == (family.ssm_layout, family.null_slot_max)


@pytest.mark.parametrize("family", SERVED, ids=lambda f: f.family_id)
def test_slots_follow_the_family_null_slot_rule(family):
    rules, cases = _cases(family, count=DRAWS // 2)
    null = family.null_slot_max
    block0_live = 0
    for case in cases:
        idx = build_inputs(case)["tensors"]["state_indices"]
        live, padding = idx[: case.num_live], idx[case.num_live :]
        assert (padding == null).all(), case.case_id
        nulls = {(int(s), int(c)) for s, c in (live <= null).nonzero().tolist()}
        assert nulls == set(case.null_columns), case.case_id
        for seq, col in case.null_columns:
            assert col != 0 and col != case.num_accepted[seq] - 1, case.case_id
        assert (live[live > null]).unique().numel() == int((live > null).sum()), "a block handed out twice"
        block0_live += int((live == 0).sum()) if null < 0 else 0
    if null < 0:
        assert block0_live > 0, "block 0 is a real block under the -1 sentinel: some case must use it"
    has_nulls = any(case.null_columns for case in cases)
    assert has_nulls is family.recurrent_skips_null_slots


@pytest.mark.parametrize("family", SERVED, ids=lambda f: f.family_id)
def test_layouts_come_from_the_record(family):
    rules, cases = _cases(family)
    dim_first = [c for c in cases if c.conv_dim_first]
    assert bool(dim_first) is (family.conv_dim_first_function is not None)
    interleaved = [c for c in cases if any(before < c.num_live for _, before in c.others)]
    assert bool(interleaved) is family.spec_gating_selected
    for case in (cases[0], *dim_first[:3], *interleaved[:3]):
        t = build_inputs(case)["tensors"]
        HV, K, V = case.num_k_heads * case.group, case.head_k_dim, case.head_v_dim
        assert t["ssm_state"].shape[1:] == ((HV, V, K) if family.ssm_layout == "vk" else (HV, K, V))
        act = t["mixed_qkv"].dtype
        assert t["A_log"].dtype == (act if family.a_log_dtype == "model" else torch.float32)
        # vLLM's conv state is (blocks, L, dim), handed over transposed; dim-first it is (blocks, dim, L) itself.
        assert (t["conv_state"].stride(1) == 1) is not case.conv_dim_first


@pytest.mark.parametrize("family", SERVED, ids=lambda f: f.family_id)
def test_spec_tokens_lead_a_mixed_batch_unless_the_family_gathers_their_gating(family):
    rules, cases = _cases(family)
    mixed = [c for c in cases if c.mixed]
    assert mixed
    for case in mixed:
        rows = build_inputs(case)["tensors"]["token_index"].tolist()
        leads = rows == list(range(len(rows)))
        if not family.spec_gating_selected:
            assert leads, case.case_id


def test_token_rows_keep_each_request_contiguous_in_batch_order():
    case = replace(
        draw_case(layout_rules(SERVED[0]), SPACE, 0, 0),
        t_max=4,
        seq_lens=(4, 2, 1),
        num_accepted=(1, 2, 4),
        null_columns=(),
        others=((3, 0), (2, 2), (1, 3)),
        padding_rows=0,
        padded_tokens=0,
    )
    rows, total = batch_rows(case)
    assert rows == [[3, 4, 5, 6], [7, 8], [11]]
    assert total == 3 + 4 + 2 + 2 + 1 + 1
    t = build_inputs(case)["tensors"]
    assert t["token_index"].tolist() == [3, 4, 5, 6, 7, 8, 11]
    assert t["query_start_loc"].tolist() == [0, 4, 6, 7]


def test_padding_rows_sit_at_the_back_with_no_tokens_and_one_accepted():
    case = replace(
        draw_case(layout_rules(SERVED[0]), SPACE, 0, 0),
        t_max=3,
        seq_lens=(3, 1),
        num_accepted=(2, 3),
        null_columns=(),
        others=(),
        padding_rows=2,
        padded_tokens=5,
    )
    t = build_inputs(case)["tensors"]
    assert t["query_start_loc"].tolist() == [0, 3, 4, 4, 4]
    assert t["num_accepted_tokens"].tolist() == [2, 3, 1, 1]
    assert t["mixed_qkv"].shape[0] == 4 + 5 and t["token_index"] is None


@pytest.mark.parametrize("family", SERVED, ids=lambda f: f.family_id)
def test_many_seeds_reach_every_accepted_count_at_every_draft_length(family):
    rules, cases = _cases(family)
    reached = {(c.t_max, a) for c in cases for a in c.num_accepted}
    wanted = {(t, a) for t in SPACE.t_maxes for a in range(1, t + 1)}
    assert wanted <= reached, f"never drawn: {sorted(wanted - reached)}"
    assert {c.group for c in cases} == {1, 2, 3}
    assert {c.act_dtype for c in cases} == set(SPACE.activation_dtypes)
    for name, drawn in {
        "padding rows": any(c.padding_rows for c in cases),
        "padded token rows": any(c.padded_tokens for c in cases),
        "a plain decode (one token)": any(1 in c.seq_lens for c in cases),
        "varlen": any(len(set(c.seq_lens)) > 1 for c in cases),
        "paged caches": any(c.page_strided for c in cases),
        "strided qkv": any(c.strided_qkv for c in cases),
    }.items():
        assert drawn, f"{name} never drawn in {DRAWS} cases"


def test_the_interpreter_space_leaves_out_bf16_products_only():
    space = SPACE.without_bf16_products()
    rules = layout_rules(SERVED[0])
    cases = [draw_case(rules, space, 5, i) for i in range(200)]
    assert all("bfloat16" not in (c.act_dtype, c.conv_dtype) for c in cases)
    assert any(c.ssm_dtype == "bfloat16" for c in cases), "a bf16 SSM state is only converted: it stays"


def test_a_refused_family_draws_nothing_and_its_regression_cases_say_why():
    refused = next(f for f in FAMILIES if f.refusal is not None)
    rules = layout_rules(refused)
    with pytest.raises(ValueError, match="not served"):
        draw_case(rules, SPACE, 0, 0)
    case = draw_case(layout_rules(SERVED[0]), SPACE, 0, 0)
    assert refused.refusal in cannot_express(lay_out(case, rules), rules)


def test_a_case_from_one_family_is_laid_out_for_another_or_refused_with_the_reason():
    newest = layout_rules(SERVED[0])
    oldest = layout_rules(SERVED[-1])
    case = next(c for c in _cases(SERVED[0])[1] if c.null_columns)
    moved = lay_out(case, oldest)
    assert (moved.null_slot_max, moved.ssm_layout) == (oldest.null_slot, oldest.ssm_layout)
    if not oldest.null_write_columns:
        assert "null column" in cannot_express(moved, oldest)
    assert cannot_express(case, newest) is None


def test_a_gpu_run_draws_the_real_models_per_gpu_shapes():
    space = FuzzSpace.real_shapes()
    rules = layout_rules(SERVED[-1])
    cases = [draw_case(rules, space, 5, i) for i in range(DRAWS)]
    for case in cases:
        assert case.problems() == [], case.case_id
        assert (case.head_k_dim, case.head_v_dim, case.width, case.has_bias) == (128, 128, 4, False)
        assert case.num_k_heads * case.group <= 48  # at most the 27B's 48 value heads on one GPU
        assert (case.act_dtype, case.conv_dtype, case.ssm_dtype) in space.dtype_sets
    assert {c.num_k_heads for c in cases} == {8, 16}  # TP 2 and 1
    assert {c.entry for c in cases} == {"sm75", "device"}  # the shipped entries decide the launch options
    assert max(c.num_live for c in cases) > 32 and any(c.padding_rows > 8 for c in cases)
    # Few compiled variants: dtype set x key heads x group x entry x conv layout.
    variants = {(c.act_dtype, c.conv_dtype, c.ssm_dtype, c.num_k_heads, c.group, c.entry, c.conv_dim_first)
                for c in cases}  # fmt: skip
    assert len(variants) <= 5 * 2 * 3 * 2 * 2


def test_a_case_drawn_on_the_cpu_keeps_its_values_when_moved():
    """Inputs copied to another device keep every view's layout (the GPU run draws there instead, see
    build_inputs): checked CPU to CPU, which runs everywhere."""
    from helpers.spec_decode_inputs import clone_inputs

    rules, cases = _cases(SERVED[0], count=30)
    case = next(c for c in cases if c.page_strided and c.strided_qkv)
    inp = build_inputs(case)
    moved = clone_inputs(inp, "cpu")
    for name, tensor in inp["tensors"].items():
        if tensor is None:
            continue
        copy = moved["tensors"][name]
        assert copy.data_ptr() != tensor.data_ptr() and copy.stride() == tensor.stride(), name
        assert torch.equal(copy, tensor), name
    assert moved["tensors"]["ssm_state"].untyped_storage().data_ptr() == moved["buffers"]["ssm"].data_ptr()
