"""A matrix row's run killed mid-tier (SIGTERM; SIGTERM then SIGKILL) and started again.

Each test runs the row machinery for real in a process of its own (matrix_fake_row_run.py: run_row and the real
tier runner, whose pytest runs a fake checkout's tests), stops it while a tier's test waits, as told by the marker
file that test writes, and starts it again. What must hold: the row's result file and the other rows' are left
byte for byte as they were until the row finishes, the state file marks the tier in progress and the cut, no
pytest of the stopped run runs beside the new one, the restart resumes after the finished tiers, and what it
writes at the end is a complete result.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from matrix_fixtures import ENV, PROVENANCE, ROW

import caovan
from caovan.matrix.compat import main as compat_main
from caovan.matrix.results import Provenance, build_result, load_result, write_json_atomic
from caovan.matrix.row_guard import is_running
from caovan.matrix.schema import MatrixRow

HERE = Path(__file__).parent
DRIVER = HERE / "matrix_fake_row_run.py"
RESULT = Path("matrix/results/qa/vllm-0.21.0.json")
STATE = Path("build/matrix/state/qa/vllm-0.21.0.json")
LOCK = Path("build/matrix/state/qa/vllm-0.21.0.lock")
#: Long enough for a loaded 2-core CI runner to start a pytest; the markers, not this, say when to act.
WAIT_S = 60

FAKE_TIERS = '''\
"""Stand-ins for the row's tiers: each logs that it ran; the one named by FAKE_STOP_IN writes its pid to a marker
and waits to be stopped (with FAKE_IGNORE_SIGTERM it notes a SIGTERM in a marker of its own and goes on waiting)."""
import os
import signal
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def tier(name):
    with open(ROOT / "ran.log", "a") as log:
        log.write(name + "\\n")
    if os.environ.get("FAKE_STOP_IN") != name:
        return
    if os.environ.get("FAKE_IGNORE_SIGTERM"):
        signal.signal(signal.SIGTERM, lambda *_: (ROOT / f"sigterm-{name}").write_text(""))
    (ROOT / f".in-{name}").write_text(str(os.getpid()))
    os.replace(ROOT / f".in-{name}", ROOT / f"in-{name}")
    deadline = time.monotonic() + 60  # an orphan of a failed test ends by itself
    while time.monotonic() < deadline:
        time.sleep(0.02)
    pytest.fail("not stopped within 60 s")


@pytest.mark.discovery
def test_discovery():
    tier("discovery")


@pytest.mark.kernel
def test_kernel():
    tier("kernel")


@pytest.mark.serve
def test_serve():
    tier("serve")
'''

PYTEST_INI = """\
[pytest]
markers =
    discovery: fake tier
    kernel: fake tier
    serve: fake tier
