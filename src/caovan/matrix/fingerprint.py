"""What a result came from: the plugin version and a hash of the sources that decide outcomes.

A stored result is *current* when its row fingerprint, plugin version and source fingerprint all
equal the ones of the checkout at hand; ``nox -s matrix`` then skips that row (see
:func:`caovan.matrix.results.is_current`).
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

from . import MatrixError

#: What the source fingerprint covers: plugin code, the tests that judge it, packaging metadata.
SOURCE_PATHS: tuple[str, ...] = ("src", "tests", "pyproject.toml")
#: Build/cache litter that must not make two identical checkouts look different.
IGNORED_DIR_NAMES: frozenset[str] = frozenset({"__pycache__", ".pytest_cache", ".ruff_cache", ".mypy_cache"})
IGNORED_SUFFIXES: tuple[str, ...] = (".pyc", ".pyo")

_VERSION_PATTERN = re.compile(r"""^__version__\s*=\s*["']([^"']+)["']""", re.MULTILINE)


def _source_files(root: Path) -> list[Path]:
    files: list[Path] = []
    for name in SOURCE_PATHS:
        path = root / name
        if path.is_file():
            files.append(path)
        elif path.is_dir():
            for candidate in path.rglob("*"):
                relative_parts = candidate.relative_to(root).parts
                if any(part in IGNORED_DIR_NAMES or part.endswith(".egg-info") for part in relative_parts):
                    continue
                if candidate.is_file() and not candidate.name.endswith(IGNORED_SUFFIXES):
                    files.append(candidate)
    return sorted(files, key=lambda p: p.relative_to(root).as_posix())


def source_fingerprint(root: Path) -> str:
    """sha256 (16 hex digits) over relative path + content of each file in :data:`SOURCE_PATHS`."""
    root = Path(root)
    if not (root / "pyproject.toml").is_file():
        raise MatrixError(f"{root}: not a project root (no pyproject.toml)")
    digest = hashlib.sha256()
    for path in _source_files(root):
        digest.update(path.relative_to(root).as_posix().encode())
        digest.update(b"\0")
        digest.update(hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()[:16]


def plugin_version(root: Path) -> str:
    """``__version__`` of ``src/caovan/__init__.py``, read as text (hatch reads it the same way)."""
    init = Path(root) / "src" / "caovan" / "__init__.py"
    try:
        match = _VERSION_PATTERN.search(init.read_text(encoding="utf-8"))
    except OSError as exc:
        raise MatrixError(f"{init}: cannot read the plugin version: {exc.strerror or exc}") from exc
    if match is None:
        raise MatrixError(f'{init}: no line `__version__ = "..."`')
    return match.group(1)
