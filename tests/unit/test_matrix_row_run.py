"""One row's run (run_row): which stored records a run keeps, what it says, what it writes."""

from __future__ import annotations

import errno
import json
import os
import shutil
import signal
import time
from pathlib import Path

import pytest
from matrix_fixtures import ENV, PROVENANCE, ROW

from caovan.matrix import MatrixError, row_run
from caovan.matrix.results import Provenance
from caovan.matrix.row_guard import RunStopped
from caovan.matrix.row_run import Prepared, run_row


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


# --- what a killed run leaves behind ---------------------------------------------------------------


def result_file(runs: Runs) -> Path:
    return runs.root / "matrix" / "results" / "qa" / f"{ROW.id}.json"


def test_a_hand_broken_result_file_is_an_error_naming_it_and_is_not_run_over(runs):
    runs()
    document = runs.on_disk()
    document["tiers"]["kernel"]["outcome"] = "green"
    result_file(runs).write_text(json.dumps(document))
    before = result_file(runs).read_bytes()
    with pytest.raises(MatrixError) as caught:
        runs(redo=True)
    assert caught.value.messages == [
        "matrix/results/qa/vllm-0.21.0.json: field 'tiers.kernel.outcome': 'green' is not one of pass, fail, "
        "skipped, error, not-run; a broken result file is not run over: restore it (git checkout -- "
        "matrix/results/qa/vllm-0.21.0.json) or delete it, then run again; nothing was run"
    ]
    assert runs.ran == [] and runs.prepared == 1, "refused before the install"
    assert result_file(runs).read_bytes() == before


def test_an_unreadable_state_file_is_said_and_its_tiers_run_again(runs):
    with pytest.raises(KeyboardInterrupt):
        runs(kernel="interrupt")
    state = runs.root / "build" / "matrix" / "state" / "qa" / f"{ROW.id}.json"
    state.write_text(state.read_text()[:40])
    runs()
    assert runs.ran == ["discovery", "kernel", "serve"]
    assert runs.lines[0].startswith("build/matrix/state/qa/vllm-0.21.0.json:4:5: malformed JSON: ")
    assert runs.lines[0].endswith("(the file ends before its JSON does: cut short?): not resumed, its tiers run again")


def test_temp_files_left_by_a_write_that_was_killed_are_removed(runs):
    runs()
    leftovers = [
        result_file(runs).parent / f".{ROW.id}.json.abc123.tmp",
        runs.root / "build" / "matrix" / "state" / "qa" / f".{ROW.id}.json.def456.tmp",
    ]
    for leftover in leftovers:
        leftover.parent.mkdir(parents=True, exist_ok=True)
        leftover.write_text('{"schema_vers')
    unrelated = result_file(runs).parent / ".vllm-0.20.2.json.abc123.tmp"
    unrelated.write_text("another row's")
    runs()
    assert [p.exists() for p in leftovers] == [False, False]
    assert unrelated.exists(), "another row's files are that row's run's business"


def test_a_run_of_the_row_is_refused_while_another_holds_its_lock(runs):
    import fcntl

    from caovan.matrix.row_state import running_mark, write_state

    state_dir = runs.root / "build" / "matrix" / "state" / "qa"
    state_dir.mkdir(parents=True)
    write_state(state_dir / f"{ROW.id}.json", {"complete": False}, running=running_mark("kernel", 0))
    with open(state_dir / f"{ROW.id}.lock", "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        with pytest.raises(MatrixError) as caught:
            runs()
    assert caught.value.messages == [
        f"build/matrix/state/qa/vllm-0.21.0.lock: another run of row vllm-0.21.0 on runner qa is going (pid "
        f"{os.getpid()}, in tier kernel): wait for it to end or stop it, then run again; nothing was run"
    ]
    assert runs.ran == [] and runs.prepared == 0
    runs()
    assert runs.ran == ["discovery", "kernel", "serve"]


def test_sigterm_in_a_tier_stops_the_run_says_so_and_the_handler_before_comes_back(runs, monkeypatch):
    # Were run_row's handler missing, this one would take the signal (not Python's default, which ends pytest).
    caught_outside = []
    outside = signal.signal(signal.SIGTERM, lambda *_: caught_outside.append(True))
    try:
        before = signal.getsignal(signal.SIGTERM)

        def tier_stopped_by_sigterm(python, tier, **_):
            runs.ran.append(tier)
            if tier == "kernel":
                os.kill(os.getpid(), signal.SIGTERM)
                time.sleep(5)  # the handler raises well before this ends
            return {"outcome": "pass", "reason": None}

        monkeypatch.setattr(row_run, "run_tier", tier_stopped_by_sigterm)
        with pytest.raises(RunStopped):
            runs()
        assert caught_outside == [] and signal.getsignal(signal.SIGTERM) == before
    finally:
        signal.signal(signal.SIGTERM, outside)
    assert runs.ran == ["discovery", "kernel"]
    assert runs.lines[-1] == (
        "stopped by SIGTERM in tier kernel: no matrix/results/qa/vllm-0.21.0.json written; tiers discovery "
        "finished and are kept in build/matrix/state/qa/vllm-0.21.0.json: the same command resumes after them"
    )
    state = json.loads((runs.root / "build" / "matrix" / "state" / "qa" / f"{ROW.id}.json").read_text())
    assert state["stopped"]["signal"] == "SIGTERM" and list(state["tiers"]) == ["discovery"]
