"""One matrix row, start to finish: plan from stored state, prepare the environment, run the tiers,
write the result — shared by ``nox -s matrix(...)`` (a fresh uv venv per row) and
``python -m caovan.matrix run-here`` (the current environment, for GPU hosts without network where the
row's stack is already installed)."""

from __future__ import annotations

import functools
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..jsonfile import output_path_problem
from ..sm75.kernel_compile import CACHE_DIR_ENV as SM75_CACHE_DIR_ENV
from . import MatrixError
from .install_identity import checkout_token, install_identity
from .results import (
    Provenance,
    build_result,
    plan_row,
    read_stored_result,
    result_path,
    write_json_atomic,
)
from .row_guard import row_lock, sigterm_stops_the_run, stop_cause, stop_signal_name
from .row_state import busy, last_run, lock_path, read_state, running_mark, state_path, stopped_mark, write_state
from .schema import MatrixRow
from .tiers import DEFAULT_TEST_PATHS, TIER_TEST_PATHS, run_tier, utc_now


@dataclass(frozen=True)
class Prepared:
    """What ``prepare`` hands back: the interpreter to run pytest with, env facts, install facts."""

    python: str
    env_facts: dict[str, Any]
    install: dict[str, Any]
    run_env: Mapping[str, str] | None = None


@dataclass
class RowRunOutcome:
    result_file: Path
    document: dict[str, Any] | None  # None: nothing to do, the stored result is current
    bad_tiers: list[str] = field(default_factory=list)


def run_row(
    row: MatrixRow,
    provenance: Provenance,
    *,
    runner: str,
    selected_tiers: Sequence[str] | None,
    redo: bool,
    root: Path,
    results_dir: Path,
    cache_dir: Path,
    prepare: Callable[[], Prepared],
    log: Callable[[str], None],
    install_note: Mapping[str, Any] | None = None,
) -> RowRunOutcome:
    """Plan, run and write one row. A KeyboardInterrupt, or SIGTERM (:class:`~caovan.matrix.row_guard.RunStopped`),
    is logged in one line saying what is kept and how to go on, then propagates: the result file is only ever
    replaced whole, at the end, and the state file keeps the tiers finished so far (caovan.matrix.row_state)."""
    result_file = result_path(results_dir, runner, row.id)
    state_file = state_path(cache_dir, runner, row.id)
    lock_file = lock_path(cache_dir, runner, row.id)
    busy_reason = functools.partial(_busy, state_file, lock_file, root, row.id, runner)
    # The lock first: what is left of a killed run (a pytest that outlived it) must not run beside this one.
    with sigterm_stops_the_run(), row_lock(lock_file, _shown(lock_file, root), busy_reason) as lock_fd:
        return _run_locked(
            row, provenance, runner=runner, selected_tiers=selected_tiers, redo=redo, root=root,
            result_file=result_file, state_file=state_file, cache_dir=cache_dir, prepare=prepare, log=log,
            install_note=install_note, lock_fd=lock_fd,
        )  # fmt: skip


def _busy(state_file: Path, lock_file: Path, root: Path, row_id: str, runner: str) -> str:
    partial, _ = read_state(state_file, _shown(state_file, root))
    return busy(partial, _shown(lock_file, root), row_id, runner)


