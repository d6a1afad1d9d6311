"""``caovan bench summary``: the figures docs quote, computed from a ``bench kernels --json`` record."""

from __future__ import annotations

import argparse
import json
import math
import re
from pathlib import Path

import pytest

from caovan.bench.record_summary import (
    RecordError,
    compare,
    is_model_case,
    load_record,
    misses,
    summarize,
)
from caovan.cli import bench as bench_cli

ROOT = Path(__file__).resolve().parents[2]
H200_RECORD = ROOT / "docs" / "bench" / "bench-kernels-h200.json"
H200_LAYER_RECORD = ROOT / "docs" / "bench" / "bench-layer-h200.json"
H100_RECORD = ROOT / "docs" / "bench" / "bench-kernels-h100.json"
H100_VLLM_025_RECORD = ROOT / "docs" / "bench" / "bench-kernels-h100-vllm-0.25.json"
H100_LAYER_RECORD = ROOT / "docs" / "bench" / "bench-layer-h100.json"


def _row(case_id, ours, vllm, roofline=None, passed=True):
    """ours / vllm: (eager_us, graph_us)."""
    return {
        "id": case_id,
        "ours": {"eager_us": ours[0], "graph_us": ours[1]},
        "vllm": {"eager_us": vllm[0], "graph_us": vllm[1]},
        "roofline_us": roofline,
        "accuracy_rule": {"passed": passed, "problems": []},
        "error": None,
    }


ROWS = [
    _row("small/B1/mtp1/ssm-fp16", (20.0, 2.0), (100.0, 10.0)),
    _row("qwen3.6-27b-tp2/B1/mtp1/ssm-fp16", (30.0, 4.0), (180.0, 16.0)),
    _row("qwen3.6-27b-tp2/B8/mtp4/ssm-fp32", (40.0, 20.0), (200.0, 38.0), roofline=18.0),
    _row("qwen3-next-80b-tp2/B8/mtp4/ssm-fp32", (50.0, 14.0), (140.0, 32.0), passed=False),
]


def test_model_cases_are_the_model_heads():
    assert [is_model_case(r) for r in ROWS] == [False, True, True, True]


def test_summary_spreads_counts_and_accuracy():
    s = summarize(ROWS[1:])
    graph = s["graph_us"]
    assert (graph["speedup"].low, graph["speedup"].high) == pytest.approx((1.9, 4.0))
    assert graph["speedup"].geomean == pytest.approx(math.prod([4.0, 1.9, 32 / 14]) ** (1 / 3))
    assert graph["at_least"] == {2.0: 2, 3.0: 1, 5.0: 0}
    assert s["eager_us"]["at_least"] == {2.0: 3, 3.0: 2, 5.0: 2}
    assert (s["eager_us"]["vllm"].low, s["eager_us"]["vllm"].high) == (140.0, 200.0)
    assert s["accuracy_rule_failures"] == ["qwen3-next-80b-tp2/B8/mtp4/ssm-fp32"]


def test_misses_name_the_time_target_and_roofline_share():
    found = {(m["id"], m["time"]): m for m in misses(ROWS)}
    assert set(found) == {
        ("qwen3.6-27b-tp2/B8/mtp4/ssm-fp32", "graph_us"),  # 1.9x < 2x
        ("qwen3-next-80b-tp2/B8/mtp4/ssm-fp32", "eager_us"),  # 2.8x < 3x
    }
    m = found[("qwen3.6-27b-tp2/B8/mtp4/ssm-fp32", "graph_us")]
    assert m["target_us"] == pytest.approx(19.0)
    assert m["target_pct_roofline"] == pytest.approx(100 * 18 / 19)
    assert m["ours_pct_roofline"] == pytest.approx(90.0)
    assert found[("qwen3-next-80b-tp2/B8/mtp4/ssm-fp32", "eager_us")]["roofline_us"] is None


def test_compare_uses_the_cases_both_records_ran():
    old = [_row("qwen3.6-27b-tp2/B1/mtp1/ssm-fp16", (60.0, 4.0), (200.0, 16.0)), _row("gone", (1, 1), (1, 1))]
    c = compare(ROWS, old)
    assert c["common_cases"] == 1
    assert c["ours"]["eager_us"].geomean == pytest.approx(0.5)
    assert c["vllm"]["graph_us"].geomean == pytest.approx(1.0)


