"""Generated blocks in the docs: the text between a start and an end marker, replaced whole (compat table,
performance table)."""

from __future__ import annotations


class MarkerError(ValueError):
    """The document does not hold the two markers once each, in order; the message names the file."""


def replace_between(doc_text: str, block: str, *, start: str, end: str, shown: str) -> str:
    """``doc_text`` with what lies between ``start`` and ``end`` replaced by ``block``."""
    starts, ends = doc_text.count(start), doc_text.count(end)
    if starts != 1 or ends != 1:
        raise MarkerError(f"{shown}: expected the markers {start} and {end} once each, found {starts} and {ends}")
    head, rest = doc_text.split(start)
    if end not in rest:
        raise MarkerError(f"{shown}: {end} comes before {start}")
    _, tail = rest.split(end)
    return f"{head}{start}\n{block}\n{end}{tail}"
