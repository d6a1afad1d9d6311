"""``python -m caovan.matrix.tier_times``: tier costs summed from result files; a bad file is one error, no output."""

from __future__ import annotations

import json
from pathlib import Path

from caovan.matrix.tier_times import main

SAMPLES = Path(__file__).parent / "data" / "results" / "cpu"


def _result(folder: Path, sample: str, **seconds: float) -> None:
    """A sample result with its tiers' durations set; a tier not named keeps no duration (not run)."""
    doc = json.loads((SAMPLES / sample).read_text())
    for tier, record in doc["tiers"].items():
        if tier in seconds:
            record["duration_s"] = seconds[tier]
        else:
            record.pop("duration_s", None)
    (folder / sample).write_text(json.dumps(doc))


def test_the_sums_least_and_most_per_tier_come_from_the_rows(tmp_path, capsys):
    _result(tmp_path, "vllm-0.21.0.json", kernel=20.04, discovery=60.0)
    _result(tmp_path, "vllm-0.20.2.json", kernel=31.7)
    out = tmp_path / "times" / "kernel.json"
    assert main([str(tmp_path), "--out", str(out), "--note", "warm"]) == 0
    doc = json.loads(out.read_text())
    assert doc["note"] == "warm" and [r["row"] for r in doc["rows"]] == ["vllm-0.20.2", "vllm-0.21.0"]
    assert doc["tiers"]["kernel"] == {"rows": 2, "sum_s": 51.7, "min_s": 20.0, "max_s": 31.7}
    assert doc["tiers"]["discovery"]["rows"] == 1 and "serve" not in doc["tiers"]
    assert "kernel: 51.7 s over 2 rows (20.0 to 31.7 s a row)" in capsys.readouterr().out
    assert main([str(tmp_path), "--out", str(out), "--tier", "kernel"]) == 0
    assert list(json.loads(out.read_text())["tiers"]) == ["kernel"]


def test_a_file_that_is_not_a_result_is_one_error_and_nothing_is_written(tmp_path, capsys):
    _result(tmp_path, "vllm-0.21.0.json", kernel=20.0)
    (tmp_path / "notes.json").write_text('{"hello": 1}')
    out = tmp_path / "out.json"
    assert main([str(tmp_path), "--out", str(out)]) == 2
    assert not out.exists()
    assert f"tier_times: error: {tmp_path / 'notes.json'}: field 'row': missing" in capsys.readouterr().err
    assert main([str(tmp_path / "empty"), "--out", str(out)]) == 2
