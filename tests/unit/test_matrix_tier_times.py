"""``python -m caovan.matrix.tier_times``: tier costs summed from result files; a bad file is one error, no output."""

from __future__ import annotations

import json
from pathlib import Path

from caovan.matrix.tier_times import main


def _result(folder: Path, row: str, **seconds: float) -> None:
    tiers = {tier: {"outcome": "pass", "duration_s": s} for tier, s in seconds.items()}
    tiers["kernel"] = {"outcome": "not-run", "reason": "not selected"}  # no duration: not counted
    doc = {"row": {"id": row}, "runner": "cpu", "plugin": {"source_fingerprint": "abc"}, "tiers": tiers}
    (folder / f"{row}.json").write_text(json.dumps(doc))


def test_the_sums_least_and_most_per_tier_come_from_the_rows(tmp_path, capsys):
    _result(tmp_path, "vllm-0.21.0", sm75=20.04, discovery=60.0)
    _result(tmp_path, "vllm-0.33.0", sm75=31.7)
    out = tmp_path / "times" / "sm75.json"
    assert main([str(tmp_path), "--out", str(out), "--note", "warm"]) == 0
    doc = json.loads(out.read_text())
    assert doc["note"] == "warm" and [r["row"] for r in doc["rows"]] == ["vllm-0.21.0", "vllm-0.33.0"]
    assert doc["tiers"]["sm75"] == {"rows": 2, "sum_s": 51.7, "min_s": 20.0, "max_s": 31.7}
    assert doc["tiers"]["discovery"]["rows"] == 1 and "kernel" not in doc["tiers"]
    assert "sm75: 51.7 s over 2 rows (20.0 to 31.7 s a row)" in capsys.readouterr().out
    assert main([str(tmp_path), "--out", str(out), "--tier", "sm75"]) == 0
    assert list(json.loads(out.read_text())["tiers"]) == ["sm75"]


def test_a_file_that_is_not_a_result_is_one_error_and_nothing_is_written(tmp_path, capsys):
    _result(tmp_path, "vllm-0.21.0", sm75=20.0)
    (tmp_path / "notes.json").write_text('{"hello": 1}')
    out = tmp_path / "out.json"
    assert main([str(tmp_path), "--out", str(out)]) == 2
    assert not out.exists()
    assert (
        capsys.readouterr().err
        == f"tier_times: error: {tmp_path / 'notes.json'}: not a matrix result (no 'row' and 'tiers')\n"
    )
    assert main([str(tmp_path / "empty"), "--out", str(out)]) == 2
