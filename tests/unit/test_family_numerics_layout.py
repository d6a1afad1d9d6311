"""The numerics tier lays its inputs out as each family's record says (tests/numerics/family_numerics_cases.py)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

torch = pytest.importorskip("torch", reason="the numerics scenarios are torch inputs")

from helpers.interpreter_child import load_cases_module  # noqa: E402

from caovan.adapters.families import FAMILIES  # noqa: E402

_CASES_FILE = Path(__file__).resolve().parents[1] / "numerics" / "family_numerics_cases.py"


cases = load_cases_module(_CASES_FILE, "caovan_family_numerics_cases_layout")
MIXED = next(sc for sc, _ in cases.SCENARIOS if sc.mixed_batch)


@pytest.mark.parametrize("family", FAMILIES, ids=lambda f: f.family_id)
def test_state_layout_and_null_slot_rule_come_from_the_record(family):
    for raw, _ in cases.SCENARIOS:
        sc = cases.as_family_lays_out(raw, family)
        assert (sc.ssm_layout, sc.null_slot_max) == (family.ssm_layout, family.null_slot_max)


@pytest.mark.parametrize("family", FAMILIES, ids=lambda f: f.family_id)
def test_a_mixed_batch_leads_with_spec_tokens_where_the_family_passes_whole_gating_inputs(family):
    sc = cases.as_family_lays_out(MIXED, family)
    # From vLLM 0.29 the spec branch selects a/b itself: the spec tokens may sit anywhere in the batch.
    assert sc.spec_tokens_first is (not family.spec_gating_selected)
    token_index = cases.make_inputs(sc)["tensors"]["token_index"].tolist()
    num_spec = len(token_index)
    assert (token_index == list(range(num_spec))) is sc.spec_tokens_first


def test_the_families_that_select_the_spec_tokens_gating():
    # 0.12 - 0.17 select the gated g/beta, 0.29 on the raw a/b; 0.10/0.11 (masks) are not served.
    selected = {f.label for f in FAMILIES if f.spec_gating_selected}
    assert selected == {"F3", "F4", "F10", "F11"}


@pytest.mark.parametrize("family", FAMILIES, ids=lambda f: f.family_id)
def test_a_log_is_stored_in_the_dtype_the_record_says(family):
    sc = cases.as_family_lays_out(cases.SCENARIOS[0][0], family)
    a_log = cases.make_inputs(sc)["tensors"]["A_log"]
    expected = cases.make_inputs(sc)["tensors"]["mixed_qkv"].dtype if family.a_log_dtype == "model" else torch.float32
    assert a_log.dtype == expected


def test_a_refused_family_skips_every_scenario_with_its_refusal():
    refused = next(f for f in FAMILIES if f.refusal is not None)
    for sc, needs in cases.SCENARIOS:
        assert refused.refusal in cases._skip_reason(sc, needs, refused, refused.refusal)


def test_a_family_without_a_dim_first_conv_state_skips_that_scenario_with_the_reason():
    family = FAMILIES[0]
    no_dim_first = replace(family, conv_dim_first_function=None)
    sc, needs = next((sc, n) for sc, n in cases.SCENARIOS if n == "dim_first")
    assert "never stores the conv state dim-first" in cases._skip_reason(sc, needs, no_dim_first)
    assert cases._skip_reason(sc, needs, family) is None


def test_null_columns_run_only_where_vllm_s_recurrent_kernel_skips_null_slots():
    sc, needs = next((sc, n) for sc, n in cases.SCENARIOS if n == "null_columns")
    for family in FAMILIES:
        reason = cases._skip_reason(sc, needs, family)
        assert (reason is None) is family.recurrent_skips_null_slots, family.family_id
    assert {f.label for f in FAMILIES if not f.recurrent_skips_null_slots} == {"F1", "F2", "F3"}
