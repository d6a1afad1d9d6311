"""docs/performance.md's table and plot from ``caovan bench e2e`` records (caovan.bench.e2e_report)."""

from __future__ import annotations

import json

import pytest

from caovan.bench import e2e_report
from caovan.bench.e2e import SCHEMA, benchmark_record_name

DOC = f"# Performance\n\nbefore\n{e2e_report.MARK_START}\nold\n{e2e_report.MARK_END}\nafter\n"


def _rates(median):
    return {"median": median, "min": median - 1, "max": median + 1}


def _write(folder, mode, rows, gpu="NVIDIA H200", tp=1):
    record = {
        "schema": SCHEMA,
        "written_at": "2026-12-06T10:00:00+00:00",
        "settings": {
            "cudagraph_mode": mode,
            "repeats": 2,
            "requests_per_slot": 2,
            "max_tokens": 256,
            "tensor_parallel_size": tp,
        },
        "gpu": gpu,
        "versions": {"caovan": "0.1.0", "vllm": "0.21.0", "torch": "2.11.0", "python": "3.12.3"},
        "summary": [
            {"concurrency": n, "baseline_tok_s": _rates(off), "caovan_tok_s": _rates(on), "ratio": round(on / off, 4)}
            for n, off, on in rows
        ],
    }
    path = folder / "perf" / (mode.lower() + (f"-tp{tp}" if tp > 1 else "")) / "e2e.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(record))
    return path


@pytest.fixture
def records(tmp_path):
    _write(tmp_path, "FULL_AND_PIECEWISE", [(1, 50.0, 51.0)])
    _write(tmp_path, "PIECEWISE", [(1, 40.0, 57.2), (4, 120.0, 170.0)])
    doc = tmp_path / "docs" / "performance.md"
    doc.parent.mkdir()
    doc.write_text(DOC)
    return tmp_path / "perf", doc


def test_the_table_lists_piecewise_first_with_medians_spreads_and_ratios(records):
    folder, doc = records
    assert e2e_report.regenerate(folder, doc) is True
    text = doc.read_text()
    assert text.startswith("# Performance\n\nbefore\n") and text.endswith(f"{e2e_report.MARK_END}\nafter\n")
    cells = [
        [c.strip() for c in line.strip("|").split("|")]
        for line in text.splitlines()
        if line.startswith("| ") and "×" in line
    ]
    assert cells == [
        ["PIECEWISE", "1", "40.0 (39.0–41.0)", "57.2 (56.2–58.2)", "1.43×"],
        ["PIECEWISE", "4", "120.0 (119.0–121.0)", "170.0 (169.0–171.0)", "1.42×"],
        ["FULL_AND_PIECEWISE", "1", "50.0 (49.0–51.0)", "51.0 (50.0–52.0)", "1.02×"],
    ]
    assert "[`../perf/piecewise/e2e.json`](../perf/piecewise/e2e.json)" in text
    assert "- PIECEWISE: NVIDIA H200, vLLM 0.21.0, torch 2.11.0" in text
    assert e2e_report.regenerate(folder, doc) is False  # current now
    assert e2e_report.main([str(folder), "--doc", str(doc), "--check"]) == 0


def test_tensor_parallel_records_come_after_the_one_gpu_ones_and_say_so(records):
    folder, doc = records
    _write(folder.parent, "PIECEWISE", [(1, 30.0, 42.0)], gpu="NVIDIA H200 + NVIDIA H200", tp=2)
    e2e_report.regenerate(folder, doc)
    setups = [
        line.split("|")[1].strip() for line in doc.read_text().splitlines() if line.startswith("| ") and "×" in line
    ]
    assert setups == ["PIECEWISE", "PIECEWISE", "FULL_AND_PIECEWISE", "PIECEWISE, TP=2"]


def _profile(steps, per_step, busy=None):
    total = sum(per_step.values()) * steps
    categories = [
        {"category": name, "per_step_us": us, "share": us * steps / total, "gpu_us": us * steps, "top_kernels": []}
        for name, us in per_step.items()
    ]
    timing = {} if busy is None else {"span_us": total / busy, "gpu_busy": busy}
    return {"steps": steps, "gpu_us": total, **timing, "categories": categories}


def test_profiled_runs_add_where_a_steps_time_goes_caovan_off_and_on(records):
    folder, doc = records
    path = folder / "piecewise" / "e2e.json"
    record = json.loads(path.read_text())
    record["runs"] = [
        {
            "label": "baseline",
            "profile": _profile(10, {"GDN spec core": 600.0, "GEMM": 1400.0}, busy=0.8),
            "spec_decode": {"mean_acceptance_length": 1.004},
        },
        {
            "label": "caovan",
            "profile": _profile(12, {"GDN spec core": 150.0, "GEMM": 1350.0}, busy=0.75),
            "spec_decode": {"mean_acceptance_length": 1.0},
        },
    ]
    path.write_text(json.dumps(record))
    e2e_report.regenerate(folder, doc)
    text = doc.read_text()
    assert "Where a decode step's GPU time goes, PIECEWISE (" in text and "10 and 12 model steps" in text
    rows = [[c.strip() for c in line.strip("|").split("|")] for line in text.splitlines() if "µs" not in line]
    assert ["GDN spec core", "600 (30%)", "150 (10%)"] in rows
    assert ["all GPU kernels", "2000", "1500"] in rows
    assert ["profiled wall time (GPU busy)", "2500 (80%)", "2000 (75%)"] in rows
    assert "MTP mean acceptance length 1.00 off, 1.00 on; record [`../perf/piecewise/e2e.json`]" in text
    # The FULL_AND_PIECEWISE record has no profiles: no such table for it.
    assert "goes, FULL_AND_PIECEWISE" not in text


