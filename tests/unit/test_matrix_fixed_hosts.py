"""``matrix/hosts/``: GPU hosts with fixed software, and what compat says each row's GPU tiers did there."""

from __future__ import annotations

import pytest

from caovan.matrix import MatrixError
from caovan.matrix.fixed_hosts import FixedHost, load_hosts, render_gpu_coverage
from caovan.matrix.schema import MatrixRow

H200 = FixedHost(runner="nvidia-h200", gpu="NVIDIA H200 (sm_90)", torch="2.11.0", python="3.12")


def _row(vllm: str, torch: str) -> MatrixRow:
    return MatrixRow(f"vllm-{vllm}", vllm, torch, "3.11", "cu130", ("discovery", "kernel"), ("self-hosted",))


ROWS = {row.id: row for row in (_row("0.18.0", "2.10.0"), _row("0.21.0", "2.11.0"), _row("0.25.0", "2.11.0"))}


def test_each_row_ran_could_run_or_cannot_run_with_the_pin_that_stops_it():
    text = render_gpu_coverage([H200], ROWS, {("nvidia-h200", "vllm-0.21.0"), ("cpu", "vllm-0.25.0")})
    lines = text.splitlines()
    assert lines[2] == "- **nvidia-h200** (NVIDIA H200 (sm_90); torch 2.11.0, Python 3.12):"
    assert lines[3] == "  - ran (their lines in the table): `vllm-0.21.0`"
    # A cpu result of the same row is not a run on the host.
    assert lines[4] == "  - not run yet (they pin the host's torch): `vllm-0.25.0`"
    assert (
        lines[5] == "  - not run, as they cannot run there (they pin a torch other than 2.11.0): `vllm-0.18.0` (2.10.0)"
    )


def test_no_hosts_no_section():
    assert render_gpu_coverage([], ROWS, set()) == ""


def test_a_local_build_tag_of_the_host_torch_still_matches_the_pin():
    assert FixedHost("h", "g", "2.11.0+cu130", "3.12").can_run(ROWS["vllm-0.21.0"])


def test_hosts_load_from_the_hosts_folder_and_are_optional(tmp_path):
    assert load_hosts(tmp_path) == []
    (tmp_path / "hosts").mkdir()
    (tmp_path / "hosts" / "lent.yaml").write_text(
        'hosts:\n  - runner: nvidia-h200\n    gpu: NVIDIA H200 (sm_90)\n    torch: "2.11.0"\n    python: "3.12"\n'
    )
    assert load_hosts(tmp_path) == [H200]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("hosts: []\n", "lent.yaml: expected a non-empty list under 'hosts:'"),
        ("hosts:\n  - runner: x\n", "lent.yaml: host 1: field 'gpu': expected a non-empty string, got None"),
        (
            'hosts:\n  - {runner: x, gpu: g, torch: "2.11.0", python: "3.12", labels: [a]}\n',
            "host 1: unknown field(s) labels",
        ),
        (
            'hosts:\n  - {runner: x, gpu: g, torch: "eleven", python: "3.12"}\n',
            "field 'torch': 'eleven' is not a version",
        ),
        (
            'hosts:\n  - {runner: x, gpu: g, torch: "2.11", python: "3.12"}\n'
            '  - {runner: x, gpu: h, torch: "2.11", python: "3.12"}\n',
            "runner 'x' is listed twice",
        ),
        ("hosts: [\n", "lent.yaml: cannot read it"),
    ],
)
def test_a_bad_hosts_file_is_one_clear_error_naming_file_and_host(tmp_path, text, message):
    (tmp_path / "hosts").mkdir()
    (tmp_path / "hosts" / "lent.yaml").write_text(text)
    with pytest.raises(MatrixError, match=message.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[")):
        load_hosts(tmp_path, "matrix")


def test_the_committed_hosts_file_loads():
    from pathlib import Path

    hosts = load_hosts(Path(__file__).resolve().parents[2] / "matrix")
    assert [h.runner for h in hosts] == ["nvidia-h200", "nvidia-h100", "nvidia-h200-x2"]
