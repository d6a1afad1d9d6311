"""What keeps one row's run whole when it is stopped from outside.

* SIGTERM (a cancelled CI job, ``kill``) becomes :class:`RunStopped`, a KeyboardInterrupt: every place that
  handles Ctrl-C handles it too, so the tier's pytest is stopped, the tier is not recorded and the run says what
  it keeps. Python's default SIGTERM would end the process at once and leave its pytest running.
* A lock per row and runner (``fcntl.flock``) that the run holds and hands on to the pytest of each tier: a
  restart refuses to run beside what is left of the last run, above all a pytest that outlived a run killed with
  SIGKILL, which would otherwise write the JUnit file the new run reads.
"""

from __future__ import annotations

import fcntl
import os
import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from . import MatrixError


class RunStopped(KeyboardInterrupt):
    """The run was asked to stop by a signal other than Ctrl-C's SIGINT."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum
        self.signal_name = signal.Signals(signum).name


def stop_cause(exc: KeyboardInterrupt) -> str:
    """How the run was stopped, as a log line says it: ``stopped by SIGTERM`` or ``interrupted``."""
    return f"stopped by {exc.signal_name}" if isinstance(exc, RunStopped) else "interrupted"


def stop_signal_name(exc: KeyboardInterrupt) -> str:
    return exc.signal_name if isinstance(exc, RunStopped) else "SIGINT"


def exit_status(exc: KeyboardInterrupt) -> int:
    """The shell's status for a process ended by the signal behind ``exc`` (130 for Ctrl-C, 143 for SIGTERM)."""
    return 128 + (exc.signum if isinstance(exc, RunStopped) else signal.SIGINT)


@contextmanager
def sigterm_stops_the_run() -> Iterator[None]:
    """Within the block, the first SIGTERM raises :class:`RunStopped`; later ones are ignored, so that stopping
    (the pytest of the tier, the state file) is not cut in turn: SIGKILL is there to force it."""
    if threading.current_thread() is not threading.main_thread():
        # Only the main thread may set signal handlers; a run from another thread keeps Python's default.
        yield
        return
    asked = False

    def handler(signum: int, frame: object) -> None:
        nonlocal asked
        if asked:
            return
        asked = True
        raise RunStopped(signum)

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        # None: a handler set outside Python, which cannot be put back; the default is the nearest.
        signal.signal(signal.SIGTERM, previous if previous is not None else signal.SIG_DFL)


@contextmanager
def row_lock(lock_file: Path, shown: Path, busy: Callable[[], str]) -> Iterator[int]:
    """Hold ``lock_file``'s lock for the block and give its descriptor (to pass on to each tier's pytest, which
    then holds it as long as it lives); :class:`MatrixError` with ``busy()`` when another process holds it, naming
    the file as ``shown`` when it cannot be made.

    The lock goes when every process holding it has ended, however it ended: nothing is left to clean up.
    """
    try:
        lock_file.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(lock_file, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as exc:
        raise MatrixError(f"{shown}: cannot take the row's lock: {exc.strerror or exc}; nothing was run") from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise MatrixError(busy()) from None
        yield fd
    finally:
        os.close(fd)


def is_running(pid: object) -> bool:
    """Whether a process of that id exists (a pid read from a state file; anything else: False)."""
    if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process of that id
        return True
    return True
