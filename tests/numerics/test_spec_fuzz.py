"""The numerics tier's fuzzed spec batches: ``TIER_CASES`` batches of seed ``TIER_SEED``, drawn as the installed
release's family lays a spec-decode batch out (``helpers/spec_fuzz``), plus every fixed regression case of
``data/spec_fuzz_regressions.json``, each run through caovan's kernels and the release's own spec path against the
float64 oracle under the rule of ``helpers/spec_decode_rule.py``. All of it runs in one child process
(``spec_fuzz_cases.py``); ``nox -s "fuzz(<row>)"`` runs any number of cases of any seed the same way.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers.interpreter_child import run_interpreter_child
from helpers.spec_fuzz.regressions import load_regressions

pytestmark = pytest.mark.numerics

_SCRIPT = Path(__file__).resolve().with_name("spec_fuzz_cases.py")
REGRESSIONS_FILE = Path(__file__).resolve().with_name("data") / "spec_fuzz_regressions.json"
#: 0.629 s per case on a 2-core machine (vLLM 0.21.0, 1000 cases of seed 1: docs/fuzz/cpu-vllm-0.21.0.json), so 200
#: cases add about two minutes (126 s, plus the child's vLLM import) to a row's numerics tier.
TIER_CASES = 200
#: Fixed, so that a row's tier runs the same batches every time; other seeds are for ``nox -s "fuzz(<row>)"``.
TIER_SEED = 52


@pytest.fixture(scope="module")
def fuzz_results(tmp_path_factory):
    out = tmp_path_factory.mktemp("spec_fuzz") / "record.json"
    args = ("--cases", str(TIER_CASES), "--seed", str(TIER_SEED), "--regressions", str(REGRESSIONS_FILE))
    results, rc, log = run_interpreter_child(_SCRIPT, out, *args)
    if "skip" in results:
        pytest.skip(results["skip"])
    return results, rc, log


def test_every_fuzzed_batch_ran(fuzz_results):
    results, rc, log = fuzz_results
    summary = results.get("summary", {})
    assert results.get("complete") and summary.get("cases") == TIER_CASES, (
        f"the fuzz child (rc={rc}) ran {summary.get('cases', 0)} of {TIER_CASES} cases:\n{log}"
    )
    facts = results["family"]
    print(
        f"vLLM {facts['vllm']} ({facts['family_id']}): {summary['cases']} cases of seed {TIER_SEED}, "
        f"{summary['seconds_per_case']} s each; worst vs float64: {json.dumps(summary['worst_error_vs_float64'])}"
    )


def test_bf16_activation_batches_are_fuzzed_where_the_interpreter_multiplies_them_right(fuzz_results):
    results, rc, log = fuzz_results
    if results.get("bf16_left_out"):
        pytest.skip(f"no fuzzed batch has bf16 activations or conv state: {results['bf16_left_out']}")
    covered = results.get("summary", {}).get("covered", {})
    assert any(k.startswith("dtypes=bfloat16/") for k in covered), f"no bf16 batch among {sorted(covered)}"


def test_no_fuzzed_batch_is_worse_than_the_release_own_kernels(fuzz_results):
    results, rc, log = fuzz_results
    failures = results.get("summary", {}).get("failures", [])
    row = f"vllm-{results['family']['vllm']}"
    shown = "\n".join(
        f'{f["case"]}: {f["detail"]}\n  replay alone: nox -s "fuzz({row})" -- --replay {f["case"]}\n'
        f"  shrunk ({f['shrink_tries']} tries): {json.dumps(f['shrunk'])}\n  shrunk fails with: {f['shrunk_detail']}"
        for f in failures
    )
    assert not failures, f"{len(failures)} fuzzed case(s) failed; keep the shrunk ones with --add-regressions:\n{shown}"


def test_the_fixed_regression_cases_pass(fuzz_results):
    results, rc, log = fuzz_results
    ran = results.get("regressions")
    expected = [entry["id"] for entry in load_regressions(REGRESSIONS_FILE)]
    assert ran is not None and sorted(ran) == sorted(expected), f"the fuzz child (rc={rc}) ran {ran}:\n{log}"
    for case_id, result in ran.items():
        if "skip" in result:
            print(f"regression {case_id} not run here: {result['skip']}")
    failed = {case_id: r["detail"] for case_id, r in ran.items() if "skip" not in r and not r["ok"]}
    assert not failed, f"regression cases failed: {failed}"
