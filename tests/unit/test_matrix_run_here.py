"""``python -m caovan.matrix run-here``: what it refuses before any tier runs, and how it ends."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest
from matrix_fixtures import VALID_ROW

import caovan
from caovan.matrix import row_run
from caovan.matrix.__main__ import main as matrix_cli
from caovan.matrix.fingerprint import package_difference

ROW = "vllm-0.21.0"
MATRIX = "rows:\n" + VALID_ROW
#: The caovan these tests import: the checkout's src/caovan, or (nox -s tests) a wheel built from it.
IMPORTED = Path(caovan.__file__).resolve().parent


def copy_package(target: Path) -> Path:
    shutil.copytree(IMPORTED, target, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    return target


@pytest.fixture
def checkout(tmp_path, monkeypatch) -> Path:
    """A checkout whose src/caovan is a copy of the imported caovan, as cwd."""
    root = tmp_path / "checkout"
    (root / "matrix").mkdir(parents=True)
    (root / "matrix" / "vllm.yaml").write_text(MATRIX)
    (root / "pyproject.toml").write_text("[project]\nname = 'caovan-vllm-sm75-turbo3'\n")
    copy_package(root / "src" / "caovan")
    monkeypatch.chdir(root)
    return root


@pytest.fixture
def row_runs(monkeypatch) -> list[dict]:
    """run_row's calls, none of them run."""
    calls: list[dict] = []

    def fake_run_row(row, provenance, **kwargs):
        calls.append({"row": row, "provenance": provenance, **kwargs})
        return row_run.RowRunOutcome(kwargs["results_dir"] / "x.json", None)

    monkeypatch.setattr(row_run, "run_row", fake_run_row)
    return calls


# --- the caovan that runs is this checkout's ---------------------------------------------------


def test_package_difference_ignores_caches_and_names_the_first_differing_file(tmp_path):
    source = copy_package(tmp_path / "source")
    installed = copy_package(tmp_path / "site" / "caovan")
    (installed / "__pycache__").mkdir(exist_ok=True)
    (installed / "__pycache__" / "cli.cpython-311.pyc").write_bytes(b"\0")
    (source / "adapters" / "stray.pyc").write_bytes(b"\0")
    assert package_difference(installed, source) is None

    with (installed / "adapters" / "registry.py").open("a") as handle:
        handle.write("raise RuntimeError()\n")
    (installed / "zz_new.py").write_text("")
    assert package_difference(installed, source) == "adapters/registry.py differs"
    (installed / "adapters" / "registry.py").write_bytes((source / "adapters" / "registry.py").read_bytes())
    assert package_difference(installed, source) == f"zz_new.py is not in {source}"
    (installed / "zz_new.py").unlink()
    (installed / "matrix" / "envinfo.py").unlink()
    assert package_difference(installed, source) == f"matrix/envinfo.py is missing from {installed}"


def test_run_here_refuses_when_the_imported_caovan_is_not_this_checkouts(checkout, row_runs, capsys):
    with (checkout / "src" / "caovan" / "adapters" / "registry.py").open("a") as handle:
        handle.write("raise RuntimeError()\n")
    assert matrix_cli(["run-here", ROW, "--runner", "qa", "--tiers", "discovery"]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    source = checkout / "src" / "caovan"
    assert line.startswith(
        f"matrix: error: the caovan package this run imports, {IMPORTED}, is not this checkout's {source} "
        "(adapters/registry.py differs)"
    )
    assert row_runs == []
    assert sorted(p.name for p in checkout.iterdir()) == ["matrix", "pyproject.toml", "src"]


def test_run_here_accepts_a_byte_identical_installed_copy(checkout, row_runs):
    # What nox's tests session and tools/run-gpu-row-offline.sh do: a wheel of the checkout, installed.
    assert IMPORTED != (checkout / "src" / "caovan").resolve()
    assert matrix_cli(["run-here", ROW, "--runner", "qa", "--tiers", "discovery"]) == 0
    (call,) = row_runs
    assert call["selected_tiers"] == ("discovery",) and call["root"] == checkout
    # Known before planning, so that tiers stored from another install are not reused.
    assert call["install_note"] == {"mode": "current-environment", "python": sys.executable}


# --- where it runs, and how it ends --------------------------------------------------------------


def test_run_here_outside_the_repository_root_is_one_error(checkout, tmp_path, monkeypatch, row_runs, capsys):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    code = matrix_cli(["run-here", ROW, "--runner", "qa", "--matrix-dir", str(checkout / "matrix")])
    assert code == 2
    assert capsys.readouterr().err.splitlines() == [
        f"matrix: error: {elsewhere} is not the repository root (no pyproject.toml or src/caovan/__init__.py "
        "here): run run-here from the root of the checkout whose row it runs"
    ]
    assert row_runs == [] and list(elsewhere.iterdir()) == []


def test_run_here_writes_the_result_beside_the_rows_it_read(checkout, row_runs):
    (checkout / "other").mkdir()
    shutil.copy(checkout / "matrix" / "vllm.yaml", checkout / "other" / "vllm.yaml")
    assert matrix_cli(["run-here", ROW, "--runner", "qa", "--matrix-dir", "other"]) == 0
    (call,) = row_runs
    assert call["results_dir"] == checkout / "other" / "results"


def test_run_here_ctrl_c_in_a_tier_exits_130_without_a_traceback(checkout, monkeypatch, capsys):
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(row_run, "run_row", interrupted)
    assert matrix_cli(["run-here", ROW, "--runner", "qa"]) == 130


def test_run_here_ctrl_c_before_any_tier_says_nothing_was_written(checkout, monkeypatch, row_runs, capsys):
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr("caovan.matrix.fingerprint.package_difference", interrupted)
    assert matrix_cli(["run-here", ROW, "--runner", "qa"]) == 130
    assert capsys.readouterr().err == "matrix run-here: interrupted before any tier ran: nothing written\n"
    assert row_runs == []


def test_run_here_with_a_result_folder_it_cannot_write_is_one_error_before_any_tier(checkout, monkeypatch, capsys):
    def no_tier(*args, **kwargs):
        raise AssertionError("no tier may run")

    monkeypatch.setattr(row_run, "run_tier", no_tier)
    (checkout / "matrix" / "results").write_text("a file where the results folder goes")
    assert matrix_cli(["run-here", ROW, "--runner", "qa"]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("matrix: error: matrix/results/qa/vllm-0.21.0.json: cannot write the result there: ")
