"""What a result came from: the plugin version and a hash of the sources that decide outcomes.

A stored result is *current* when its row fingerprint, plugin version and source fingerprint all
equal the ones of the checkout at hand; ``nox -s matrix`` then skips that row (see
:func:`caovan.matrix.results.is_current`).
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

from ..source_files import files_under
from . import MatrixError

#: What the source fingerprint covers: plugin code, the tests that judge it, packaging metadata.
SOURCE_PATHS: tuple[str, ...] = ("src", "tests", "pyproject.toml")

_VERSION_PATTERN = re.compile(r"""^__version__\s*=\s*["']([^"']+)["']""", re.MULTILINE)


def _source_files(root: Path) -> list[Path]:
    files: list[Path] = []
    for name in SOURCE_PATHS:
        path = root / name
        if path.is_file():
            files.append(path)
        elif path.is_dir():
            files.extend(files_under(path, root))
    return sorted(files, key=lambda p: p.relative_to(root).as_posix())


def package_difference(installed: Path, source: Path) -> str | None:
    """The first file (by relative path) in which the package folder ``installed`` differs from
    ``source``, saying how; None when their files are byte-identical.

    Compiled files and caches do not count (an install compiles them, a checkout collects them); every
    other file does, as in :func:`source_fingerprint`, and a wheel built from ``source`` carries them all.
    """
    installed_files = {p.relative_to(installed).as_posix(): p for p in files_under(installed, installed)}
    source_files = {p.relative_to(source).as_posix(): p for p in files_under(source, source)}
    for name in sorted(installed_files.keys() | source_files.keys()):
        if name not in installed_files:
            return f"{name} is missing from {installed}"
        if name not in source_files:
            return f"{name} is not in {source}"
        if installed_files[name].read_bytes() != source_files[name].read_bytes():
            return f"{name} differs"
    return None


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
