"""Launch configurations as data, one entry per GPU architecture: what both kernel packages' ``launch_configs``
do alike (read the JSON file beside them, pick the entry of a GPU). No torch or Triton import."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, Protocol, TypeVar


class ArchEntry(Protocol):
    arch: str
    capability: tuple[int, int]


Entry = TypeVar("Entry", bound=ArchEntry)


def load_arch_entries(path: Path, load_entry: Callable[[str, dict[str, Any]], Entry]) -> dict[str, Entry]:
    """Every entry of ``path`` through ``load_entry(arch, raw)``; a bad one is one ValueError naming file and entry."""
    raw = json.loads(path.read_text(encoding="utf-8"))
    entries = {}
    for arch, entry in raw.items():
        try:
            entries[arch] = load_entry(arch, entry)
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"{path}: entry {arch!r}: {exc}") from None
    return entries


def nearest_lower_entry(entries: Iterable[Entry], wanted: tuple[int, int], what: str) -> Entry:
    """The entry of this compute capability, else of the nearest lower architecture that has one."""
    entries = list(entries)
    candidates = [e for e in entries if tuple(e.capability) <= wanted]
    if not candidates:
        known = ", ".join(sorted(e.arch for e in entries))
        raise ValueError(f"no {what} for sm{wanted[0]}{wanted[1]}: the kernels target sm75 and newer (known: {known})")
    return max(candidates, key=lambda e: tuple(e.capability))
