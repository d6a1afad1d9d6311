"""GPU hosts whose software is fixed, and which matrix rows can run their GPU tiers there.

A lent GPU without network (the H200 this project borrows) comes with its own torch: a row that pins another torch
release cannot run its kernel and serve tiers there, whatever the bundle holds. ``matrix/hosts/*.yaml`` names such
hosts (``runner``: the slug their results are filed under, ``gpu``, and the host's ``torch`` and ``python``);
``nox -s compat`` then says, under the table, for every row and host, whether the GPU tiers ran (its line in the
table), could run and have not yet, or cannot run, and why. Without the file that list would be silence, and silence
reads as "not tried".
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from packaging.version import InvalidVersion, Version

from . import MatrixError
from .schema import MatrixRow

#: Where the host files live, beside the matrix files (a subfolder: ``matrix/*.yaml`` are rows).
HOSTS_FOLDER = "hosts"
_FIELDS = ("runner", "gpu", "torch", "python")


@dataclass(frozen=True)
class FixedHost:
    runner: str
    gpu: str
    torch: str
    python: str

    def can_run(self, row: MatrixRow) -> bool:
        """Whether the row's torch pin is the host's own torch (a local build tag such as +cu130 aside)."""
        return Version(row.torch).public == Version(self.torch).public


def load_hosts(matrix_dir: Path, shown: str = "matrix") -> list[FixedHost]:
    """The hosts of ``matrix_dir/hosts/*.yaml`` (none when the folder is absent); every problem in one error."""
    folder = Path(matrix_dir) / HOSTS_FOLDER
    if not folder.is_dir():
        return []
    errors: list[str] = []
    hosts: list[FixedHost] = []
    for path in sorted(p for p in folder.iterdir() if p.suffix in (".yaml", ".yml")):
        where = f"{shown}/{HOSTS_FOLDER}/{path.name}"
        try:
            data = yaml.safe_load(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
            errors.append(f"{where}: cannot read it: {exc}")
            continue
        entries = data.get("hosts") if isinstance(data, dict) else None
        if not isinstance(entries, list) or not entries:
            errors.append(f"{where}: expected a non-empty list under 'hosts:'")
            continue
        for index, entry in enumerate(entries):
            host = _host(entry, f"{where}: host {index + 1}", errors)
            if host is not None:
                hosts.append(host)
    runners = [h.runner for h in hosts]
    errors += [
        f"{shown}/{HOSTS_FOLDER}: runner {r!r} is listed twice" for r in sorted(set(runners)) if runners.count(r) > 1
    ]
    if errors:
        raise MatrixError(errors)
    return hosts


def _host(entry: Any, where: str, errors: list[str]) -> FixedHost | None:
    if not isinstance(entry, dict):
        errors.append(f"{where}: expected a mapping with {', '.join(_FIELDS)}")
        return None
    before = len(errors)
    unknown = sorted(set(map(str, entry)) - set(_FIELDS))
    if unknown:
        errors.append(f"{where}: unknown field(s) {', '.join(unknown)} (known: {', '.join(_FIELDS)})")
    for name in _FIELDS:
        if not isinstance(entry.get(name), str) or not entry[name].strip():
            errors.append(f"{where}: field {name!r}: expected a non-empty string, got {entry.get(name)!r}")
    if len(errors) == before:
        try:
            Version(entry["torch"])
        except InvalidVersion:
            errors.append(f"{where}: field 'torch': {entry['torch']!r} is not a version")
    return FixedHost(**{name: entry[name] for name in _FIELDS}) if len(errors) == before else None


def render_gpu_coverage(hosts: Sequence[FixedHost], rows: Mapping[str, MatrixRow], ran: set[tuple[str, str]]) -> str:
    """Per host: the rows whose GPU tiers ran there, those that could and have not yet, and those that cannot, with
    the torch each pins. ``ran``: (runner, row id) of every result file. Empty without hosts."""
    if not hosts:
        return ""
    lines = ["GPU tiers on the hosts with fixed software (`matrix/hosts/`), row by row:", ""]
    ordered = sorted(rows.values(), key=lambda row: Version(row.vllm), reverse=True)
    for host in hosts:
        done = [row.id for row in ordered if (host.runner, row.id) in ran]
        waiting = [row.id for row in ordered if (host.runner, row.id) not in ran and host.can_run(row)]
        cannot = [row for row in ordered if (host.runner, row.id) not in ran and not host.can_run(row)]
        lines.append(f"- **{host.runner}** ({host.gpu}; torch {host.torch}, Python {host.python}):")
        lines.append(f"  - ran (their lines in the table): {_ids(done)}")
        if waiting:
            lines.append(f"  - not run yet (they pin the host's torch): {_ids(waiting)}")
        if cannot:
            pins = ", ".join(f"`{row.id}` ({row.torch})" for row in cannot)
            lines.append(f"  - not run, as they cannot run there (they pin a torch other than {host.torch}): {pins}")
    return "\n".join(lines)


def _ids(ids: Sequence[str]) -> str:
    return ", ".join(f"`{row_id}`" for row_id in ids) if ids else "none"