def test_failed_cases_are_counted_not_summarised():
    rows = [*ROWS[1:], {"id": "qwen3.6-27b-tp2/B2/mtp1/ssm-fp16", "error": "RuntimeError: boom"}]
    s = summarize(rows)
    assert (s["cases"], s["failed_to_run"], s["graph_us"]["speedup"].n) == (4, 1, 3)
    assert not any(m["id"].endswith("B2/mtp1/ssm-fp16") for m in misses(rows))


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "cannot read"),
        ("{not json", "malformed JSON"),
        (json.dumps({"cases": []}), "non-empty 'cases' list"),
        (json.dumps({"cases": [{"id": 3}]}), "cases[0]: expected an object with a string 'id'"),
        (json.dumps({"cases": [{**ROWS[1], "ours": {"eager_us": 0, "graph_us": 1}}]}), "ours.eager_us should be"),
    ],
    ids=["missing", "not-json", "no-cases", "bad-id", "zero-time"],
)
def test_bad_records_raise_one_clear_error(tmp_path, content, message):
    path = tmp_path / "r.json"
    if content is not None:
        path.write_text(content)
    with pytest.raises(RecordError, match=re.escape(message)) as info:
        load_record(path)
    assert str(path) in str(info.value)


def _run(argv, capsys):
    parser = argparse.ArgumentParser(prog="caovan bench")
    bench_cli.add_arguments(parser)
    rc = bench_cli.run(parser.parse_args(argv))
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_cli_bad_record_exits_2_with_one_line(tmp_path, capsys):
    rc, out, err = _run(["summary", str(tmp_path / "missing.json")], capsys)
    assert rc == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and err.startswith("caovan bench: error: ")


def test_cli_prints_the_report_with_the_older_record(tmp_path, capsys):
    new, old = tmp_path / "new.json", tmp_path / "old.json"
    new.write_text(json.dumps({"cases": ROWS}))
    old.write_text(json.dumps({"cases": ROWS}))
    rc, out, _ = _run(["summary", str(new), "--against", str(old)], capsys)
    assert rc == 0
    assert "model cases: 3 cases, 0 failed to run" in out
    # Each number says what it is: vLLM's own time (38), not the 2x target's (19), is the one called vLLM's.
    assert (
        "qwen3.6-27b-tp2/B8/mtp4/ssm-fp32 graph_us: caovan 20.00 us, vLLM 38.00 us, 1.900x; 2x target 19.00 us; "
        "roofline 18.00 us" in out
    )
    eager_miss = "qwen3-next-80b-tp2/B8/mtp4/ssm-fp32 eager_us: caovan 50.00 us, vLLM 140.00 us, 2.800x; 3x target"
    assert eager_miss + " 46.67 us" in out
    assert "ours: eager host-inclusive 1.000-1.000x (geomean 1.000x), CUDA graph 1.000-1.000x" in out


def test_layers_times_are_summarised_when_every_row_has_them():
    with_layers = [
        {
            **r,
            "ours": {**r["ours"], "graph_layers_us": r["ours"]["graph_us"]},
            "vllm": {**r["vllm"], "graph_layers_us": 2 * r["vllm"]["graph_us"]},
        }
        for r in ROWS[1:]
    ]
    s = summarize(with_layers)
    assert s["graph_layers_us"]["speedup"].low == pytest.approx(3.8)
    assert not any(m["time"] == "graph_layers_us" for m in misses(with_layers))  # 3.8x and up
    assert "graph_layers_us" not in summarize([*with_layers[:1], ROWS[2]])  # one row without: not summarised
    c = compare(with_layers, ROWS)  # the older record has no layers times
    assert set(c["ours"]) == {"eager_us", "graph_us"}


def _numbers(pattern: str, text: str) -> tuple[float, ...]:
    match = re.search(pattern, text, re.S)
    assert match, f"pattern not found in the docs: {pattern}"
    return tuple(float(g) for g in match.groups())


