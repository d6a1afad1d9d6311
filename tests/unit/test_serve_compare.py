"""The serve tier's greedy-output comparison (tests/serve/token_agreement.py) on fabricated runs."""

import importlib.util
import math
import sys
from pathlib import Path

import pytest

_PATH = Path(__file__).resolve().parents[1] / "serve" / "token_agreement.py"
# tests/serve is not a package; load the module by path under the name the serve test imports it by.
_spec = importlib.util.spec_from_file_location("token_agreement", _PATH)
ta = sys.modules.setdefault("token_agreement", importlib.util.module_from_spec(_spec))
if ta.__spec__ is _spec:
    _spec.loader.exec_module(ta)

TOL = 0.02


def run(*sequences):
    """Sequences of (token, [(id, logprob), ...]) or bare tokens (no logprobs recorded)."""
    out = []
    for seq in sequences:
        steps = []
        for item in seq:
            if isinstance(item, tuple):
                token, top = item
                steps.append(ta.Step(token, tuple(top)))
            else:
                steps.append(ta.Step(item))
        out.append(steps)
    return out


def confident(token, logprob=-1.0, runner_up=999, gap=0.5):
    return (token, [(token, logprob), (runner_up, logprob - gap)])


def test_identical_runs_agree_fully():
    a = run([confident(t) for t in (5, 6, 7, 8)], [confident(t) for t in (1, 2)])
    agreement = ta.compare_greedy_runs(a, a, logprob_tolerance=TOL)
    assert agreement.total_positions == 6
    assert agreement.prefix_fraction == agreement.positional_fraction == 1.0
    assert agreement.divergences == []
    assert agreement.problems() == []
    assert "100.00% before the first divergence" in agreement.report()


def test_near_tie_flip_is_explained_and_later_positions_are_only_reported():
    # Position 2: tokens 7 and 9 are tied within 0.004 in both runs; the runs pick differently, then the
    # contexts differ and the tails disagree, except position 4 which happens to match again.
    cand = run([confident(5), confident(6), (7, [(7, -2.000), (9, -2.003)]), confident(1), confident(3)])
    ref = run([confident(5), confident(6), (9, [(9, -2.0015), (7, -2.002)]), confident(2), confident(3)])
    agreement = ta.compare_greedy_runs(cand, ref, logprob_tolerance=TOL)
    assert agreement.prefix_fraction == pytest.approx(2 / 5)
    assert agreement.positional_fraction == pytest.approx(3 / 5)
    [(index, div)] = agreement.divergences
    assert (index, div.position, div.candidate_token, div.reference_token) == (0, 2, 7, 9)
    assert div.near_tie
    assert div.candidate_token_delta == pytest.approx(0.002)
    assert div.reference_token_delta == pytest.approx(0.0015)
    # 2 of 5 positions precede the divergence: below the default 50 % evidence floor.
    assert len(agreement.problems()) == 1 and "only 40.0%" in agreement.problems()[0]
    relaxed = ta.compare_greedy_runs(cand, ref, logprob_tolerance=TOL, min_comparable_fraction=0.4)
    assert relaxed.problems() == []
    assert "near tie (rounding)" in relaxed.report()


def test_divergence_with_a_clear_winner_is_a_problem():
    cand = run([confident(5), confident(6, gap=1.0, runner_up=4)])
    ref = run([confident(5), confident(4, gap=1.0, runner_up=6)])
    agreement = ta.compare_greedy_runs(cand, ref, logprob_tolerance=TOL, min_comparable_fraction=0)
    [(_, div)] = agreement.divergences
    assert not div.near_tie
    [problem] = agreement.problems()
    assert "position 1: candidate picked 6, reference 4, and this is not a near tie" in problem


def test_contested_token_missing_from_a_top2_is_not_a_near_tie():
    cand = run([(6, [(6, -1.0), (8, -1.001)])])
    ref = run([(4, [(4, -1.0), (8, -1.0005)])])  # candidate's pick 6 is not in the reference's top 2
    agreement = ta.compare_greedy_runs(cand, ref, logprob_tolerance=TOL, min_comparable_fraction=0)
    [(_, div)] = agreement.divergences
    assert div.candidate_token_delta is None and not div.near_tie
    assert agreement.problems()


