"""tools/apply-tuned-launch-config.py: a tune record's winner goes into the launch-config file whole, or not at all."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

from caovan.kernels.gdn_spec_decode import launch_configs

ROOT = Path(__file__).resolve().parents[2]
TOOL = ROOT / "tools" / "apply-tuned-launch-config.py"


def _record(tmp_path: Path, config: dict) -> Path:
    record = {
        "gpu": {"name": "NVIDIA H200", "capability": "9.0"},
        "best": {"config": config, "label": "qk(w2) v(BV8,w1) pdl", "geomean_graph_us": 6.5, "vs_base": 1.02},
    }
    path = tmp_path / "tune.json"
    path.write_text(json.dumps(record))
    return path


def _apply(tmp_path: Path, config: dict) -> tuple[subprocess.CompletedProcess[str], Path]:
    data = tmp_path / "launch_configs.json"
    data.write_text(launch_configs.DATA_FILE.read_text(encoding="utf-8"))
    done = subprocess.run(
        [sys.executable, str(TOOL), str(_record(tmp_path, config)), "--data", str(data)],
        capture_output=True,
        text=True,
        check=False,
    )
    return done, data


def test_the_winner_keeps_every_field_it_was_measured_with(tmp_path):
    # What `bench tune` records: asdict() of the candidate, which carries the entry's thresholds and split rows.
    base = launch_configs.load_entry("sm90", json.loads(launch_configs.DATA_FILE.read_text())["sm90"])
    assert base.row_split_min_state_write_bytes is not None and base.v_gdn.row_split_block is not None
    winner = dataclasses.replace(base, qk=dataclasses.replace(base.qk, num_warps=2))
    done, data = _apply(tmp_path, dataclasses.asdict(winner))
    assert done.returncode == 0, done.stderr
    written = launch_configs.load_entry("sm90", json.loads(data.read_text())["sm90"])
    assert written.qk.num_warps == 2
    assert written.row_split_min_state_write_bytes == base.row_split_min_state_write_bytes
    assert written.stagger_min_state_write_bytes == base.stagger_min_state_write_bytes
    assert written.write_through_last_min_state_write_bytes == base.write_through_last_min_state_write_bytes
    assert written.v_gdn == base.v_gdn
    assert written.tuned and "tune.json" in written.note


def test_a_winner_the_loader_refuses_writes_nothing(tmp_path):
    base = launch_configs.load_entry("sm90", json.loads(launch_configs.DATA_FILE.read_text())["sm90"])
    broken = dataclasses.asdict(base)
    broken["v_gdn"]["row_split_lanes"] = None  # the row_split_* fields go together
    done, data = _apply(tmp_path, broken)
    assert done.returncode == 2
    assert "is not a valid sm90 entry" in done.stderr and "nothing written" in done.stderr
    assert data.read_text() == launch_configs.DATA_FILE.read_text()
