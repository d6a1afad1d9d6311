"""Whole findings parts cached by everything that decides them, so a warm sm75 tier does not import vLLM again.

A part is a function of caovan's own code and of the installed vLLM, torch and Triton files (the tier asks them,
runs nothing random and reads no clock into its verdicts). The key is a digest of caovan's installed package files
and of each distribution's version and ``RECORD`` (pip's list of every installed file with its hash), plus what the
caller adds (e.g. ``--deep``). Any change to either side is another key; a damaged entry is computed again.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from ..jsonfile import write_text_atomic
from ..source_files import files_under
from .kernel_compile import cache_dir

#: The distributions whose files a part depends on.
DISTRIBUTIONS: tuple[str, ...] = ("vllm", "torch", "triton")
#: Bump when a part's meaning changes without a change to caovan's files (never, in principle: kept for safety).
LAYOUT = 1


def caovan_digest(root: Path | None = None) -> str:
    """Digest of every file of the caovan package as imported (its source, wherever it was installed from), data
    files included: caovan's kernel launch configs are JSON."""
    root = root or Path(__file__).resolve().parent.parent
    digest = hashlib.sha256()
    for path in sorted(files_under(root, root), key=lambda p: p.relative_to(root).as_posix()):
        digest.update(path.relative_to(root).as_posix().encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()


def install_digest(distributions: Sequence[str] = DISTRIBUTIONS) -> dict[str, str]:
    """Per distribution: its version and a digest of its RECORD ("absent" when it is not installed)."""
    found = {}
    for name in distributions:
        try:
            dist = importlib.metadata.distribution(name)
        except importlib.metadata.PackageNotFoundError:
            found[name] = "absent"
            continue
        record = dist.read_text("RECORD") or ""
        found[name] = f"{dist.version}:{hashlib.sha256(record.encode()).hexdigest()[:16]}"
    return found


def part_key(name: str, extra: Sequence[Any] = ()) -> str:
    data = [LAYOUT, name, caovan_digest(), install_digest(), list(extra)]
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:32]


def cached_part(name: str, compute: Callable[[], dict[str, Any]], extra: Sequence[Any] = ()) -> tuple[dict, bool]:
    """(the part, whether it came from the cache); ``compute`` runs only when no intact entry has its key."""
    path = cache_dir() / "parts" / f"{name}-{part_key(name, extra)}.json"
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
        if isinstance(document, dict):
            return document, True
    except (OSError, ValueError):
        pass
    document = compute()
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(path, json.dumps(document, sort_keys=True) + "\n")
    return document, False