def test_docs_quote_the_committed_h200_record():
    """README and docs/bench/README.md quote `caovan bench summary docs/bench/bench-kernels-h200.json`.

    Fails when the record is replaced and the quoted model-case figures are not updated with it.
    """
    rows = [r for r in load_record(H200_RECORD)["cases"] if is_model_case(r)]
    s = summarize(rows)
    eager, graph = s["eager_us"]["speedup"], s["graph_us"]["speedup"]
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert _numbers(r"≥ ([\d.]+)× in every case, ([\d.]+)× geometric mean", readme) == (
        round(eager.low, 2),
        round(eager.geomean, 2),
    )
    assert _numbers(r"\(([\d.]+)×–([\d.]+)×, ([\d.]+)× geometric mean", readme) == (
        round(graph.low, 2),
        round(graph.high, 2),
        round(graph.geomean, 2),
    )
    bench_doc = (ROOT / "docs" / "bench" / "README.md").read_text(encoding="utf-8")
    assert _numbers(
        r"eager host-inclusive: .*?speedup ([\d.]+)×–([\d.]+)× in every case\s+\(geometric mean ([\d.]+)×", bench_doc
    ) == (
        round(eager.low, 2),
        round(eager.high, 2),
        round(eager.geomean, 2),
    )
    assert _numbers(
        r"\* CUDA graph: .*?speedup ([\d.]+)×–([\d.]+)× \(geometric mean ([\d.]+)×\), ≥ 2× in\s+(\d+) of (\d+)",
        bench_doc,
    ) == (
        round(graph.low, 2),
        round(graph.high, 2),
        round(graph.geomean, 2),
        s["graph_us"]["at_least"][2.0],
        graph.n,
    )
    layers = s["graph_layers_us"]["speedup"]
    assert _numbers(r"with a cold L2, .*?([\d.]+)×–([\d.]+)×,\s+([\d.]+)× geometric mean", readme) == (
        round(layers.low, 2),
        round(layers.high, 2),
        round(layers.geomean, 2),
    )
    assert _numbers(
        r"\* CUDA graph, layers \(cold L2\): .*?speedup ([\d.]+)×–([\d.]+)× \(geometric mean\s+([\d.]+)×\), "
        r"≥ 2× in (\d+) of (\d+)",
        bench_doc,
    ) == (
        round(layers.low, 2),
        round(layers.high, 2),
        round(layers.geomean, 2),
        s["graph_layers_us"]["at_least"][2.0],
        layers.n,
    )


def test_docs_quote_the_committed_h200_layer_record():
    """README and docs/bench/README.md quote `caovan bench layer`'s record (docs/bench/bench-layer-h200.json)."""
    record = json.loads(H200_LAYER_RECORD.read_text(encoding="utf-8"))
    speedups = [c["speedup_eager"] for c in record["cases"]]
    assert record["summary"]["errors"] == 0 and all(c["caovan_took_the_step"] for c in record["cases"])
    expected = (
        round(min(speedups), 2),
        round(max(speedups), 2),
        round(math.exp(sum(map(math.log, speedups)) / len(speedups)), 2),
        len(speedups),
    )
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert (
        _numbers(r"eager\): ([\d.]+)×–([\d.]+)×\s+faster than vLLM's \(([\d.]+)× geometric mean, (\d+) cases", readme)
        == expected
    )
    bench_doc = (ROOT / "docs" / "bench" / "README.md").read_text(encoding="utf-8")
    assert (
        _numbers(r"caovan [\d.]+–[\d.]+ µs; speedup ([\d.]+)×–([\d.]+)× \(geometric mean ([\d.]+)×\)", bench_doc)
        == (expected[:3])
    )


def _short_quote(record: Path) -> str:
    """How the docs quote a re-made record's model cases in one line (a speedup's low and high, its geomean)."""
    s = summarize([r for r in load_record(record)["cases"] if is_model_case(r)])
    eager, graph, layers = (s[key]["speedup"] for key in ("eager_us", "graph_us", "graph_layers_us"))
    return (
        f"eager {eager.low:.2f}x to {eager.high:.2f}x (geometric mean {eager.geomean:.2f}x), CUDA graph "
        f"{graph.low:.2f}x to {graph.high:.2f}x ({graph.geomean:.2f}x), cold-L2 layers {layers.low:.2f}x to "
        f"{layers.high:.2f}x ({layers.geomean:.2f}x)"
    )


