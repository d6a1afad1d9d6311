"""One row's run (run_row): which stored records a run keeps, what it says, what it writes."""

from __future__ import annotations

import errno
import json
import shutil
from pathlib import Path

import pytest
from matrix_fixtures import PROVENANCE, ROW

from caovan.matrix import MatrixError, row_run
from caovan.matrix.results import Provenance
from caovan.matrix.row_run import Prepared, run_row

ENV = {"python": "3.11.7", "gpu": "cpu", "vllm": "0.21.0", "torch": "2.11.0", "family": None}


class Runs:
    """run_row with a fake tier runner: each tier's outcome as given, the log lines kept."""

    def __init__(self, root: Path, monkeypatch: pytest.MonkeyPatch):
        self.root = root
        self.lines: list[str] = []
        self.ran: list[str] = []
        self.outcomes: dict[str, str] = {}
        self.env = dict(ENV)
        self.prepared = 0
        monkeypatch.setattr(row_run, "run_tier", self._run_tier)

    def _run_tier(self, python, tier, **_):
        self.ran.append(tier)
        outcome = self.outcomes.get(tier, "pass")
        if outcome == "interrupt":
            raise KeyboardInterrupt
        return {"outcome": outcome, "reason": f"{tier} {outcome}"}

    def __call__(self, tiers=None, *, redo=False, provenance=PROVENANCE, install_note=None, **outcomes):
        self.lines.clear()
        self.ran.clear()
        self.outcomes = outcomes
        return run_row(
            ROW,
            provenance,
            runner="qa",
            selected_tiers=tiers,
            redo=redo,
            root=self.root,
            results_dir=self.root / "matrix" / "results",
            cache_dir=self.root / "build" / "matrix",
            prepare=self._prepare,
            log=self.lines.append,
            install_note=install_note,
        )

    def _prepare(self) -> Prepared:
        self.prepared += 1
        return Prepared("python", dict(self.env), {})

    def on_disk(self) -> dict:
        return json.loads((self.root / "matrix" / "results" / "qa" / f"{ROW.id}.json").read_text())

    def outcomes_on_disk(self) -> dict[str, str]:
        return {tier: record["outcome"] for tier, record in self.on_disk()["tiers"].items()}


@pytest.fixture
def runs(tmp_path, monkeypatch) -> Runs:
    return Runs(tmp_path, monkeypatch)


def test_redo_of_one_tier_keeps_the_other_tiers_stored_results(runs):
    runs(["discovery", "kernel"], kernel="skipped")
    runs(["serve"], serve="skipped")
    assert runs.outcomes_on_disk() == {"discovery": "pass", "kernel": "skipped", "serve": "skipped"}

    runs(["serve"], redo=True, serve="pass")
    assert runs.ran == ["serve"]
    assert runs.outcomes_on_disk() == {"discovery": "pass", "kernel": "skipped", "serve": "pass"}
    assert "tiers discovery, kernel: not selected, their stored results (this row, this checkout) are kept" in (
        runs.lines
    )


def test_redo_says_which_stored_tiers_of_other_source_it_does_not_keep(runs):
    runs()
    newer = Provenance(PROVENANCE.row_fingerprint, "0.1.0", "bbbbbbbbbbbbbbbb")
    runs(["serve"], redo=True, provenance=newer)
    assert runs.outcomes_on_disk() == {"discovery": "not-run", "kernel": "not-run", "serve": "pass"}
    assert (
        "tiers discovery, kernel: stored results not kept, recorded with other source (source fingerprint "
        "aaaaaaaaaaaaaaaa, this checkout's bbbbbbbbbbbbbbbb): recorded as not run"
    ) in runs.lines


def test_a_plain_run_after_an_interrupted_redo_keeps_every_stored_tier(runs):
    runs(kernel="skipped", serve="pass")
    with pytest.raises(KeyboardInterrupt):
        runs(["discovery", "kernel"], redo=True, discovery="fail", kernel="interrupt")
    assert runs.outcomes_on_disk() == {"discovery": "pass", "kernel": "skipped", "serve": "pass"}

    runs(["serve"])
    assert runs.ran == []
    # discovery as the interrupted redo found it; kernel, which it did not finish, as stored.
    assert runs.outcomes_on_disk() == {"discovery": "fail", "kernel": "skipped", "serve": "pass"}


