"""The files of a source tree that decide what it does: every file but build and cache litter.

Shared by the matrix's source fingerprint (:mod:`caovan.matrix.fingerprint`) and the sm75 tier's part cache
(:mod:`caovan.sm75.part_cache`): two identical trees give the same list whoever compiled or tested them.
"""

from __future__ import annotations

from pathlib import Path

#: Build/cache litter that must not make two identical checkouts look different.
IGNORED_DIR_NAMES: frozenset[str] = frozenset({"__pycache__", ".pytest_cache", ".ruff_cache", ".mypy_cache"})
IGNORED_SUFFIXES: tuple[str, ...] = (".pyc", ".pyo")


def files_under(folder: Path, relative_to: Path) -> list[Path]:
    """The files under ``folder`` that count, without build/cache litter."""
    files: list[Path] = []
    for candidate in folder.rglob("*"):
        relative_parts = candidate.relative_to(relative_to).parts
        if any(part in IGNORED_DIR_NAMES or part.endswith(".egg-info") for part in relative_parts):
            continue
        if candidate.is_file() and not candidate.name.endswith(IGNORED_SUFFIXES):
            files.append(candidate)
    return files
