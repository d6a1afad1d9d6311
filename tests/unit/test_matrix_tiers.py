"""Tier outcomes from pytest exit code + JUnit XML: exit 5 is an error, all-skipped is skipped.

The rules are checked on synthetic inputs and on real pytest runs (this interpreter's pytest, tiny
throw-away projects), so the exit codes and the JUnit layout are pytest's own, not our assumptions.
"""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest

from caovan.matrix.tiers import CaseOutcome, JunitError, classify_tier, parse_junit, run_tier

DATA = Path(__file__).parent / "data"


def outcome(nodeid: str, result: str, reason: str | None = None) -> CaseOutcome:
    return CaseOutcome(nodeid, result, 0.01, reason)


# --- parsing ---------------------------------------------------------------------------------


def test_parse_junit_rebuilds_node_ids_and_outcomes():
    tests = {t.nodeid: t for t in parse_junit(DATA / "junit" / "kernel_mixed.xml")}
    base = "tests/kernels/test_sample.py"
    assert {nodeid: t.outcome for nodeid, t in tests.items()} == {
        f"{base}::TestConv::test_width[2]": "passed",
        f"{base}::TestConv::test_width[4]": "passed",
        f"{base}::TestConv::test_needs_gpu": "skipped",
        f"{base}::test_rounding": "failed",
        f"{base}::test_overflow": "xfailed",
        f"{base}::test_uses_broken": "error",
    }
    assert tests[f"{base}::TestConv::test_needs_gpu"].reason == ("no CUDA GPU: torch.cuda.is_available() is False")
    assert tests[f"{base}::test_rounding"].reason == "assert (0.1 + 0.2) == 0.3"
    assert tests[f"{base}::test_rounding"].duration_s == 0.001


def test_parse_junit_missing_or_corrupt_file_raises(tmp_path):
    with pytest.raises(JunitError, match="was not written"):
        parse_junit(tmp_path / "absent.xml")
    corrupt = tmp_path / "corrupt.xml"
    corrupt.write_text("<testsuites><testsuite>")
    with pytest.raises(JunitError, match="unreadable JUnit XML"):
        parse_junit(corrupt)


# --- classification rules -------------------------------------------------------------------


def test_exit_5_is_an_error_never_a_pass():
    verdict = classify_tier(5, [])
    assert verdict["outcome"] == "error"
    assert "no tests" in verdict["reason"] and "exit 5" in verdict["reason"]


@pytest.mark.parametrize("code", [2, 3, 4, -9, 137])
def test_interrupted_internal_usage_and_signal_exits_are_errors(code):
    assert classify_tier(code, [outcome("t::a", "passed")])["outcome"] == "error"


def test_all_skipped_is_skipped_with_distinct_reasons():
    tests = [
        outcome("t::a", "skipped", "no CUDA GPU: none visible"),
        outcome("t::b", "skipped", "no CUDA GPU: none visible"),
        outcome("t::c", "skipped", "needs vLLM >= 0.22"),
    ]
    verdict = classify_tier(0, tests)
    assert verdict["outcome"] == "skipped"
    assert verdict["skip_reasons"] == [
        {"reason": "needs vLLM >= 0.22", "count": 1},
        {"reason": "no CUDA GPU: none visible", "count": 2},
    ]
    assert verdict["reason"] == "all 3 tests skipped: needs vLLM >= 0.22; no CUDA GPU: none visible"


def test_any_failure_or_test_error_is_a_fail_naming_the_tests():
    tests = [outcome("t::a", "passed"), outcome("t::b", "failed"), outcome("t::c", "error")]
    verdict = classify_tier(1, tests)
    assert verdict["outcome"] == "fail"
    assert "t::b" in verdict["reason"] and "t::c" in verdict["reason"]
    assert verdict["counts"]["failed"] == 1 and verdict["counts"]["error"] == 1


def test_some_passed_some_skipped_is_a_pass_that_keeps_the_skip_reasons():
    tests = [outcome("t::a", "passed"), outcome("t::b", "skipped", "no CUDA GPU: x")]
    verdict = classify_tier(0, tests)
    assert verdict["outcome"] == "pass"
    assert verdict["skip_reasons"] == [{"reason": "no CUDA GPU: x", "count": 1}]


def test_exit_0_without_junit_is_an_error():
    verdict = classify_tier(0, None, "out.xml: JUnit XML was not written")
    assert verdict["outcome"] == "error"
    assert "JUnit XML was not written" in verdict["reason"]


# --- real pytest runs ------------------------------------------------------------------------


def make_project(root: Path, files: dict[str, str]) -> Path:
    (root / "pytest.ini").write_text("[pytest]\nmarkers =\n    discovery: d\n    kernel: k\n")
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    return root


def run(project: Path, tier: str) -> dict:
    return run_tier(
        sys.executable,
        tier,
        junit_path=project / "out" / f"{tier}.xml",
        log_path=project / "out" / f"{tier}.log",
        cwd=project,
    )


def test_real_run_with_no_test_for_the_marker_records_exit_5_as_error(tmp_path):
    project = make_project(tmp_path, {"tests/test_other.py": "def test_plain():\n    pass\n"})
    record = run(project, "discovery")
    assert record["exit_code"] == 5
    assert record["outcome"] == "error"
    assert "no tests" in record["reason"]
    assert "deselected" in record["output_tail"]
    assert (project / "out" / "discovery.log").read_text().strip()


def test_real_run_all_skipped_is_skipped_with_reason(tmp_path):
    project = make_project(
        tmp_path,
        {
            "tests/test_gpu.py": """\
                import pytest

                @pytest.mark.kernel
                @pytest.mark.parametrize("n", [1, 2])
                def test_needs_gpu(n):
                    pytest.skip("no CUDA GPU: torch.cuda.is_available() is False")
            """
        },
    )
    record = run(project, "kernel")
    assert record["exit_code"] == 0
    assert record["outcome"] == "skipped"
    assert record["skip_reasons"] == [{"reason": "no CUDA GPU: torch.cuda.is_available() is False", "count": 2}]
    assert [t["nodeid"] for t in record["tests"]] == [
        "tests/test_gpu.py::test_needs_gpu[1]",
        "tests/test_gpu.py::test_needs_gpu[2]",
    ]


def test_real_run_with_a_failure_is_fail_and_lists_per_test_outcomes(tmp_path):
    project = make_project(
        tmp_path,
        {
            "tests/test_k.py": """\
                import pytest

                pytestmark = pytest.mark.kernel

                def test_ok():
                    pass

                def test_bad():
                    assert 1 == 2
            """
        },
    )
    record = run(project, "kernel")
    assert record["exit_code"] == 1
    assert record["outcome"] == "fail"
    assert {t["nodeid"]: t["outcome"] for t in record["tests"]} == {
        "tests/test_k.py::test_ok": "passed",
        "tests/test_k.py::test_bad": "failed",
    }
    assert record["counts"]["passed"] == 1 and record["counts"]["failed"] == 1
    assert record["command"][:3] == ["python", "-m", "pytest"]
    assert "--junitxml=out/kernel.xml" in record["command"]


def test_real_run_with_a_collection_error_is_an_error_with_the_output_tail(tmp_path):
    project = make_project(tmp_path, {"tests/test_broken.py": "import no_such_module_xyz\n"})
    record = run(project, "discovery")
    assert record["exit_code"] == 2
    assert record["outcome"] == "error"
    assert "no_such_module_xyz" in record["output_tail"]
