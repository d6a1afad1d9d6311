"""Run an interpreter script in a child process and read back its JSON results.

Why a child: ``triton.jit`` reads TRITON_INTERPRET when a kernel is decorated (at import of its module, triton
3.6), so the variable must be set before any kernel module is imported, and setting it in the pytest process would
turn every other Triton test of the session (GPU tiers, the sm_75 gate) into interpreter runs.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

#: Long enough for every scenario of a suite on a 2-core CI machine.
CHILD_TIMEOUT_S = 900


def run_interpreter_child(script: Path, out: Path, *args: str) -> tuple[dict, int, str]:
    """(results by scenario id, exit status, the last 6000 characters of the child's output).

    The script gets ``--out OUT`` and ``args``; it must rewrite OUT after every scenario, so that a crash still
    leaves the results it had.
    """
    env = dict(os.environ)
    env["TRITON_INTERPRET"] = "1"
    env["CUDA_VISIBLE_DEVICES"] = ""  # vLLM imports without a GPU only with this set
    # The child must import the same caovan/vLLM/helpers as this process, however they were put on the path.
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    proc = subprocess.run(
        [sys.executable, str(script), "--out", str(out), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=CHILD_TIMEOUT_S,
    )
    results = json.loads(out.read_text()) if out.exists() else {}
    return results, proc.returncode, (proc.stdout + "\n" + proc.stderr)[-6000:]


def load_cases_module(path: Path, name: str) -> ModuleType:
    """Import an interpreter cases script (a file beside its tests, not a package module) under ``name``."""
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses resolve their module through sys.modules
    spec.loader.exec_module(module)
    return module
