"""The numerics tier: caovan's kernels against the installed vLLM's own spec-decode kernels, both against the float64
oracle, on inputs laid out as the installed release's GDN family lays them out (Triton interpreter, CPU).

Rule, per scenario (``helpers/spec_decode_rule.py``, which the fuzzed batches of ``test_spec_fuzz.py`` share):
caovan's max |error| vs float64 is within the oracle tolerance and at most vLLM's plus FLOOR_ULPS ulps of the stored
dtype, for the spec tokens' output rows and the SSM state; both conv caches equal the oracle's bit for bit; caovan
leaves every other output row untouched. All scenarios run in one child process (``family_numerics_cases.py``);
each is one test here.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers.interpreter_child import load_cases_module, run_interpreter_child

pytestmark = pytest.mark.numerics

_CASES_FILE = Path(__file__).resolve().with_name("family_numerics_cases.py")


cases = load_cases_module(_CASES_FILE, "caovan_family_numerics_cases")


@pytest.fixture(scope="module")
def numerics_results(tmp_path_factory):
    # Real vLLM of the row, never a stand-in: without one the child finds no family and every test here fails.
    return run_interpreter_child(_CASES_FILE, tmp_path_factory.mktemp("family_numerics") / "results.json")


def test_the_installed_release_lands_in_a_family(numerics_results):
    results, rc, log = numerics_results
    assert "family" in results, f"the numerics child (rc={rc}) found no family for the installed vLLM:\n{log}"
    facts = results["family"]
    print(f"vLLM {facts['vllm']}: {facts['label']} {facts['family_id']}, kernels of {facts['gdn_module']}")


@pytest.mark.parametrize("scenario_id", cases.SCENARIO_IDS)
def test_error_not_above_the_release_own_kernels(numerics_results, scenario_id):
    results, rc, log = numerics_results
    if scenario_id not in results:
        pytest.fail(f"the numerics child (rc={rc}) produced no result for {scenario_id}:\n{log}")
    res = results[scenario_id]
    if "skip" in res:
        pytest.skip(res["skip"])
    assert res["ok"], f"{scenario_id}: {res['detail']} (caovan {res.get('errors')}, vLLM {res.get('vllm_errors')})"
