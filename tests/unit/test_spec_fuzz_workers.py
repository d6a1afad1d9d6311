"""A fuzz run split over worker processes (helpers.spec_fuzz.workers): the ranges, the join, a worker that dies."""

from __future__ import annotations

import json
import textwrap

import pytest
from helpers.spec_fuzz.workers import run_workers, split_range

#: A stand-in for spec_fuzz_cases.py: writes the finished record of its range, one failed case at index 4, and dies
#: (exit 3, no record) when its range starts at --die-at.
FAKE_WORKER = textwrap.dedent(
    """
    import argparse, json, sys
    p = argparse.ArgumentParser()
    for name in ("--seed", "--start", "--cases", "--die-at"):
        p.add_argument(name, type=int, default=-1)
    p.add_argument("--out")
    p.add_argument("--device")
    a = p.parse_args()
    if a.start == a.die_at:
        print("Traceback: the worker broke")
        sys.exit(3)
    if a.device == "refused":
        open(a.out, "w").write(json.dumps({"complete": True, "skip": "nothing of caovan's runs on this release"}))
        sys.exit(0)
    failed = int(a.start <= 4 < a.start + a.cases)
    if failed:
        print(f"FAIL {a.seed}:4 (0.10 s) caovan's out error 1 > tol 0.1")
    summary = {
        "family_id": "f", "seed": a.seed, "first_index": a.start, "cases": a.cases, "passed": a.cases - failed,
        "failed": failed, "seconds": 0.5 * a.cases, "seconds_per_case": 0.5, "slowest_case_s": 0.5,
        "covered": {"t_max=2": a.cases}, "worst_error_vs_float64": {"caovan": {"out": {"error": 1e-4, "case": "x"}}},
        "caovan_above_vllm": {"count": 0, "first": []}, "vllm_above_tolerance": {"count": 0, "first": []},
        "failures": [{"case": f"{a.seed}:4"}] if failed else [],
    }
    record = {
        "schema": "caovan-spec-fuzz-run/1", "family": {"family_id": "f", "vllm": "0.21.0"}, "space": {},
        "bf16_left_out": None, "seed": a.seed, "complete": True, "command": "c", "summary": summary,
    }
    open(a.out, "w").write(json.dumps(record))
    sys.exit(1 if failed else 0)
    """
)


@pytest.fixture
def fake_worker(tmp_path):
    script = tmp_path / "fake_worker.py"
    script.write_text(FAKE_WORKER)
    return script


@pytest.mark.parametrize(
    ("start", "count", "workers", "expected"),
    [
        (0, 10, 3, [(0, 4), (4, 3), (7, 3)]),
        (5000, 4, 8, [(5000, 1), (5001, 1), (5002, 1), (5003, 1)]),  # never an empty worker
        (0, 1, 1, [(0, 1)]),
    ],
)
def test_ranges_cover_the_run_once_in_order(start, count, workers, expected):
    assert split_range(start, count, workers) == expected


def test_no_case_or_no_worker_is_refused():
    with pytest.raises(ValueError, match="at least one case"):
        split_range(0, 0, 2)


def test_the_workers_records_join_into_one_run(fake_worker, tmp_path, capsys):
    record, status = run_workers(
        fake_worker, ["--device", "interpreter"], seed=7, start=0, count=10, workers=3, out=tmp_path / "r.json",
        poll_s=0.05,
    )  # fmt: skip
    assert status == 1  # case 7:4 failed in the first worker
    s = record["summary"]
    assert (s["cases"], s["passed"], s["first_index"]) == (10, 9, 0)
    assert [p["first_index"] for p in record["parts"]] == [0, 4, 7]
    assert "FAIL 7:4" in capsys.readouterr().out


def test_a_worker_that_dies_leaves_no_joined_record_and_shows_its_log(fake_worker, tmp_path, capsys):
    record, status = run_workers(
        fake_worker, ["--die-at", "5"], seed=7, start=5, count=6, workers=2, out=tmp_path / "r.json", poll_s=0.05
    )
    assert (record, status) == (None, 2)
    err = capsys.readouterr().err
    assert "worker part-0 exited 3" in err and "the worker broke" in err


def test_a_record_left_by_an_earlier_run_is_not_taken_for_a_worker_s(fake_worker, tmp_path):
    parts = tmp_path / "r.json.parts"
    parts.mkdir()
    (parts / "part-1.json").write_text(json.dumps({"stale": True}))
    record, status = run_workers(
        fake_worker, ["--die-at", "3"], seed=1, start=0, count=6, workers=2, out=tmp_path / "r.json", poll_s=0.05
    )
    assert (record, status) == (None, 2)
    assert not (parts / "part-1.json").exists()


def test_a_release_caovan_does_not_serve_gives_its_skip_record(fake_worker, tmp_path):
    record, status = run_workers(
        fake_worker, ["--device", "refused"], seed=1, start=0, count=4, workers=2, out=tmp_path / "r.json", poll_s=0.05
    )
    assert status == 0 and record["skip"].startswith("nothing of caovan's runs")