def test_logprob_drift_on_shared_context_is_a_problem_even_when_tokens_match():
    cand = run([confident(5, logprob=-1.00), confident(6, logprob=-1.30)])
    ref = run([confident(5, logprob=-1.01), confident(6, logprob=-1.00)])
    agreement = ta.compare_greedy_runs(cand, ref, logprob_tolerance=TOL)
    assert agreement.prefix_fraction == 1.0
    [problem] = agreement.problems()
    assert "sequence 0 position 1" in problem and "0.3" in problem
    assert agreement.sequences[0].max_logprob_delta == pytest.approx(0.3)


def test_tokens_without_logprobs_compare_by_id_only():
    same = ta.compare_greedy_runs(run([1, 2, 3]), run([1, 2, 3]), logprob_tolerance=TOL)
    assert same.problems() == [] and same.sequences[0].max_logprob_delta is None
    differ = ta.compare_greedy_runs(run([1, 2, 3]), run([1, 9, 3]), logprob_tolerance=TOL, min_comparable_fraction=0)
    [(_, div)] = differ.divergences
    assert not div.near_tie  # no logprobs: a flip cannot be explained
    assert differ.positional_fraction == pytest.approx(2 / 3) and differ.prefix_fraction == pytest.approx(1 / 3)


def test_length_mismatch_counts_missing_positions_as_disagreement():
    agreement = ta.compare_greedy_runs(
        run([confident(1), confident(2)]), run([confident(1), confident(2), confident(3)]), logprob_tolerance=TOL
    )
    assert agreement.total_positions == 3
    [(_, div)] = agreement.divergences
    assert (div.position, div.candidate_token, div.reference_token, div.near_tie) == (2, None, 3, False)


def test_fractions_pool_positions_over_sequences():
    # Sequence 0 (4 positions) diverges at 1 at a near tie; sequence 1 (6 positions) matches fully.
    tie_c = (7, [(7, -1.0), (8, -1.001)])
    tie_r = (8, [(8, -1.0), (7, -1.001)])
    cand = run([confident(1), tie_c, confident(3), confident(4)], [confident(t) for t in range(6)])
    ref = run([confident(1), tie_r, confident(3), confident(5)], [confident(t) for t in range(6)])
    agreement = ta.compare_greedy_runs(cand, ref, logprob_tolerance=TOL)
    assert agreement.prefix_fraction == pytest.approx(7 / 10)
    assert agreement.positional_fraction == pytest.approx(8 / 10)
    assert agreement.problems() == []
    as_dict = agreement.to_dict()
    assert as_dict["total_positions"] == 10 and as_dict["problems"] == []
    assert as_dict["sequences"][0]["divergence"]["near_tie"] is True


@pytest.mark.parametrize(
    ("candidate", "reference", "kwargs", "message"),
    [
        (run([1]), run([1], [2]), {}, "candidate has 1 sequences but reference has 2"),
        ([], [], {}, "nothing to compare: no sequences"),
        (run([]), run([]), {}, "nothing to compare: every sequence is empty"),
        (run([1]), run([1]), {"logprob_tolerance": -1}, "logprob_tolerance must be a finite number >= 0"),
        (run([1]), run([1]), {"logprob_tolerance": math.nan}, "logprob_tolerance must be a finite number >= 0"),
        (run([1]), run([1]), {"min_comparable_fraction": 1.5}, "min_comparable_fraction must be in"),
        ([[ta.Step(True)]], run([1]), {}, r"candidate\[0\]\[0\].token must be an int"),
        (run([(1, [(1, math.nan)])]), run([1]), {}, r"candidate\[0\]\[0\].top must hold"),
        (run([1]), [[1]], {}, r"reference\[0\]\[0\] must be a Step"),
    ],
)
def test_bad_input_is_one_clear_error(candidate, reference, kwargs, message):
    with pytest.raises(ValueError, match=message):
        ta.compare_greedy_runs(candidate, reference, **{"logprob_tolerance": TOL, **kwargs})


def test_runner_records_become_steps():
    records = [
        {"token_ids": [4, 5], "top_logprobs": [[[4, -0.5], [7, -0.9]], [[5, -0.1], [4, -3.0]]]},
        {"token_ids": [6], "top_logprobs": None},
    ]
    steps = ta.runs_from_records(records)
    assert steps == [[ta.Step(4, ((4, -0.5), (7, -0.9))), ta.Step(5, ((5, -0.1), (4, -3.0)))], [ta.Step(6)]]
    assert steps[0][0].logprob_of(7) == -0.9 and steps[0][0].logprob_of(8) is None
    with pytest.raises(ValueError, match="2 token ids but 1 top-logprob entries"):
        ta.steps_from_record([1, 2], [[[1, -0.1]]])
