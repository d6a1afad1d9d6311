"""The ``sm75`` tier's findings: each part of the tier writes one JSON document, the matrix reads them back.

The tier is a pytest run like every tier (its tests pass when the question was answered, whatever the answer);
what it found out about the row's vLLM on a 7.5 device is data, not a test outcome, so each part writes it
through :func:`write_part` into the folder ``CAOVAN_TIER_FINDINGS_DIR`` names (set by
``caovan.matrix.tiers.run_tier``), and :func:`read_parts` gathers them into the tier's record as ``findings``.
Outside a matrix run (``nox -s tests``) the variable is unset and nothing is written.

Parts (each its own module and tests):

* ``kernels``  — :mod:`caovan.sm75.kernel_verdicts`: every Triton kernel the row's GDN layer launches, compiled
  for sm_75 with the row's Triton.
* ``vllm``     — :mod:`caovan.sm75.vllm_decisions`: what the row's vLLM decides for a 7.5 device.
* ``binaries`` — :mod:`caovan.sm75.binaries`: whether the row's compiled extensions carry sm_75 code.
* ``cudagraph`` — ``caovan.adapters.registry.installed_full_graph_safety``: whether FULL CUDA graphs are safe with
  MTP on this vLLM, caovan on and off.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

from ..jsonfile import write_text_atomic

#: The folder a tier's parts are written to (one ``<part>.json`` each).
FINDINGS_DIR_ENV = "CAOVAN_TIER_FINDINGS_DIR"
#: The parts of the sm75 tier, in the order the table and docs/sm75.md read them.
PARTS: tuple[str, ...] = ("kernels", "vllm", "binaries", "cudagraph")
_PART_NAME = re.compile(r"^[a-z][a-z0-9_]{0,31}\Z")


def findings_dir(environ: os._Environ[str] | dict[str, str] | None = None) -> Path | None:
    """The folder this tier run writes its parts to; None outside a matrix tier run."""
    value = (os.environ if environ is None else environ).get(FINDINGS_DIR_ENV, "")
    return Path(value) if value else None


def write_part(part: str, document: dict[str, Any], *, folder: Path | None = None) -> Path | None:
    """Write one part whole (temp file + rename); None when no folder is set (not a matrix run)."""
    if not _PART_NAME.match(part):
        raise ValueError(f"findings part name {part!r}: lowercase letters, digits and '_' only")
    folder = folder if folder is not None else findings_dir()
    if folder is None:
        return None
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{part}.json"
    write_text_atomic(path, json.dumps(document, indent=2, sort_keys=True, ensure_ascii=False) + "\n")
    return path


def read_parts(folder: Path) -> tuple[dict[str, Any], list[str]]:
    """(parts by name, problems): every ``<part>.json`` of ``folder``; an unreadable one is a problem, not a part."""
    parts: dict[str, Any] = {}
    problems: list[str] = []
    if not folder.is_dir():
        return parts, problems
    for path in sorted(folder.glob("*.json")):
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            problems.append(f"{path.name}: unreadable findings part: {exc}")
            continue
        if not isinstance(data, dict):
            problems.append(f"{path.name}: a findings part must be a JSON object, got {type(data).__name__}")
            continue
        parts[path.stem] = data
    return parts, problems
