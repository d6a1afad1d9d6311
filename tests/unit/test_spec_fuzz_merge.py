"""Joining the records of one fuzz run split by --start (helpers.spec_fuzz.merge): what one process would write."""

from __future__ import annotations

import json

import pytest
from helpers.spec_fuzz.merge import MergeError, main, merge_records


def _part(first_index: int, cases: int, *, passed: int | None = None, worst: float = 1e-4, above: int = 0) -> dict:
    passed = cases if passed is None else passed
    return {
        "schema": "caovan-spec-fuzz-run/1",
        "family": {"family_id": "f", "vllm": "0.21.0"},
        "space": {"t_maxes": [2, 3]},
        "bf16_left_out": "reason",
        "seed": 2,
        "complete": True,
        "cpus": 2,
        "wall_s": 10.0,
        "command": f'nox -s "fuzz(vllm-0.21.0)" -- --cases {cases} --seed 2 --start {first_index}',
        "summary": {
            "family_id": "f",
            "seed": 2,
            "first_index": first_index,
            "cases": cases,
            "passed": passed,
            "failed": cases - passed,
            "seconds": 0.5 * cases,
            "seconds_per_case": 0.5,
            "slowest_case_s": 1.0 + first_index,
            "covered": {"mixed": cases // 2, f"only_in_{first_index}": 1},
            "worst_error_vs_float64": {"caovan": {"out": {"error": worst, "case": f"2:{first_index}"}}},
            "caovan_above_vllm": {"count": above, "first": [{"case": f"2:{first_index + i}"} for i in range(above)]},
            "vllm_above_tolerance": {"count": 0, "first": []},
            "failures": [{"case": f"2:{first_index}"}] if passed < cases else [],
        },
    }


def test_parts_join_into_the_summary_of_one_run_in_case_order():
    record = merge_records([("b.json", _part(100, 50, worst=3e-4, above=15)), ("a.json", _part(0, 100, above=10))])
    s = record["summary"]
    assert (s["first_index"], s["cases"], s["passed"], s["failed"]) == (0, 150, 150, 0)
    assert s["seconds"] == 75.0 and s["seconds_per_case"] == 0.5 and s["slowest_case_s"] == 101.0
    assert s["covered"] == {"mixed": 75, "only_in_0": 1, "only_in_100": 1}
    assert s["worst_error_vs_float64"]["caovan"]["out"] == {"error": 3e-4, "case": "2:100"}
    above = s["caovan_above_vllm"]
    assert above["count"] == 25 and len(above["first"]) == 20 and above["first"][0]["case"] == "2:0"
    assert [p["file"] for p in record["parts"]] == ["a.json", "b.json"]
    assert record["complete"] is True and record["seed"] == 2 and len(record["command"]) == 2


def test_a_failure_in_any_part_is_kept_and_counted():
    s = merge_records([("a", _part(0, 10)), ("b", _part(10, 10, passed=9))])["summary"]
    assert s["failed"] == 1 and s["failures"] == [{"case": "2:10"}]


@pytest.mark.parametrize(
    ("second", "message"),
    [
        (_part(12, 10), "b.json: starts at case 12, a.json ends before 10: a gap"),
        (_part(5, 10), "b.json: starts at case 5, a.json ends before 10: an overlap"),
    ],
)
def test_parts_with_a_gap_or_an_overlap_are_refused(second, message):
    with pytest.raises(MergeError, match=message):
        merge_records([("a.json", _part(0, 10)), ("b.json", second)])


@pytest.mark.parametrize("key", ["seed", "space", "family", "bf16_left_out"])
def test_parts_of_another_run_are_refused_naming_the_file_and_field(key):
    other = _part(10, 10)
    other[key] = {"changed": True} if isinstance(other[key], dict) else "changed"
    with pytest.raises(MergeError, match=f"b.json: its {key} differs from a.json's"):
        merge_records([("a.json", _part(0, 10)), ("b.json", other)])


def test_an_unfinished_part_is_refused():
    part = _part(0, 10)
    part["complete"] = False
    with pytest.raises(MergeError, match="a.json: not a finished run"):
        merge_records([("a.json", part)])


def test_the_command_writes_the_record_or_one_error_line(tmp_path, capsys):
    a, b, out = tmp_path / "a.json", tmp_path / "b.json", tmp_path / "out.json"
    a.write_text(json.dumps(_part(0, 10)))
    b.write_text(json.dumps(_part(10, 10))[:-20])  # cut short
    assert main([str(a), str(b), "--out", str(out)]) == 2
    assert "b.json" in capsys.readouterr().err and not out.exists()
    b.write_text(json.dumps(_part(10, 10)))
    assert main([str(a), str(b), "--out", str(out)]) == 0
    assert json.loads(out.read_text())["summary"]["cases"] == 20