def _profiled_piecewise(folder):
    path = folder / "piecewise" / "e2e.json"
    record = json.loads(path.read_text())
    record["runs"] = [
        {"label": "baseline", "profile": _profile(4, {"GEMM": 900.0}, busy=0.6)},
        {"label": "caovan", "profile": _profile(4, {"GEMM": 880.0}, busy=0.9)},
    ]
    path.write_text(json.dumps(record))
    return path.parent


def _benchmark_record(folder, label, concurrency, tpot_s):
    summary = {"tpot_p50_s": {"median": tpot_s, "min": tpot_s, "max": tpot_s, "repeats": 3}}
    record = {"label": label, "results": {"decode-heavy": {"summary": summary}}}
    (folder / benchmark_record_name(label, concurrency)).write_text(json.dumps(record))


def test_the_step_table_ends_with_the_unprofiled_time_per_token_at_concurrency_1(records):
    # The profiler slows the host: the benchmark's own step time is what the GPU time is set against.
    folder, doc = records
    mode_dir = _profiled_piecewise(folder)
    _benchmark_record(mode_dir, "baseline", 1, 0.00125)
    _benchmark_record(mode_dir, "caovan", 1, 0.00095)
    _benchmark_record(mode_dir, "caovan", 4, 0.002)
    e2e_report.regenerate(folder, doc)
    rows = [[c.strip() for c in line.strip("|").split("|")] for line in doc.read_text().splitlines()]
    assert ["time per token, concurrency 1, not profiled", "1250", "950"] in rows
    assert rows[rows.index(["time per token, concurrency 1, not profiled", "1250", "950"]) - 1][0] == (
        "profiled wall time (GPU busy)"
    )


def test_without_a_concurrency_1_record_the_unprofiled_row_is_left_out(records):
    folder, doc = records
    _benchmark_record(_profiled_piecewise(folder), "caovan", 1, 0.001)  # the baseline's is missing
    e2e_report.regenerate(folder, doc)
    assert "all GPU kernels" in doc.read_text() and "not profiled" not in doc.read_text()


@pytest.mark.parametrize(
    ("content", "message"), [("{", ":1:2: malformed JSON"), ('{"results": {}}', ": no results.decode-heavy.summary")]
)
def test_a_bad_benchmark_record_is_one_error_and_nothing_is_written(records, capsys, content, message):
    folder, doc = records
    mode_dir = _profiled_piecewise(folder)
    _benchmark_record(mode_dir, "baseline", 1, 0.001)
    (mode_dir / "caovan-c1.json").write_text(content)
    assert e2e_report.main([str(folder), "--doc", str(doc)]) == 2
    assert f"caovan-c1.json{message}" in capsys.readouterr().err
    assert doc.read_text() == DOC


def test_profiles_without_kernel_timestamps_leave_out_the_wall_time_row(records):
    folder, doc = records
    path = folder / "piecewise" / "e2e.json"
    record = json.loads(path.read_text())
    record["runs"] = [
        {"label": "baseline", "profile": _profile(2, {"GEMM": 10.0}, busy=0.5)},
        {"label": "caovan", "profile": _profile(2, {"GEMM": 9.0})},
    ]
    path.write_text(json.dumps(record))
    e2e_report.regenerate(folder, doc)
    text = doc.read_text()
    assert "all GPU kernels" in text and "wall time" not in text


def test_a_run_whose_profile_found_no_step_adds_no_step_table(records):
    folder, doc = records
    path = folder / "piecewise" / "e2e.json"
    record = json.loads(path.read_text())
    record["runs"] = [
        {"label": "baseline", "profile": {"steps": 0, "gpu_us": 5.0, "categories": []}},
        {"label": "caovan", "profile": _profile(3, {"GEMM": 1.0})},
    ]
    path.write_text(json.dumps(record))
    e2e_report.regenerate(folder, doc)
    assert "Where a decode step's GPU time goes" not in doc.read_text()


def test_check_says_when_the_doc_is_stale_and_writes_nothing(records, capsys):
    folder, doc = records
    assert e2e_report.main([str(folder), "--doc", str(doc), "--check"]) == 1
    assert doc.read_text() == DOC
    assert "not current (run `nox -s performance`)" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (lambda folder, doc: (folder / "piecewise" / "e2e.json").write_text("{"), "e2e.json:1:2: malformed JSON"),
        (lambda folder, doc: (folder / "piecewise" / "e2e.json").write_text('{"schema": "x"}'), f"not a {SCHEMA}"),
        (lambda folder, doc: doc.write_text("# no markers\n"), "expected the markers"),
    ],
)
def test_a_bad_record_or_doc_is_one_error_and_nothing_is_written(records, capsys, damage, message):
    folder, doc = records
    damage(folder, doc)
    before = doc.read_text()
    assert e2e_report.main([str(folder), "--doc", str(doc)]) == 2
    assert message in capsys.readouterr().err
    assert doc.read_text() == before


def test_no_records_names_the_command_that_makes_them(tmp_path, capsys):
    doc = tmp_path / "performance.md"
    doc.write_text(DOC)
    assert e2e_report.main([str(tmp_path / "none"), "--doc", str(doc)]) == 2
    assert "no */e2e.json (made by `caovan bench e2e --out" in capsys.readouterr().err


def test_the_plot_is_drawn_from_the_records(records):
    pytest.importorskip("matplotlib", reason="matplotlib is installed by `nox -s performance`, not the test session")
    folder, doc = records
    target = folder.parent / "plot.png"
    assert e2e_report.main([str(folder), "--doc", str(doc), "--plot", str(target)]) == 0
    assert target.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