def _layer_quote(record: Path) -> tuple[float, float, float]:
    speedups = [c["speedup_eager"] for c in json.loads(record.read_text(encoding="utf-8"))["cases"]]
    return min(speedups), max(speedups), math.exp(sum(map(math.log, speedups)) / len(speedups))


@pytest.mark.parametrize("doc", ["README.md", "docs/bench/README.md"])
def test_docs_quote_the_committed_h100_records(doc):
    """Both docs quote the H100 records of vLLM 0.21.0 and 0.25.0 and the H100 layer record in one line each.

    Fails when a record is replaced and the quoted figures are not updated with it.
    """
    text = " ".join((ROOT / doc).read_text(encoding="utf-8").split())
    for record in (H100_RECORD, H100_VLLM_025_RECORD):
        assert _short_quote(record) in text, f"{doc} does not quote {record.name} as `{_short_quote(record)}`"
    low, high, geomean = _layer_quote(H100_LAYER_RECORD)
    assert re.search(rf"{low:.2f}x to {high:.2f}x \((geometric mean )?{geomean:.2f}x", text), doc


def _record(tmp_path, rows, name="r.json", **fields):
    path = tmp_path / name
    path.write_text(json.dumps({**fields, "cases": rows}))
    return path


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"ours": "fast"}, "ours should be an object of times, got 'fast'"),
        ({"ours": [1]}, "ours should be an object of times, got [1]"),
        ({"vllm": None}, "vllm should be an object of times, got None"),
        ({"vllm": {}}, "vllm.eager_us should be a finite positive number, got None"),
        ({"ours": {"eager_us": True, "graph_us": 1.0}}, "ours.eager_us should be a finite positive number, got True"),
        (
            {"ours": {"eager_us": 1.0, "graph_us": math.inf}},
            "ours.graph_us should be a finite positive number, got inf",
        ),
        ({"ours": {**ROWS[1]["ours"], "graph_layers_us": "2"}}, "ours.graph_layers_us should be a finite positive"),
        ({"roofline_us": -1}, "roofline_us should be a finite positive number or null, got -1"),
        ({"accuracy_rule": None}, "accuracy_rule should be an object with a true/false 'passed', got None"),
        ({"accuracy_rule": {"problems": []}}, "accuracy_rule should be an object with a true/false 'passed'"),
    ],
)
def test_malformed_case_objects_are_one_clear_error(tmp_path, capsys, change, message):
    path = _record(tmp_path, [ROWS[0], {**ROWS[1], **change}])
    with pytest.raises(RecordError, match=re.escape(f"{path}: cases[1] ({ROWS[1]['id']}): {message}")):
        load_record(path)
    good = _record(tmp_path, ROWS, name="good.json")
    for argv in (["summary", str(path)], ["summary", str(good), "--against", str(path)]):
        rc, out, err = _run(argv, capsys)
        assert rc == 2 and out == "" and len(err.strip().splitlines()) == 1 and message in err


def test_a_record_of_another_bench_is_the_wrong_kind(tmp_path, capsys):
    layer = _record(
        tmp_path, [{"id": "x", "ours": {"eager_us": 1.0}, "vllm": {"eager_us": 2.0}}], schema="caovan-bench-layer/1"
    )
    with pytest.raises(
        RecordError, match=re.escape("a 'caovan-bench-layer/1' record (caovan bench layer --json), the wrong kind")
    ):
        load_record(layer)
    assert load_record(_record(tmp_path, ROWS, name="new.json", schema="caovan-bench-kernels/1"))["cases"] == ROWS
    rc, out, err = _run(["summary", str(_record(tmp_path, ROWS, name="k.json")), "--against", str(layer)], capsys)
    assert rc == 2 and out == "" and "wrong kind" in err


