"""Which pinned requirements go into a row's wheel set (``nox -s "wheelhouse(<row>)"``).

Plain logic on ``name==version`` lines as ``uv pip compile`` writes them, so that the session's choices
(host-provided packages, ``--exclude`` patterns) are unit-tested without a network.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable, Sequence

from . import MatrixError


def requirement_name(line: str) -> str:
    """The normalised distribution name of a pinned line (``Foo_Bar[x]==1.0 ; marker`` -> ``foo-bar``)."""
    name = line.split(";")[0].split("==")[0].split("@")[0].split("[")[0].strip()
    return name.lower().replace("_", "-").replace(".", "-")


def _normalised(pattern: str) -> str:
    return pattern.lower().replace("_", "-").replace(".", "-")


def matches_any(name: str, patterns: Iterable[str]) -> bool:
    """Whether a normalised distribution name matches one of the fnmatch patterns (normalised alike)."""
    return any(fnmatch.fnmatchcase(name, _normalised(p)) for p in patterns)


def split_excluded(pins: Sequence[str], patterns: Sequence[str]) -> tuple[list[str], list[str]]:
    """``(kept, left_out)``: the pins matching none of ``patterns``, and those matching one.

    A pattern that matches no pin is an error (a misspelt name would otherwise leave a package in
    silently), naming the pattern.
    """
    names = [requirement_name(line) for line in pins]
    unused = [p for p in patterns if not any(matches_any(n, [p]) for n in names)]
    if unused:
        raise MatrixError(
            f"wheelhouse: --exclude {', '.join(repr(p) for p in unused)} matches no package of the row's "
            f"resolution ({len(pins)} pins)"
        )
    hits = [matches_any(name, patterns) for name in names]
    kept = [line for line, hit in zip(pins, hits, strict=True) if not hit]
    left_out = [line for line, hit in zip(pins, hits, strict=True) if hit]
    return kept, left_out