def test_an_interrupted_run_says_the_result_is_unchanged_and_the_same_command_resumes(runs):
    with pytest.raises(KeyboardInterrupt):
        runs(discovery="interrupt")
    assert runs.lines[-1] == (
        "interrupted in tier discovery: no matrix/results/qa/vllm-0.21.0.json written; no tier finished in this "
        "run, so the same command runs its tiers again"
    )
    runs(serve="skipped")
    before = runs.outcomes_on_disk()
    with pytest.raises(KeyboardInterrupt):
        runs(["discovery", "kernel"], redo=True, discovery="fail", kernel="interrupt")
    assert runs.lines[-1] == (
        "interrupted in tier kernel: matrix/results/qa/vllm-0.21.0.json is unchanged; tiers discovery finished "
        "and are kept in build/matrix/state/qa/vllm-0.21.0.json: the same command without --redo resumes after "
        "them (with --redo it starts them over)"
    )
    assert runs.outcomes_on_disk() == before

    with pytest.raises(KeyboardInterrupt):
        runs(["discovery", "kernel"], kernel="interrupt")
    assert runs.ran == ["kernel"], "resumed after discovery"
    assert runs.lines[-1] == (
        "interrupted in tier kernel: matrix/results/qa/vllm-0.21.0.json is unchanged; no tier finished in this "
        "run, so the same command runs its tiers again"
    )
    runs(["discovery", "kernel"])
    assert runs.ran == ["kernel"]
    assert runs.outcomes_on_disk() == {"discovery": "fail", "kernel": "pass", "serve": "skipped"}


def test_a_run_in_another_install_does_not_keep_the_stored_tiers_and_says_so(runs):
    host = {"mode": "current-environment", "python": "/usr/bin/python3"}
    runs(["discovery"], install_note=host)  # run-here
    runs(["serve"], install_note={"wheelhouse": None}, serve="skipped")  # nox -s matrix
    assert runs.outcomes_on_disk() == {"discovery": "not-run", "kernel": "not-run", "serve": "skipped"}
    assert "mode" not in runs.on_disk()["install"]
    assert (
        "tiers discovery: stored results not kept, they ran in the host's environment (/usr/bin/python3), this run "
        "in an isolated venv of the row (a result file does not mix installs): recorded as not run"
    ) in runs.lines


def test_a_result_folder_that_cannot_be_written_is_one_error_before_any_tier_runs(runs):
    (runs.root / "matrix" / "results").mkdir(parents=True)
    (runs.root / "matrix" / "results" / "qa").write_text("a file where the runner's folder goes")
    with pytest.raises(MatrixError) as caught:
        runs()
    assert runs.ran == []
    (message,) = caught.value.messages
    assert message.startswith("matrix/results/qa/vllm-0.21.0.json: cannot write the result there: ")
    assert "nothing was run" in message


def test_a_result_that_cannot_be_written_at_the_end_is_one_error_and_the_tiers_are_kept(runs, monkeypatch):
    real_write = row_run.write_json_atomic

    def full_disk_for_results(path, data):
        if "results" in Path(path).parts:
            raise OSError(errno.ENOSPC, "No space left on device")
        real_write(path, data)

    monkeypatch.setattr(row_run, "write_json_atomic", full_disk_for_results)
    with pytest.raises(MatrixError) as caught:
        runs(kernel="fail")
    assert caught.value.messages == [
        "matrix/results/qa/vllm-0.21.0.json: cannot write the result: No space left on device; tiers discovery, "
        "kernel, serve finished and are kept in build/matrix/state/qa/vllm-0.21.0.json: the same command "
        "writes it without running them again"
    ]
    monkeypatch.setattr(row_run, "write_json_atomic", real_write)
    runs()
    assert runs.ran == []
    assert runs.outcomes_on_disk() == {"discovery": "pass", "kernel": "fail", "serve": "pass"}


def test_a_second_run_in_the_same_checkout_builds_the_install_and_finds_the_result_current(runs):
    runs()
    runs()
    assert runs.prepared == 2, "the install is made before the stored result is judged"
    assert runs.ran == []
    assert (
        "matrix/results/qa/vllm-0.21.0.json is current for tiers discovery, kernel, serve: nothing to do"
        in (runs.lines[-1])
    )


def test_a_result_from_another_clone_or_machine_is_never_current_here(runs):
    runs()
    committed = runs.on_disk()
    # A fresh clone: the committed result file is there, the clone's git-ignored cache is not.
    shutil.rmtree(runs.root / "build")
    runs()
    assert runs.ran == ["discovery", "kernel", "serve"]
    assert any(
        line.startswith("tiers discovery, kernel, serve: stored results not reused, made by another install")
        for line in runs.lines
    ), runs.lines
    assert runs.on_disk()["install"]["identity"] != committed["install"]["identity"]


def test_a_result_that_records_no_install_identity_is_run_again(runs):
    runs()
    older = runs.on_disk()
    del older["install"]["identity"]
    (runs.root / "matrix" / "results" / "qa" / f"{ROW.id}.json").write_text(json.dumps(older))
    runs()
    assert runs.ran == ["discovery", "kernel", "serve"]
    assert any("it records no install identity" in line for line in runs.lines), runs.lines


def test_a_venv_that_resolved_other_packages_runs_the_tiers_again(runs):
    runs()
    runs.env["packages_fingerprint"] = "0123456789abcdef"
    runs()
    assert runs.ran == ["discovery", "kernel", "serve"]


def test_an_interrupted_run_in_the_same_checkout_still_resumes(runs):
    with pytest.raises(KeyboardInterrupt):
        runs(kernel="interrupt")
    runs()
    assert runs.ran == ["kernel", "serve"]