def test_against_a_record_without_common_model_cases_says_so(tmp_path, capsys):
    old = [{**r, "id": r["id"].replace("/B", "/X")} for r in ROWS]
    rc, out, _ = _run(
        ["summary", str(_record(tmp_path, ROWS)), "--against", str(_record(tmp_path, old, name="old.json"))], capsys
    )
    assert rc == 0
    assert out.splitlines()[-1] == "against the older record: no model case ran in both records, nothing to compare"


def test_summary_into_a_closed_pipe_exits_quietly(tmp_path):
    import os
    import subprocess
    import sys

    path = _record(tmp_path, ROWS * 2000)  # more than a pipe holds
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    child = subprocess.Popen(
        [sys.executable, "-m", "caovan", "bench", "summary", str(path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )
    child.stdout.close()  # the reader is gone before the first line (``| head -0``)
    err = child.stderr.read().decode()
    assert child.wait(timeout=120) == 141 and err == ""


@pytest.mark.parametrize("schema", [["caovan-bench-kernels/1"], {"name": "x"}, 5])
def test_a_schema_that_is_not_a_string_is_the_wrong_kind_not_a_traceback(tmp_path, capsys, schema):
    path = _record(tmp_path, ROWS, schema=schema)
    rc, out, err = _run(["summary", str(path)], capsys)
    assert rc == 2 and out == ""
    assert len(err.strip().splitlines()) == 1
    assert err.startswith(f"caovan bench: error: {path}: a {schema!r} record (") and "the wrong kind" in err


def test_a_serving_benchmark_record_is_named_as_such(tmp_path, capsys):
    from caovan.serving.benchmark import SCHEMA

    rc, out, err = _run(["summary", str(_record(tmp_path, ROWS, schema=SCHEMA))], capsys)
    assert rc == 2 and out == "" and f"a {SCHEMA!r} record (caovan-sm75-benchmark --output), the wrong kind" in err


def test_against_a_record_of_another_gpu_or_settings_says_so(tmp_path, capsys):
    settings = {"warmup": 10, "quick": False, "cases": "all"}
    new = _record(tmp_path, ROWS, gpu={"name": "NVIDIA GeForce RTX 2080 Ti"}, settings=settings)
    same = _record(tmp_path, ROWS, name="same.json", gpu={"name": "NVIDIA GeForce RTX 2080 Ti"}, settings=settings)
    quick = {**settings, "quick": True, "cases": "model"}  # the case set may differ: the common cases are compared
    other = _record(tmp_path, ROWS, name="h200.json", gpu={"name": "NVIDIA H200"}, settings=quick)
    rc, out, _ = _run(["summary", str(new), "--against", str(other)], capsys)
    assert rc == 0
    header = out.splitlines().index("against the older record, model cases in both: 3 (new / old time)")
    assert out.splitlines()[header + 1] == (
        "  not like for like: GPU NVIDIA H200 then, NVIDIA GeForce RTX 2080 Ti now; quick True then, False now"
    )
    rc, out, _ = _run(["summary", str(new), "--against", str(same)], capsys)
    assert rc == 0 and "not like for like" not in out


@pytest.mark.parametrize("time_us", [5e-324, 1e308])
def test_a_time_out_of_any_measurable_range_is_one_error_not_a_statistics_traceback(tmp_path, capsys, time_us):
    # ratios of such times overflow to inf or underflow to 0, which geometric_mean refuses
    row = {**ROWS[1], "ours": {"eager_us": time_us, "graph_us": 4.0}}
    rc, out, err = _run(["summary", str(_record(tmp_path, [ROWS[0], row]))], capsys)
    assert rc == 2 and out == "" and len(err.strip().splitlines()) == 1
    assert f"ours.eager_us should be a finite positive number, got {time_us!r} (a time in us is 1e-06 to 1e+09)" in err


def test_an_empty_file_name_is_named_as_such_not_as_the_current_folder(tmp_path, capsys):
    good = str(_record(tmp_path, ROWS))
    for argv, name in ((["summary", ""], "RECORD"), (["summary", good, "--against", ""], "--against")):
        rc, out, err = _run(argv, capsys)
        assert rc == 2 and out == "" and err == f"caovan bench: error: {name} '': an empty file name\n"
