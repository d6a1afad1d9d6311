"""The ``overrides`` field of a matrix row: pins that replace one of the release's own.

A release may pin a dependency that the package index a runner reaches does not serve (vLLM 0.34.0 pins
``flashinfer-python==0.7.3``; the index has 0.7.2.post1 and 0.7.4). ``extra_requirements`` cannot help there: a second
pin of the same package contradicts the release's, and the resolver gives up. An override is handed to
``uv pip install --override``, which replaces every requirement on that package; the row's spec (and so every result
file) records it with its reason, and ``docs/compat.md`` notes it on the row.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

OVERRIDE_KEYS: tuple[str, ...] = ("requirement", "reason")


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


@dataclass(frozen=True)
class PinOverride:
    """A pin that replaces whatever the row's packages ask for of that distribution (``uv pip install --override``):
    for a release whose own pin the package index does not serve. Recorded in the result, noted in the table."""

    requirement: str  # an exact pin, ``name==version``
    reason: str

    @property
    def name(self) -> str:
        return canonicalize_name(Requirement(self.requirement).name)


def check_overrides(
    value: Any, error: Callable[[str, str], None], extra: Iterable[str]
) -> tuple[PinOverride, ...] | None:
    """A list of ``{requirement, reason}``: each an exact ``==`` pin (the row stays reproducible) of a package other
    than vllm and torch (the row's own fields), once, not also in ``extra_requirements``, with its reason."""
    name = "overrides"
    if not isinstance(value, list) or not value:
        error(name, f"expected a non-empty list of {{requirement, reason}} mappings, got {_short(value)}")
        return None
    extra_names = set()
    for requirement in extra:
        with contextlib.suppress(InvalidRequirement):
            extra_names.add(canonicalize_name(Requirement(requirement).name))
    overrides: list[PinOverride] = []
    ok = True
    for index, item in enumerate(value, start=1):
        where = f"item {index}"
        if not isinstance(item, dict) or set(item) != set(OVERRIDE_KEYS):
            keys = sorted(map(str, item)) if isinstance(item, dict) else _short(item)
            error(name, f"{where}: expected a mapping with exactly {', '.join(OVERRIDE_KEYS)}, got {keys}")
            ok = False
            continue
        requirement, reason = item["requirement"], item["reason"]
        if not isinstance(reason, str) or not reason.strip():
            error(name, f"{where}: reason: say why the release's own pin cannot be installed")
            ok = False
        try:
            parsed = Requirement(requirement) if isinstance(requirement, str) else None
        except InvalidRequirement as exc:
            error(name, f"{where}: {requirement!r} is not a requirement: {exc}")
            ok = False
            continue
        specifiers = list(parsed.specifier) if parsed is not None else []
        if parsed is None or len(specifiers) != 1 or specifiers[0].operator != "==" or "*" in specifiers[0].version:
            error(name, f"{where}: {requirement!r} is not an exact pin (name==version)")
            ok = False
            continue
        package = canonicalize_name(parsed.name)
        if package in ("vllm", "torch"):
            error(name, f"{where}: {requirement!r}: {package} is pinned by the row's own field")
            ok = False
        elif package in extra_names:
            error(name, f"{where}: {requirement!r}: {package} is also in extra_requirements (keep one)")
            ok = False
        elif any(o.name == package for o in overrides):
            error(name, f"{where}: {package} is overridden twice")
            ok = False
        else:
            overrides.append(PinOverride(requirement, " ".join(str(reason).split())))
    return tuple(overrides) if ok else None
