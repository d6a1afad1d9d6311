"""A stdout that cannot be written (a full disk) is one error line and exit 74, whatever the command."""

from __future__ import annotations

import errno
import os
import subprocess
import sys
from pathlib import Path

import pytest

from caovan import cli
from caovan.cli import EXIT_STDOUT_ERROR

ROOT = Path(__file__).resolve().parents[2]
RECORD = ROOT / "docs" / "bench" / "bench-kernels-h200.json"


class _FullDisk:
    """A stdout whose writes fail as a file on a full disk does."""

    def write(self, text):
        raise OSError(errno.ENOSPC, "No space left on device")

    def flush(self):
        pass

    def fileno(self):
        return os.open(os.devnull, os.O_WRONLY)


def test_stdout_on_a_full_disk_is_one_line_and_74(monkeypatch, capsys):
    monkeypatch.setattr(sys, "stdout", _FullDisk())
    assert cli.main(["bench", "summary", str(RECORD)]) == EXIT_STDOUT_ERROR
    assert capsys.readouterr().err == "caovan: error: cannot write to standard output: No space left on device\n"
    assert isinstance(sys.stdout, _FullDisk)  # the command's guard is gone once it returns


def test_a_commands_own_file_error_is_not_taken_for_stdout(tmp_path, capsys):
    # summary reads its record: a folder given as the record is the command's own error (exit 2), not stdout's.
    assert cli.main(["bench", "summary", str(tmp_path)]) == 2
    assert "standard output" not in capsys.readouterr().err


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="no /dev/full on this system to fill stdout with")
def test_redirect_to_dev_full_ends_with_one_line():
    with open("/dev/full", "w") as full:
        child = subprocess.run(
            [sys.executable, "-m", "caovan", "bench", "summary", str(RECORD)],
            stdout=full,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONPATH": str(ROOT / "src")},
            timeout=120,
        )
    assert child.returncode == EXIT_STDOUT_ERROR
    assert child.stderr == "caovan: error: cannot write to standard output: No space left on device\n"
