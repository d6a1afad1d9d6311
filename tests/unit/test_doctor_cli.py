"""CPU tests of ``caovan doctor``: stdout holds the report alone, one verdict, discovery and cache checks."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from caovan.cli._streams import stdout_to_stderr

SRC = Path(__file__).resolve().parents[2] / "src"


def _caovan(*argv: str, **env: str) -> subprocess.CompletedProcess[str]:
    environ = {**os.environ, "PYTHONPATH": str(SRC), **env}
    return subprocess.run(
        [sys.executable, "-m", "caovan", *argv], capture_output=True, text=True, env=environ, timeout=300
    )


def test_doctor_json_stdout_is_the_json_alone():
    # vLLM logs to stdout on import (Transformers v4, Triton driver, vllm._C lines): none of it may land there.
    done = _caovan("doctor", "--json")
    facts = json.loads(done.stdout)
    assert facts["plugin"]["name"] == "caovan_sm75_turbo3"
    assert done.returncode == (0 if facts["ok"] else 1)


def test_stdout_to_stderr_moves_python_and_fd_writes(tmp_path):
    script = (
        "import os, sys\n"
        "from caovan.cli._streams import stdout_to_stderr\n"
        "held = sys.stdout\n"
        "print('before')\n"
        "with stdout_to_stderr():\n"
        "    print('python')\n"
        "    held.write('held object\\n')\n"
        "    os.write(1, b'fd one\\n')\n"
        "print('after')\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(SRC)}
    )
    assert done.stdout == "before\nafter\n"
    assert sorted(done.stderr.splitlines()) == ["fd one", "held object", "python"]


def test_stdout_to_stderr_restores_stdout(capsys):
    with stdout_to_stderr():
        print("inside")
    print("outside")
    captured = capsys.readouterr()
    assert captured.out == "outside\n" and captured.err == "inside\n"
