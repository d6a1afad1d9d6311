"""A command's error is said once where the user reads it, under the name the user typed (issue 32, defect 7).

``caovan warmup`` and ``caovan verify`` end every failure with a verdict line on stdout that a gate greps
(``[Caovan] warmup=FAIL reason=...``) and carries the message; they also printed ``caovan warmup: error: ...`` on
stderr, so a terminal showed the message twice, and the alias ``caovan-sm75-warmup`` called itself ``caovan warmup``.
"""

from __future__ import annotations

import os
import pty
import subprocess
import sys
from pathlib import Path

import pytest

from caovan import cli
from caovan.cli import _streams

ROOT = Path(__file__).resolve().parents[2]
MESSAGE = "--api-base 'ftp://x': expected an http:// or https:// URL, e.g. http://127.0.0.1:8000"
VERDICT = f"[Caovan] warmup=FAIL reason={MESSAGE}"
#: The alias as its console script runs it (``caovan-sm75-warmup``), and the command under ``caovan``.
ALIAS = [sys.executable, "-c", "import sys; from caovan.cli import warmup_alias; sys.exit(warmup_alias())"]
COMMAND = [sys.executable, "-m", "caovan", "warmup"]
ENV = {**os.environ, "PYTHONPATH": str(ROOT / "src")}


def _run(argv: list[str], **streams) -> subprocess.CompletedProcess:
    return subprocess.run([*argv, "--api-base", "ftp://x"], env=ENV, timeout=120, text=True, **streams)


def test_on_a_terminal_the_error_is_one_line():
    main, child_end = pty.openpty()
    try:
        child = subprocess.Popen([*ALIAS, "--api-base", "ftp://x"], stdout=child_end, stderr=child_end, env=ENV)
        os.close(child_end)
        output = b""
        while True:
            try:
                chunk = os.read(main, 4096)
            except OSError:  # EIO: the child closed the terminal
                break
            if not chunk:
                break
            output += chunk
        assert child.wait(timeout=120) == 2
    finally:
        os.close(main)
    assert output.decode().splitlines() == [VERDICT]


def test_with_stderr_into_stdout_the_error_is_one_line():
    child = _run(ALIAS, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    assert child.returncode == 2 and child.stdout == VERDICT + "\n"


@pytest.mark.parametrize(("argv", "name"), [(ALIAS, "caovan-sm75-warmup"), (COMMAND, "caovan warmup")])
def test_with_stdout_elsewhere_stderr_says_it_under_the_name_typed(argv, name):
    child = _run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert child.returncode == 2
    assert child.stdout == VERDICT + "\n"  # the gate's line, whatever stderr is
    assert child.stderr == f"{name}: error: {MESSAGE}\n"


@pytest.mark.parametrize("shared", [False, True])
def test_verify_says_its_error_once_under_the_alias(monkeypatch, capsys, shared):
    monkeypatch.setattr(_streams, "same_destination", lambda first, second: shared)
    assert cli.verify_alias(["--launch-config", "nope"]) == 2
    out, err = capsys.readouterr()
    assert len(out.splitlines()) == 1 and out.startswith("[Caovan] verify=FAIL (not run: --launch-config 'nope': ")
    message = out.removeprefix("[Caovan] verify=FAIL (not run: ").rstrip().removesuffix(")")
    assert err == ("" if shared else f"caovan-sm75-verify: error: {message}\n")


@pytest.mark.parametrize(
    ("entry", "argv", "name"),
    [
        (cli.benchmark_alias, ["--api-base", "ftp://x"], "caovan-sm75-benchmark"),
        (cli.serve_alias, ["M", "--caovan-mpt", "2"], "caovan-vllm-serve"),
        (lambda argv: cli.main(["serve", *argv]), ["M", "--caovan-mpt", "2"], "caovan serve"),
    ],
)
def test_other_commands_name_themselves_as_typed(entry, argv, name, capsys):
    assert entry(argv) == 2
    assert capsys.readouterr().err.startswith(f"{name}: error: ")


def test_same_destination(tmp_path):
    with open(tmp_path / "a", "w") as a, open(tmp_path / "a", "a") as again, open(tmp_path / "b", "w") as b:
        assert _streams.same_destination(a, again) and not _streams.same_destination(a, b)
    assert not _streams.same_destination(None, sys.stderr)  # stdout closed (>&-)
