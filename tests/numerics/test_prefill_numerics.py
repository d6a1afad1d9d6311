"""The numerics tier's prefill half: caovan's GDN prefill against the installed vLLM's own prefill, both against the
float64 oracle, on inputs laid out as the installed family lays them out (Triton interpreter, CPU).

Rule, per scenario: caovan's max |error| vs float64 is within ``ACTIVATION_ULPS`` ulps of the activation dtype and
at most vLLM's plus FLOOR_ULPS ulps of the stored dtype, for the output and the live slots' states; slots outside
the batch and null slots come back untouched. All scenarios run in one child process
(``prefill_numerics_cases.py``); each is one test here.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers.interpreter_child import load_cases_module, run_interpreter_child

pytestmark = pytest.mark.numerics

_CASES_FILE = Path(__file__).resolve().with_name("prefill_numerics_cases.py")

cases = load_cases_module(_CASES_FILE, "caovan_prefill_numerics_cases")


@pytest.fixture(scope="module")
def prefill_results(tmp_path_factory):
    return run_interpreter_child(_CASES_FILE, tmp_path_factory.mktemp("prefill_numerics") / "results.json")


def test_the_installed_release_lands_in_a_family(prefill_results):
    results, rc, log = prefill_results
    assert "family" in results, f"the prefill numerics child (rc={rc}) found no family:\n{log}"
    facts = results["family"]
    print(f"vLLM {facts['vllm']}: {facts['label']} {facts['family_id']}, prefill of {facts['fla_ops_module']}")


@pytest.mark.parametrize("scenario_id", cases.SCENARIO_IDS)
def test_prefill_error_not_above_the_release_own(prefill_results, scenario_id):
    results, rc, log = prefill_results
    if scenario_id not in results:
        pytest.fail(f"the prefill numerics child (rc={rc}) produced no result for {scenario_id}:\n{log}")
    res = results[scenario_id]
    if "skip" in res:
        pytest.skip(res["skip"])
    if "note" in res:
        print(res["note"])
    assert res["ok"], f"{scenario_id}: {res['detail']} (caovan {res.get('errors')}, vLLM {res.get('vllm_errors')})"
