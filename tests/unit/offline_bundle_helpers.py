"""Helpers of the tests of tools/run-gpu-row-offline.sh and tools/run-gpu-e2e-offline.sh: a stand-in plugin wheel
and a ``python3`` on PATH that is a shell script."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path


def make_wheel(folder: Path, init_text: str) -> Path:
    """A minimal plugin wheel whose caovan package is one __init__.py."""
    folder.mkdir(parents=True, exist_ok=True)
    wheel = folder / "caovan_vllm_sm75_turbo3-0.1.0-py3-none-any.whl"
    info = "caovan_vllm_sm75_turbo3-0.1.0.dist-info"
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr("caovan/__init__.py", init_text)
        archive.writestr(f"{info}/METADATA", "Metadata-Version: 2.1\nName: caovan-vllm-sm75-turbo3\nVersion: 0.1.0\n")
        archive.writestr(
            f"{info}/WHEEL", "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
        )
        archive.writestr(f"{info}/RECORD", "")
    return wheel


def python_with_pip() -> str | None:
    """A python3 that has pip: the script installs with `python3 -m pip`, and a uv venv (nox) has no pip."""
    for candidate in (shutil.which("python3"), "/usr/bin/python3", "/usr/local/bin/python3", sys.executable):
        if candidate and Path(candidate).exists():
            probe = subprocess.run([candidate, "-m", "pip", "--version"], capture_output=True, check=False)
            if probe.returncode == 0:
                return candidate
    return None


def shim_python(tmp_path: Path, body: str) -> dict[str, str]:
    """PATH with a `python3` that is this shell script (argument handling in ``body``), then the real one."""
    shim = tmp_path / "shim"
    shim.mkdir()
    script = shim / "python3"
    script.write_text(f"#!/bin/sh\n{body}\n")
    script.chmod(0o755)
    return {"PATH": f"{shim}{os.pathsep}{os.environ['PATH']}"}
