"""The partial state of a row's run: ``<cache>/state/<runner>/<row>.json``, beside the row's lock.

It is the result document so far (``"complete": false``, the tiers finished in this run), written atomically
before the first tier and after each, never in the results folder. Two marks say how far the run got:

* ``running``: the tier in progress, with the ids of the run's process and of its pytest, written as the tier
  starts. A state file that still has it was left by a run that ended without a word (SIGKILL, a machine gone).
* ``stopped``: the signal that stopped the run and where, written by the run as it stops (SIGTERM, Ctrl-C).

A restart reads both to say what happened to the last run; what to run again follows from the tiers alone.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..jsonfile import read_json
from .results import write_json_atomic
from .row_guard import is_running
from .tiers import utc_now


def state_path(cache_dir: Path, runner: str, row_id: str) -> Path:
    return Path(cache_dir) / "state" / runner / f"{row_id}.json"


def lock_path(cache_dir: Path, runner: str, row_id: str) -> Path:
    return Path(cache_dir) / "state" / runner / f"{row_id}.lock"


class _StateProblem(Exception):
    pass


def read_state(path: Path, shown: Path) -> tuple[dict[str, Any] | None, str | None]:
    """The state document and None, or None and what is wrong with the file (None, None: there is none)."""
    if not path.exists():
        return None, None
    try:
        data = read_json(path, _StateProblem, shown=str(shown))
    except _StateProblem as exc:
        return None, str(exc)
    if not isinstance(data, dict):
        return None, f"{shown}: expected a JSON object at the top"
    return data, None


def write_state(
    path: Path,
    document: Mapping[str, Any],
    *,
    running: Mapping[str, Any] | None = None,
    stopped: Mapping[str, Any] | None = None,
) -> None:
    marks = {"running": dict(running)} if running else {}
    if stopped:
        marks["stopped"] = dict(stopped)
    write_json_atomic(path, {**document, **marks})


def running_mark(tier: str, pytest_pid: int) -> dict[str, Any]:
    return {"tier": tier, "pid": os.getpid(), "pytest_pid": pytest_pid, "started_at": utc_now()}


def stopped_mark(signal_name: str, doing: str) -> dict[str, Any]:
    return {"signal": signal_name, "doing": doing, "at": utc_now()}


def last_run(partial: Mapping[str, Any]) -> str:
    """What the state file says became of the run that left it, for the log line of the run that resumes it."""
    stopped, running = partial.get("stopped"), partial.get("running")
    if isinstance(stopped, Mapping):
        how = f"{stopped.get('signal')} {stopped.get('doing')}"
        return f"the last run of this row was stopped by {how} ({stopped.get('at')})"
    if isinstance(running, Mapping):
        return (
            f"the last run of this row ended in tier {running.get('tier')} (started {running.get('started_at')}) "
            "without a word: killed (SIGKILL?) or its machine went down"
        )
    return "the last run of this row ended between tiers without a word: killed (SIGKILL?) or its machine went down"


def busy(partial: Mapping[str, Any] | None, lock_shown: Path, row_id: str, runner: str) -> str:
    """Why a run of the row cannot start while another process holds its lock, and what to do about it."""
    running = partial.get("running") if partial is not None else None
    running = running if isinstance(running, Mapping) else {}
    tier, pid, pytest_pid = running.get("tier"), running.get("pid"), running.get("pytest_pid")
    if is_running(pid):
        who = f"another run of row {row_id} on runner {runner} is going (pid {pid}, in tier {tier})"
    elif is_running(pytest_pid):
        who = (
            f"the pytest of tier {tier} (pid {pytest_pid}) that a killed run of row {row_id} on runner {runner} "
            "started is still running"
        )
    else:
        who = (
            f"another process holds the lock of row {row_id} on runner {runner}: a run of the row (installing, "
            "perhaps), or a process that one of its tiers started and that outlived it"
        )
    return f"{lock_shown}: {who}: wait for it to end or stop it, then run again; nothing was run"
