"""The spec-step fuzzer's runner and shrinker (tests/helpers/spec_fuzz) on fake kernels: the float64 oracle as a
correct "caovan", and the oracle with an off-by-one as a broken one, judged by the numerics tier's own rule."""

from __future__ import annotations

from dataclasses import replace

import pytest

torch = pytest.importorskip("torch", reason="the fuzzed cases are torch inputs")

from helpers.spec_decode_inputs import clone_inputs, run_oracle  # noqa: E402
from helpers.spec_fuzz.cases import FuzzSpace, draw_case  # noqa: E402
from helpers.spec_fuzz.regressions import add_regressions, load_regressions, run_regressions  # noqa: E402
from helpers.spec_fuzz.rules import layout_rules  # noqa: E402
from helpers.spec_fuzz.run import Sides, fuzz, run_case  # noqa: E402
from helpers.spec_fuzz.shrink import shrink, smaller_cases  # noqa: E402

from caovan.adapters.families import FAMILIES  # noqa: E402
from caovan.kernels.gdn_spec_decode.naive import gdn_spec_decode_reference  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_torch_thread")

SERVED = [f for f in FAMILIES if f.refusal is None]
RULES = layout_rules(SERVED[0])
SPACE = FuzzSpace()


def _last_column_off_by_one(inp: dict, case) -> dict:
    """A broken kernel: where every draft of the last step was accepted (num_accepted == T) it starts from the
    column before, as an off-by-one in the initial-state column would."""
    ours = clone_inputs(inp)
    t = ours["tensors"]
    T = t["state_indices"].shape[1]
    accepted = t["num_accepted_tokens"]
    t["num_accepted_tokens"] = torch.where(accepted == T, accepted - 1, accepted)
    from helpers.spec_decode_inputs import call_kernel

    call_kernel(gdn_spec_decode_reference, ours)
    t["num_accepted_tokens"] = accepted
    return ours


CORRECT = Sides(ours=lambda inp, case: run_oracle(inp), theirs=run_oracle, oracle=run_oracle)
BROKEN = Sides(ours=_last_column_off_by_one, theirs=run_oracle, oracle=run_oracle)


def _hits_the_bug(case) -> bool:
    return any(a == case.t_max for a, length in zip(case.num_accepted, case.seq_lens, strict=True))


def test_the_rule_passes_a_correct_kernel_and_fails_the_broken_one():
    cases = [draw_case(RULES, SPACE, 0, i) for i in range(40)]
    assert all(run_case(c, CORRECT)["ok"] for c in cases)
    hit = [c for c in cases if _hits_the_bug(c)]
    assert hit, "some of 40 cases accept every draft"
    for case in hit[:5]:
        result = run_case(case, BROKEN)
        assert not result["ok"]
        assert "caovan_above_vllm:out" in result["kinds"], result["detail"]


def test_a_side_that_raises_fails_the_case_with_its_name():
    def raises(inp, case):
        raise RuntimeError("launch failed")

    result = run_case(draw_case(RULES, SPACE, 0, 0), replace(CORRECT, ours=raises))
    assert not result["ok"] and result["kinds"] == ["caovan_raised"]
    assert "launch failed" in result["detail"]


def test_every_smaller_variant_is_valid_and_keeps_the_seed_and_index():
    for i in range(60):
        case = draw_case(RULES, SPACE, 2, i)
        for variant in smaller_cases(case):
            if not variant.problems():
                assert (variant.seed, variant.index) == (case.seed, case.index)
                assert variant != case


def test_a_failure_shrinks_to_one_sequence_of_one_token_that_accepted_every_draft():
    case = next(
        c
        for i in range(200)
        if (c := draw_case(RULES, SPACE, 9, i)).num_live >= 3 and _hits_the_bug(c) and (c.padding_rows or c.others)
    )
    small, tries = shrink(case, lambda c: not run_case(c, BROKEN)["ok"])
    assert not run_case(small, BROKEN)["ok"]
    assert small.num_live == 1 and small.seq_lens == (1,)
    assert small.t_max == 2 and small.num_accepted == (2,)
    assert (small.padding_rows, small.padded_tokens, small.others, small.null_columns) == (0, 0, (), ())
    assert (small.num_k_heads, small.group, small.head_k_dim, small.head_v_dim) == (1, 1, 16, 8)
    assert 0 < tries <= 150


def test_the_shrinker_stops_at_its_try_budget():
    case = next(c for i in range(200) if _hits_the_bug(c := draw_case(RULES, SPACE, 9, i)) and c.num_live >= 3)
    calls = []
    small, tries = shrink(case, lambda c: calls.append(c) or True, max_tries=4)
    assert tries == len(calls) == 4


def test_a_fuzz_run_records_each_failure_with_its_replay_key_and_shrunk_case():
    seen = []
    summary = fuzz(RULES, SPACE, BROKEN, seed=4, count=25, on_case=lambda c, r, s, summ: seen.append(c.case_id))
    record = summary.to_json()
    assert seen == [f"4:{i}" for i in range(25)]
    assert record["cases"] == 25 and record["failed"] == len(record["failures"]) > 0
    for failure in record["failures"]:
        drawn = draw_case(RULES, SPACE, *map(int, failure["case"].split(":")))
        assert failure["drawn"] == drawn.to_json(), "the replay key draws the failing case again"
        assert tuple(failure["shrunk"]["num_accepted"]) == (failure["shrunk"]["t_max"],)
    assert record["worst_error_vs_float64"]["vllm"]["out"]["error"] == 0.0
    assert sum(v for k, v in record["covered"].items() if k.startswith("t_max=")) == 25


def test_a_correct_run_has_no_failures():
    record = fuzz(RULES, SPACE, CORRECT, seed=4, count=25).to_json()
    assert (record["passed"], record["failures"]) == (25, [])


def test_a_shrunk_failure_becomes_a_regression_case_that_fails_until_fixed(tmp_path):
    path = tmp_path / "regressions.json"
    failures = fuzz(RULES, SPACE, BROKEN, seed=4, count=25).failures
    added = add_regressions(path, failures, RULES, "vLLM test")
    assert added and add_regressions(path, failures, RULES, "vLLM test") == []  # the same case is kept once
    entries = load_regressions(path)
    assert [e["id"] for e in entries] == added
    broken = run_regressions(entries, RULES, BROKEN)
    assert not any(r["ok"] for r in broken.values())
    assert all(r["ok"] for r in run_regressions(entries, RULES, CORRECT).values())


def test_a_regression_case_the_family_cannot_express_is_skipped_with_the_reason(tmp_path):
    path = tmp_path / "regressions.json"
    case = next(c for i in range(100) if (c := draw_case(RULES, SPACE, 1, i)).null_columns)
    failure = {"case": case.case_id, "shrunk": case.to_json(), "detail": "x", "shrunk_detail": "x"}
    add_regressions(path, [failure], RULES, "vLLM test")
    no_nulls = layout_rules(next(f for f in SERVED if not f.recurrent_skips_null_slots))
    (result,) = run_regressions(load_regressions(path), no_nulls, CORRECT).values()
    assert "checks no slot" in result["skip"]


def test_a_broken_regression_file_names_itself(tmp_path):
    path = tmp_path / "regressions.json"
    path.write_text('{"cases": [{"id": "x", "case": {"schema": "other"}}]}')
    with pytest.raises(ValueError, match=str(path)):
        load_regressions(path)