def _run_locked(
    row: MatrixRow,
    provenance: Provenance,
    *,
    runner: str,
    selected_tiers: Sequence[str] | None,
    redo: bool,
    root: Path,
    result_file: Path,
    state_file: Path,
    cache_dir: Path,
    prepare: Callable[[], Prepared],
    log: Callable[[str], None],
    install_note: Mapping[str, Any] | None,
    lock_fd: int,
) -> RowRunOutcome:
    progress = _Progress()
    shown, state_shown = _shown(result_file, root), _shown(state_file, root)
    try:
        # Only a run that holds the row's lock writes these files: a temp file still there was left by a killed one.
        for path in (result_file, state_file):
            for leftover in path.parent.glob(f".{path.name}.*.tmp"):
                leftover.unlink(missing_ok=True)
        # Before the install, which takes minutes: a broken result file stops the run (results.read_stored_result).
        stored = read_stored_result(result_file, str(shown))
        partial, state_problem = read_state(state_file, state_shown)
        if state_problem is not None:
            log(f"{state_problem}: not resumed, its tiers run again")
        # The install comes first: whether a stored result still holds depends on what this host installed
        # (caovan.matrix.install_identity), and a row's venv is only known once it is built.
        progress.doing = "while preparing the environment"
        clock = time.monotonic()
        prepared = prepare()
        identity = install_identity(checkout_token(cache_dir), prepared.python, prepared.env_facts)
        install: dict[str, Any] = {**(install_note or {}), **prepared.install, "identity": identity}
        install_duration_s = round(time.monotonic() - clock, 1)
        env = prepared.env_facts
        progress.doing = "before any tier ran"
        log(
            f"envinfo: vllm {env.get('vllm')}, torch {env.get('torch')} "
            f"(CUDA {env.get('torch_cuda')}), triton {env.get('triton')}, "
            f"gpu {env.get('gpu')} {env.get('gpu_arch') or ''}, "
            f"family {env.get('family')} ({env.get('family_reason')}); install identity {identity}"
        )
        plan = plan_row(
            row,
            provenance,
            selected_tiers=selected_tiers,
            stored=stored,
            partial=partial,
            redo=redo,
            install=install,
        )
        if plan.ignored:
            log(f"tiers {', '.join(plan.ignored)}: not in this row, ignored")
        if plan.up_to_date:
            log(
                f"{shown} is current for tiers {', '.join(plan.selected)}: nothing to do "
                "(-- --redo or CAOVAN_REDO=1 runs it again)"
            )
            return RowRunOutcome(result_file, None)
        if plan.resumes_partial:
            assert partial is not None
            log(f"{last_run(partial)}: this run goes on from {state_shown}")
        resumed = [t for t in plan.reused if t in plan.selected]
        if resumed:
            log(f"resuming: tiers {', '.join(resumed)} already done with this checkout, kept")
        others = [t for t in plan.reused if t not in plan.selected]
        if others:
            log(f"tiers {', '.join(others)}: not selected, their stored results (this row, this checkout) are kept")
        for why in dict.fromkeys(plan.not_kept.values()):
            rerun = [t for t, w in plan.not_kept.items() if w == why and t in plan.to_run]
            dropped = [t for t, w in plan.not_kept.items() if w == why and t not in plan.to_run]
            if rerun:
                log(f"tiers {', '.join(rerun)}: stored results not reused, {why}: run again")
            if dropped:
                log(f"tiers {', '.join(dropped)}: stored results not kept, {why}: recorded as not run")

        # Before tiers that may take hours: a run that cannot write its result at the end has run for nothing.
        problem = _result_file_problem(result_file, root)
        if problem is not None:
            raise MatrixError(f"{shown}: cannot write the result there: {problem}; nothing was run")

        started_at = (partial or {}).get("started_at") if plan.resumes_partial else None
        started_at = started_at or utc_now()
        tiers: dict[str, dict] = dict(plan.reused)
        install["duration_s"] = install_duration_s
        selected = list(plan.selected)

        def document(complete: bool) -> dict[str, Any]:
            return build_result(
                row, provenance, runner=runner, env=env, tiers=tiers, selected=selected,
                started_at=started_at, finished_at=utc_now(), complete=complete, install=install,
            )  # fmt: skip

        progress.partial_document = lambda: document(False)
        # Compile outcomes of the sm75 tier are the same for every row of one Triton: one cache for all rows.
        run_env = dict(prepared.run_env) if prepared.run_env is not None else dict(os.environ)
        run_env.setdefault(SM75_CACHE_DIR_ENV, str(cache_dir / "sm75-compile-cache"))
        if plan.to_run:
            write_state(state_file, document(False))
            progress.state_written = True
            for number, tier in enumerate(plan.to_run, start=1):
                progress.doing = f"in tier {tier}"
                log(f"tier {number}/{len(plan.to_run)} {tier}: pytest tests -m {tier}")

                def mark_running(pytest_pid: int, tier: str = tier) -> None:
                    write_state(state_file, document(False), running=running_mark(tier, pytest_pid))

                tiers[tier] = run_tier(
                    prepared.python,
                    tier,
                    junit_path=cache_dir / "junit" / runner / row.id / f"{tier}.xml",
                    log_path=cache_dir / "logs" / runner / row.id / f"{tier}.log",
                    cwd=root,
                    env=run_env,
                    findings_dir=cache_dir / "findings" / runner / row.id / tier,
                    test_paths=TIER_TEST_PATHS.get(tier, DEFAULT_TEST_PATHS),
                    on_start=mark_running,
                    pass_fds=(lock_fd,),
                )
                log(f"tier {tier}: {tiers[tier]['outcome']} — {tiers[tier]['reason']}")
                write_state(state_file, document(False))
                progress.finished.append(tier)

        progress.doing = "while writing the result"
        final = document(True)
        try:
            write_json_atomic(result_file, final)
        except OSError as exc:  # a disk that filled up during the run: the state file has every finished tier
            if progress.finished:
                how = progress.kept(state_shown, redo=redo, what="writes it without running them again")
            else:
                how = "no tier ran in this run, the same command tries again"
            raise MatrixError(f"{shown}: cannot write the result: {exc.strerror or exc}; {how}") from None
        progress.result_written = True
        state_file.unlink(missing_ok=True)
        summary = ", ".join(f"{tier} {record['outcome']}" for tier, record in final["tiers"].items())
        log(f"wrote {shown}: {summary}")
        bad = [t for t in plan.selected if final["tiers"][t]["outcome"] in ("fail", "error")]
        return RowRunOutcome(result_file, final, bad)
    except KeyboardInterrupt as exc:
        if progress.state_written and not progress.result_written and progress.partial_document is not None:
            # The state file says how the run was cut (a SIGKILL leaves its "running" mark instead).
            stopped = stopped_mark(stop_signal_name(exc), progress.doing)
            try:
                write_state(state_file, progress.partial_document(), stopped=stopped)
            except OSError:
                pass  # the state of the last finished tier stays: the restart resumes from it all the same
        log(progress.interrupted(stop_cause(exc), result_file, root, state_shown, redo=redo))
        raise


