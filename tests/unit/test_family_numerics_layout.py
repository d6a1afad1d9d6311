"""The numerics tier lays its inputs out as each family's record says (tests/numerics/family_numerics_cases.py)."""

from __future__ import annotations

import importlib.util
import sys
from dataclasses import replace
from pathlib import Path

import pytest

pytest.importorskip("torch", reason="the numerics scenarios are torch inputs")

from caovan.adapters.families import FAMILIES  # noqa: E402

_CASES_FILE = Path(__file__).resolve().parents[1] / "numerics" / "family_numerics_cases.py"


def _cases():
    spec = importlib.util.spec_from_file_location("caovan_family_numerics_cases_layout", _CASES_FILE)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


cases = _cases()
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


def test_only_families_from_029_select_the_gating_inputs():
    selected = {f.label for f in FAMILIES if f.spec_gating_selected}
    assert selected == {"F10", "F11"}


def test_a_family_without_a_dim_first_conv_state_skips_that_scenario_with_the_reason():
    family = FAMILIES[0]
    no_dim_first = replace(family, conv_dim_first_function=None)
    sc, needs = next((sc, n) for sc, n in cases.SCENARIOS if n == "dim_first")
    assert "never stores the conv state dim-first" in cases._skip_reason(sc, needs, no_dim_first)
    assert cases._skip_reason(sc, needs, family) is None
