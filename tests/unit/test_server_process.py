"""ServerProcess: the server's whole process group stops on SIGINT, or on SIGKILL when it ignores SIGINT."""

from __future__ import annotations

import signal
import sys
import time
from pathlib import Path

from caovan.serving.server_process import ServerProcess

# A parent that starts a child in its own group, as vLLM's server starts its engine core; both print their pids.
# Like vLLM's API server and engine core, each sets its own SIGINT handler: a process started from a shell's
# background job inherits an ignored SIGINT, and Python then installs no KeyboardInterrupt handler of its own.
FAMILY = """
import os, signal, subprocess, sys, time
signal.signal(signal.SIGINT, signal.SIG_IGN if {ignore_sigint} else signal.default_int_handler)
child = subprocess.Popen([sys.executable, "-c", "import signal, time; "
                          "signal.signal(signal.SIGINT, signal.default_int_handler); time.sleep(300)"])
print(os.getpid(), child.pid, flush=True)
time.sleep(300)
"""


def _start(tmp_path: Path, ignore_sigint: bool) -> tuple[ServerProcess, int]:
    server = ServerProcess([sys.executable, "-c", FAMILY.format(ignore_sigint=ignore_sigint)], tmp_path / "log")
    deadline = time.monotonic() + 30
    while not server.log().strip() and time.monotonic() < deadline:
        time.sleep(0.05)
    _, child = map(int, server.log().split()[:2])
    return server, child


def _gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split()[2] == "Z"  # a zombie has ended; its parent just has not reaped it
    except FileNotFoundError:
        return True


def test_sigint_stops_the_server_and_its_child(tmp_path: Path) -> None:
    server, child = _start(tmp_path, ignore_sigint=False)
    assert server.stop(grace_s=10) == -signal.SIGINT
    time.sleep(0.2)
    assert _gone(child)
    assert "KeyboardInterrupt" in server.log()


def test_a_server_that_ignores_sigint_is_killed_after_the_grace_period(tmp_path: Path) -> None:
    server, child = _start(tmp_path, ignore_sigint=True)
    began = time.monotonic()
    assert server.stop(grace_s=1) == -signal.SIGKILL
    assert time.monotonic() - began >= 1
    time.sleep(0.2)
    assert _gone(child)
