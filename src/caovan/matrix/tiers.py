"""Running one tier of a row, and turning pytest's exit code + JUnit XML into its outcome.

Outcome rules (the point of a compatibility matrix is that a green cell means something):

* pytest exit 5 (no tests collected/selected) is an ``error``, never a ``pass``;
* exit 2/3/4 or a signal (collection error, interruption, internal or usage error) is an ``error``;
* any failed or erroring test is a ``fail``;
* every test skipped is ``skipped``, with the distinct skip reasons;
* otherwise ``pass`` (some tests may have been skipped; their reasons are kept).
"""

from __future__ import annotations

import collections
import os
import shutil
import subprocess
import sys
import time
import xml.etree.ElementTree as ElementTree
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from ..sm75.findings import FINDINGS_DIR_ENV, read_parts

#: Per-test outcomes recorded in result files.
TEST_OUTCOMES: tuple[str, ...] = ("passed", "failed", "error", "skipped", "xfailed")
#: Tier outcomes in result files; ``not-run``: a row tier this run was told to leave out.
TIER_OUTCOMES: tuple[str, ...] = ("pass", "fail", "skipped", "error", "not-run")
#: Tier outcomes that count as done: a rerun does not repeat them unless asked to redo.
FINAL_TIER_OUTCOMES: frozenset[str] = frozenset({"pass", "fail", "skipped", "error"})

PYTEST_EXIT_MEANINGS: dict[int, str] = {
    2: "pytest was interrupted (exit 2: a collection error or Ctrl-C)",
    3: "pytest hit an internal error (exit 3)",
    4: "pytest was called wrongly (exit 4: usage error)",
    5: ("pytest collected no tests for this tier's marker (exit 5): a tier without tests is an error, never a pass"),
}

OUTPUT_TAIL_LINES = 30
#: Where a tier's tests are collected from: all of tests/, except the sm75 tier, whose tests all live in tests/sm75
#: (a unit test holds every file to that) and which must stay quick on a warm cache: collecting the whole suite to
#: deselect it costs it more than its own tests.
TIER_TEST_PATHS: dict[str, tuple[str, ...]] = {"sm75": ("tests/sm75",)}
DEFAULT_TEST_PATHS: tuple[str, ...] = ("tests",)


@dataclass(frozen=True)
class CaseOutcome:
    nodeid: str
    outcome: str
    duration_s: float
    reason: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "nodeid": self.nodeid,
            "outcome": self.outcome,
            "duration_s": self.duration_s,
            "reason": self.reason,
        }


class JunitError(Exception):
    """The JUnit XML file is missing or unreadable."""


def utc_now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _nodeid(testcase: ElementTree.Element) -> str:
    """pytest's node id from a JUnit testcase (xunit1 carries the file; classname the rest)."""
    name = testcase.get("name", "")
    classname = testcase.get("classname", "")
    file = testcase.get("file")
    if file and file.endswith(".py"):
        module = file[:-3].replace("/", ".").replace("\\", ".")
        if classname == module:
            return f"{file}::{name}"
        if classname.startswith(module + "."):
            return "::".join([file, *classname[len(module) + 1 :].split("."), name])
    return f"{classname}::{name}" if classname else name


def _first_line(text: str | None) -> str | None:
    if not text:
        return None
    return text.strip().splitlines()[0][:300] if text.strip() else None


def parse_junit(path: Path) -> list[CaseOutcome]:
    """Per-test outcomes from pytest JUnit XML (``-o junit_family=xunit1``: each test's file)."""
    try:
        root = ElementTree.parse(path).getroot()
    except FileNotFoundError as exc:
        raise JunitError(f"{path}: JUnit XML was not written") from exc
    except (OSError, ElementTree.ParseError) as exc:
        raise JunitError(f"{path}: unreadable JUnit XML: {exc}") from exc
    outcomes: list[CaseOutcome] = []
    for testcase in root.iter("testcase"):
        try:
            duration = round(float(testcase.get("time", "0")), 3)
        except ValueError:
            duration = 0.0
        failure = testcase.find("failure")
        error = testcase.find("error")
        skipped = testcase.find("skipped")
        if failure is not None:
            outcome, reason = "failed", _first_line(failure.get("message"))
        elif error is not None:
            outcome, reason = "error", _first_line(error.get("message"))
        elif skipped is not None:
            xfail = skipped.get("type") == "pytest.xfail"
            outcome, reason = (
                ("xfailed" if xfail else "skipped"),
                _first_line(skipped.get("message")),
            )
        else:
            outcome, reason = "passed", None
        outcomes.append(CaseOutcome(_nodeid(testcase), outcome, duration, reason))
    return outcomes


def _counts(tests: Sequence[CaseOutcome]) -> dict[str, int]:
    counter = collections.Counter(t.outcome for t in tests)
    return {name: counter.get(name, 0) for name in TEST_OUTCOMES}


def _skip_reasons(tests: Sequence[CaseOutcome]) -> list[dict[str, Any]]:
    counter = collections.Counter((t.reason or "(no reason given)") for t in tests if t.outcome == "skipped")
    return [{"reason": reason, "count": count} for reason, count in sorted(counter.items())]


def _summary(counts: Mapping[str, int]) -> str:
    return ", ".join(f"{n} {name}" for name, n in counts.items() if n) or "no tests"


