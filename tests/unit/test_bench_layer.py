"""``caovan bench layer``: its case grid, summary, table and no-GPU exit (the run itself: tests/layer_gpu)."""

from __future__ import annotations

import argparse

import pytest

from caovan.bench import layer as lb
from caovan.cli import bench as bench_cli

torch = pytest.importorskip("torch", reason="the layer bench's models are torch dtypes")


def test_cases_are_distinct_and_quick_is_one():
    cases = lb.layer_cases()
    assert len({c.id for c in cases}) == len(cases) == 12
    assert [c.id for c in lb.layer_cases(quick=True)] == ["qwen3.6-27b-tp2/B4/mtp3/ssm-float32"]
    case = lb.LayerCase("qwen3.6-27b-tp2", num_seqs=8, num_spec=3, ssm_cache_dtype="float32")
    assert case.num_blocks == 1 + 8 * 4


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [({"head": "qwen-7b"}, "LayerCase.head"), ({"num_spec": 5}, "num_spec in 1..4"), ({"num_seqs": 0}, "num_seqs")],
)
def test_bad_cases_are_refused(kwargs, message):
    base = {"head": "qwen3.6-27b-tp2", "num_seqs": 1, "num_spec": 1, "ssm_cache_dtype": "float32"}
    with pytest.raises(ValueError, match=message):
        lb.LayerCase(**{**base, **kwargs})


def test_tiny_models_have_the_per_gpu_head_shapes():
    for case in lb.layer_cases():
        model = lb.tiny_model(case)
        family, h, hv, k = lb.LAYER_HEADS[case.head]
        assert (model.family, model.num_k_heads, model.num_v_heads, model.head_dim) == (family, h, hv, k)
        assert model.num_spec == case.num_spec and model.ssm_cache_dtype == case.ssm_cache_dtype


def test_summary_and_table():
    rows = [
        {"id": "a", "vllm": {"eager_us": 400.0}, "ours": {"eager_us": 40.0}, "speedup_eager": 10.0, "error": None},
        {"id": "b", "vllm": {"eager_us": 300.0}, "ours": {"eager_us": 75.0}, "speedup_eager": 4.0, "error": None},
        {"id": "c", "error": "RuntimeError: boom"},
    ]
    s = lb.summarize(rows)
    assert s["cases"] == 3 and s["errors"] == 1
    assert s["geomean_speedup_eager"] == pytest.approx(40**0.5) and s["min_speedup_eager"] == 4.0
    table = lb.format_rows(rows)
    assert "| a " in table and "10.00" in table and "ERROR: RuntimeError: boom" in table


def test_layer_bench_without_gpu_exits_2_with_one_line(monkeypatch, capsys, tmp_path):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    parser = argparse.ArgumentParser(prog="caovan bench")
    bench_cli.add_arguments(parser)
    rc = bench_cli.run(parser.parse_args(["layer", "--json", str(tmp_path / "r.json")]))
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and err[0].startswith("caovan bench: error: no CUDA GPU visible")
    assert not (tmp_path / "r.json").exists()


def test_a_case_that_raises_becomes_an_error_row_and_the_others_run(monkeypatch):
    cases = lb.layer_cases()[:3]

    def bench_one(case, workdir, settings, device):
        if case is cases[1]:
            raise RuntimeError("boom")
        return {"id": case.id, "error": None}

    monkeypatch.setattr(lb, "bench_layer_case", bench_one)
    lines = []
    rows = lb.run_layer_cases(cases, lb.BenchSettings(), progress=lines.append)
    assert [r["id"] for r in rows] == [c.id for c in cases]
    assert rows[1]["error"] == "RuntimeError: boom" and rows[1]["case"]["num_seqs"] == cases[1].num_seqs
    assert rows[0]["error"] is None and rows[2]["error"] is None
    assert lines[0] == f"[1/3] {cases[0].id}" and "  error: RuntimeError: boom" in lines