"""

OTHER_ROW = MatrixRow(
    id="vllm-0.20.2",
    vllm="0.20.2",
    torch="2.10.0",
    python="3.11",
    cuda="cpu",
    tiers=("discovery",),
    runner_labels=("ubuntu-latest",),
)


def result_of(row: MatrixRow, provenance: Provenance, runner: str = "qa") -> dict:
    return build_result(
        row, provenance, runner=runner, env=ENV, tiers={t: {"outcome": "pass", "reason": None} for t in row.tiers},
        selected=row.tiers, started_at="2026-01-01T00:00:00Z", finished_at="2026-01-01T01:00:00Z", complete=True,
    )  # fmt: skip


class FakeCheckout:
    """A checkout with the fake tiers, a result of this row made with older source and results of other rows."""

    def __init__(self, root: Path):
        self.root = root
        (root / "tests").mkdir(parents=True)
        (root / "tests" / "test_fake_tiers.py").write_text(FAKE_TIERS)
        (root / "pytest.ini").write_text(PYTEST_INI)
        older = Provenance(PROVENANCE.row_fingerprint, "0.1.0", "bbbbbbbbbbbbbbbb")
        write_json_atomic(root / RESULT, result_of(ROW, older))
        other_provenance = Provenance(OTHER_ROW.fingerprint(), "0.1.0", "bbbbbbbbbbbbbbbb")
        write_json_atomic(root / "matrix/results/qa/vllm-0.20.2.json", result_of(OTHER_ROW, other_provenance))
        write_json_atomic(root / "matrix/results/cpu/vllm-0.21.0.json", result_of(ROW, PROVENANCE, "cpu"))
        self.processes: list[subprocess.Popen] = []

    def results(self) -> dict[str, bytes]:
        folder = self.root / "matrix" / "results"
        return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}

    def start(self, **env: str) -> subprocess.Popen:
        # The caovan these tests import (the checkout's src, or nox's installed wheel) and matrix_fixtures.
        path = os.pathsep.join([str(Path(caovan.__file__).resolve().parents[1]), str(HERE)])
        run = len(self.processes)
        # Files, not pipes: nobody reads the output while the run goes on, and a full pipe would stall it.
        with open(self.root / f"run{run}.out", "w") as out, open(self.root / f"run{run}.err", "w") as err:
            process = subprocess.Popen(
                [sys.executable, str(DRIVER), str(self.root)],
                env={**os.environ, "PYTHONPATH": path, **env},
                stdout=out,
                stderr=err,
            )
        self.processes.append(process)
        return process

    def output(self, process: subprocess.Popen) -> tuple[str, str]:
        run = self.processes.index(process)
        return (self.root / f"run{run}.out").read_text(), (self.root / f"run{run}.err").read_text()

    def finish(self, process: subprocess.Popen) -> int:
        try:
            return process.wait(timeout=WAIT_S)
        except subprocess.TimeoutExpired:
            pytest.fail(f"the row's run did not end within {WAIT_S} s: {self.output(process)}")

    def run(self, **env: str) -> tuple[int, str, str]:
        process = self.start(**env)
        code = self.finish(process)
        return (code, *self.output(process))

    def wait_for(self, marker: str, process: subprocess.Popen) -> Path:
        path = self.root / marker
        deadline = time.monotonic() + WAIT_S
        while not path.exists():
            if process.poll() is not None:
                pytest.fail(f"the row's run ended (exit {process.returncode}) before {marker}: {self.output(process)}")
            if time.monotonic() > deadline:
                pytest.fail(f"no {marker} within {WAIT_S} s: {self.output(process)}")
            time.sleep(0.02)
        return path

    def ran(self) -> list[str]:
        log = self.root / "ran.log"
        return log.read_text().split() if log.exists() else []

    def state(self) -> dict:
        return json.loads((self.root / STATE).read_text())

    def lock_is_free(self) -> bool:
        with open(self.root / LOCK) as handle:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return False
            fcntl.flock(handle, fcntl.LOCK_UN)
            return True

    def stop_leftovers(self) -> None:
        """The runs this test started and the pytest of each that may outlive it (ids from the markers)."""
        for process in self.processes:
            if process.poll() is None:
                process.kill()
                process.wait()
        for marker in self.root.glob("in-*"):
            pid = int(marker.read_text())
            try:  # that pytest, not a process that got its id since: its command line names this checkout
                ours = str(self.root).encode() in Path(f"/proc/{pid}/cmdline").read_bytes()
            except OSError:
                ours = False
            if ours:
                os.kill(pid, signal.SIGKILL)


@pytest.fixture
def checkout(tmp_path):
    fake = FakeCheckout(tmp_path / "checkout")
    yield fake
    fake.stop_leftovers()


def test_sigterm_mid_tier_stops_its_pytest_keeps_every_result_and_a_restart_resumes(checkout):
    before = checkout.results()
    run = checkout.start(FAKE_STOP_IN="kernel")
    pytest_pid = int(checkout.wait_for("in-kernel", run).read_text())

    # Mid-tier: the tier in progress is marked in the state file, nowhere in the results folder.
    state = checkout.state()
    assert state["complete"] is False and list(state["tiers"]) == ["discovery"]
    running = {name: state["running"].get(name) for name in ("tier", "pid", "pytest_pid")}
    assert running == {"tier": "kernel", "pid": run.pid, "pytest_pid": pytest_pid}
    assert checkout.results() == before

    run.send_signal(signal.SIGTERM)
    assert checkout.finish(run) == 128 + signal.SIGTERM
    out, err = checkout.output(run)
    assert out.splitlines()[-1] == (
        f"row: stopped by SIGTERM in tier kernel: {RESULT} is unchanged; tiers discovery finished and are kept in "
        f"{STATE}: the same command resumes after them"
    )
    assert "Traceback" not in err, err
    assert not is_running(pytest_pid), "the tier's pytest was stopped with the run"
    assert checkout.results() == before, "no result file written or touched, no temp file left"
    state = checkout.state()
    assert "running" not in state and list(state["tiers"]) == ["discovery"]
    assert state["stopped"]["signal"] == "SIGTERM" and state["stopped"]["doing"] == "in tier kernel"

    code, out, err = checkout.run()
    assert code == 0, (out, err)
    assert checkout.ran() == ["discovery", "kernel", "kernel", "serve"], "discovery was not run again"
    assert any(
        line.startswith("row: the last run of this row was stopped by SIGTERM in tier kernel (")
        for line in out.split("\n")
    ), out
    done = load_result(checkout.root / RESULT)
    assert done["complete"] is True and done["plugin"]["source_fingerprint"] == PROVENANCE.source_fingerprint
    assert {tier: record["outcome"] for tier, record in done["tiers"].items()} == dict.fromkeys(ROW.tiers, "pass")
    assert not (checkout.root / STATE).exists()
    others = {name: content for name, content in before.items() if name != "qa/vllm-0.21.0.json"}
    assert {name: content for name, content in checkout.results().items() if name in others} == others
    assert sorted(checkout.results()) == sorted(before)


def test_sigkill_after_sigterm_leaves_the_row_unfinished_and_the_restart_waits_for_its_pytest(checkout):
    before = checkout.results()
    run = checkout.start(FAKE_STOP_IN="kernel", FAKE_IGNORE_SIGTERM="1")
    pytest_pid = int(checkout.wait_for("in-kernel", run).read_text())
    run.send_signal(signal.SIGTERM)
    checkout.wait_for("sigterm-kernel", run)  # the run passed the stop on to its pytest, which does not stop
    run.kill()
    assert checkout.finish(run) == -signal.SIGKILL
    assert checkout.results() == before
    state = checkout.state()
    assert state["complete"] is False and list(state["tiers"]) == ["discovery"]
    assert state["running"]["tier"] == "kernel" and state["running"]["pytest_pid"] == pytest_pid

    # The killed run's pytest lives on (its JUnit file would be read as the new run's): the restart refuses.
    assert is_running(pytest_pid)
    code, out, err = checkout.run()
    assert code == 2
    assert err.splitlines() == [
        f"error: {LOCK}: the pytest of tier kernel (pid {pytest_pid}) that a killed run of row "
        "vllm-0.21.0 on runner qa started is still running: wait for it to end or stop it, then run again; "
        "nothing was run"
    ]
    assert checkout.ran() == ["discovery", "kernel"] and checkout.results() == before

    os.kill(pytest_pid, signal.SIGKILL)
    deadline = time.monotonic() + WAIT_S
    while not checkout.lock_is_free():
        assert time.monotonic() < deadline, "the lock outlived the killed pytest"
        time.sleep(0.02)
    code, out, err = checkout.run()
    assert code == 0, (out, err)
    assert checkout.ran() == ["discovery", "kernel", "kernel", "serve"]
    assert any(line.startswith("row: the last run of this row ended in tier kernel (") for line in out.split("\n"))
    assert load_result(checkout.root / RESULT)["complete"] is True
    assert not (checkout.root / STATE).exists()


def test_a_cut_short_result_file_is_one_error_for_the_row_run_and_for_compat(checkout, tmp_path, capsys):
    result = checkout.root / RESULT
    text = result.read_text()
    result.write_text(text[: len(text) // 2])
    before = checkout.results()
    code, out, err = checkout.run()
    assert code == 2 and checkout.ran() == [] and checkout.results() == before
    (line,) = err.splitlines()
    assert line.startswith(f"error: {RESULT}:") and "malformed JSON" in line
    assert line.endswith(
        f"(the file ends before its JSON does: cut short?); a broken result file is not run over: restore it "
        f"(git checkout -- {RESULT}) or delete it, then run again; nothing was run"
    )

    # compat does not leave the row out of the table: it fails, naming the file, and writes nothing.
    data = HERE / "data"
    results = tmp_path / "results"
    shutil.copytree(data / "results", results)
    shutil.copy(data / "matrix.yaml", tmp_path / "matrix.yaml")
    shutil.copy(data / "compat_template.md", tmp_path / "compat.md")
    (tmp_path / "sm75.md").write_text("# SM75\n\n<!-- START sm75-releases -->\n<!-- END sm75-releases -->\n")
    cut = results / "cpu" / "vllm-0.21.0.json"
    cut.write_bytes(cut.read_bytes()[:1000])
    docs = {name: (tmp_path / name).read_bytes() for name in ("compat.md", "sm75.md")}
    argv = ["--results", str(results), "--doc", str(tmp_path / "compat.md"), "--sm75-doc", str(tmp_path / "sm75.md")]
    capsys.readouterr()
    assert compat_main(argv) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith(f"compat: error: {cut}:") and line.endswith(
        "(the file ends before its JSON does: cut short?)"
    )
    assert {name: (tmp_path / name).read_bytes() for name in docs} == docs