def classify_tier(
    exit_code: int, tests: Sequence[CaseOutcome] | None, junit_problem: str | None = None
) -> dict[str, Any]:
    """The tier verdict from pytest's exit code and the parsed JUnit tests (None: unreadable).

    Returns ``outcome``, a one-line ``reason``, ``counts`` and ``skip_reasons``.
    """
    parsed = None if tests is None else list(tests)
    tests = parsed or []
    counts = _counts(tests)
    skip_reasons = _skip_reasons(tests)
    verdict: dict[str, Any] = {"counts": counts, "skip_reasons": skip_reasons}
    if exit_code in PYTEST_EXIT_MEANINGS:
        verdict.update(outcome="error", reason=PYTEST_EXIT_MEANINGS[exit_code])
    elif exit_code not in (0, 1):
        verdict.update(outcome="error", reason=f"pytest ended with exit code {exit_code} (killed by a signal?)")
    elif parsed is None:
        verdict.update(outcome="error", reason=f"no per-test results: {junit_problem or 'JUnit XML missing'}")
    elif exit_code == 1 or counts["failed"] or counts["error"]:
        bad = [t.nodeid for t in tests if t.outcome in ("failed", "error")]
        shown = ", ".join(bad[:3]) + (f" (+{len(bad) - 3} more)" if len(bad) > 3 else "")
        reason = f"{_summary(counts)}: {shown}" if bad else f"pytest exit 1 ({_summary(counts)})"
        verdict.update(outcome="fail", reason=reason)
    elif not tests:
        verdict.update(outcome="error", reason="pytest exited 0 but the JUnit XML lists no tests")
    elif counts["skipped"] == len(tests):
        joined = "; ".join(item["reason"] for item in skip_reasons)
        which = "the only test" if len(tests) == 1 else f"all {len(tests)} tests"
        verdict.update(outcome="skipped", reason=f"{which} skipped: {joined}")
    else:
        verdict.update(outcome="pass", reason=_summary(counts))
    return verdict


def _relative_arg(arg: str, cwd: Path) -> str:
    """``--junitxml=/abs/cwd/x.xml`` -> ``--junitxml=x.xml``: records stay machine-neutral."""
    option, sep, value = arg.partition("=")
    if sep and os.path.isabs(value):
        try:
            return f"{option}={Path(value).relative_to(cwd).as_posix()}"
        except ValueError:
            return arg
    return arg


def pytest_command(python: str, tier: str, junit_path: Path, test_paths: Sequence[str]) -> list[str]:
    """pytest restricted to one tier by its marker; xunit1 JUnit so each test carries its file."""
    return [
        python,
        "-m",
        "pytest",
        *test_paths,
        "-m",
        tier,
        f"--junitxml={junit_path}",
        "-o",
        "junit_family=xunit1",
        "-p",
        "no:cacheprovider",
    ]


def run_tier(
    python: str,
    tier: str,
    *,
    junit_path: Path,
    log_path: Path,
    cwd: Path,
    env: Mapping[str, str] | None = None,
    test_paths: Sequence[str] = ("tests",),
    findings_dir: Path | None = None,
    on_start: Callable[[int], None] | None = None,
    pass_fds: Sequence[int] = (),
) -> dict[str, Any]:
    """Run pytest for one tier, output streamed to the console and ``log_path``; its record.

    ``findings_dir``: where the tier's tests write what they found out (``caovan.sm75.findings``); emptied first,
    and whatever parts it holds afterwards become the record's ``findings``. ``on_start`` is called with pytest's
    process id once it started; ``pass_fds`` are descriptors pytest inherits (the row's lock).

    A KeyboardInterrupt (SIGTERM's too, caovan.matrix.row_guard) stops pytest and propagates: the tier is not
    recorded, so a rerun redoes it.
    """
    junit_path.parent.mkdir(parents=True, exist_ok=True)
    log_path.parent.mkdir(parents=True, exist_ok=True)
    junit_path.unlink(missing_ok=True)
    env = dict(env) if env is not None else os.environ.copy()
    if findings_dir is not None:
        shutil.rmtree(findings_dir, ignore_errors=True)  # a part left by an earlier run is not this run's finding
        env[FINDINGS_DIR_ENV] = str(findings_dir)
    command = pytest_command(python, tier, junit_path, test_paths)
    started_at, started = utc_now(), time.monotonic()
    tail: collections.deque[str] = collections.deque(maxlen=OUTPUT_TAIL_LINES)
    with open(log_path, "w", encoding="utf-8") as log:
        process = subprocess.Popen(
            command,
            cwd=cwd,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            errors="replace",
            pass_fds=tuple(pass_fds),
        )
        try:
            if on_start is not None:
                on_start(process.pid)
            assert process.stdout is not None
            for line in process.stdout:
                sys.stdout.write(line)
                sys.stdout.flush()
                log.write(line)
                tail.append(line.rstrip("\n"))
            exit_code = process.wait()
        except BaseException:
            process.terminate()
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
            raise
    duration = round(time.monotonic() - started, 3)
    tests: list[CaseOutcome] | None
    junit_problem = None
    try:
        tests = parse_junit(junit_path)
    except JunitError as exc:
        tests, junit_problem = None, str(exc)
    verdict = classify_tier(exit_code, tests, junit_problem)
    record: dict[str, Any] = {
        "outcome": verdict["outcome"],
        "reason": verdict["reason"],
        "exit_code": exit_code,
        "counts": verdict["counts"],
        "skip_reasons": verdict["skip_reasons"],
        "tests": [t.to_json() for t in tests or ()],
        "command": ["python", *(_relative_arg(arg, cwd) for arg in command[1:])],
        "started_at": started_at,
        "finished_at": utc_now(),
        "duration_s": duration,
    }
    if verdict["outcome"] in ("error", "fail"):
        # The last lines of pytest's output say what broke (collection errors are not in JUnit).
        record["output_tail"] = "\n".join(tail)
    if findings_dir is not None:
        parts, problems = read_parts(findings_dir)
        if parts:
            record["findings"] = parts
        if problems:
            record["findings_problems"] = problems
    return record