def _result_file_problem(result_file: Path, root: Path) -> str | None:
    """Why ``result_file`` cannot be written (its runner folder is made here if missing); None if it can."""
    try:
        result_file.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        return f"{exc.strerror or exc}: {_shown(result_file.parent, root)}"
    problem = output_path_problem("", str(result_file))
    return None if problem is None else problem.removeprefix(f" {result_file}: ")


def _shown(path: Path, root: Path) -> Path:
    return path.relative_to(root) if path.is_relative_to(root) else path


@dataclass
class _Progress:
    """How far a row's run got, for the line an interruption prints."""

    doing: str = "before any tier ran"
    finished: list[str] = field(default_factory=list)
    state_written: bool = False
    result_written: bool = False
    #: The state document of the tiers finished so far, once the run has planned them.
    partial_document: Callable[[], dict[str, Any]] | None = None

    def interrupted(self, cause: str, result_file: Path, root: Path, state_shown: Path, *, redo: bool) -> str:
        """The line a stopped run ends with; ``cause``: how it was stopped (``interrupted``, ``stopped by SIGTERM``)."""
        result_shown = _shown(result_file, root)
        if self.result_written:
            return f"{cause} after {result_shown} was written: nothing is lost"
        if result_file.exists():
            head = f"{cause} {self.doing}: {result_shown} is unchanged"
        else:
            head = f"{cause} {self.doing}: no {result_shown} written"
        if not self.finished:
            return f"{head}; no tier finished in this run, so the same command runs its tiers again"
        return f"{head}; {self.kept(state_shown, redo=redo, what='resumes after them')}"

    def kept(self, state_shown: Path, *, redo: bool, what: str) -> str:
        """Where the finished tiers are kept and the command that goes on from them (``what`` it does)."""
        if redo:
            # A redo does not resume: it reruns every selected tier.
            how = f"the same command without --redo {what} (with --redo it starts them over)"
        else:
            how = f"the same command {what}"
        return f"tiers {', '.join(self.finished)} finished and are kept in {state_shown}: {how}"
