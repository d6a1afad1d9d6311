"""Shrunk failures kept as fixed cases (``tests/numerics/data/spec_fuzz_regressions.json``), which the numerics tier
runs on every served row, laid out as that row's family lays them out.

A case found on one family runs wherever its batch is one that family's vLLM could hand the spec path; elsewhere it
is skipped with the reason (``rules.cannot_express``).
"""

from __future__ import annotations

import json
from pathlib import Path

from caovan.jsonfile import write_text_atomic

from .cases import FuzzCase
from .rules import LayoutRules, cannot_express, lay_out
from .run import Sides, run_case

ABOUT = (
    "Shrunk spec-step fuzz failures, kept as fixed cases that the numerics tier runs on every served row "
    "(tests/numerics/test_spec_fuzz.py). Added by tests/numerics/spec_fuzz_cases.py --add-regressions; "
    "each names the family and the seed:index it was found at."
)


class RegressionFileError(ValueError):
    """The regression file is unreadable or holds a malformed entry; the message names the file."""


def load_regressions(path: Path) -> list[dict]:
    """The file's entries, each with its ``case`` as a :class:`FuzzCase`; a missing file holds none."""
    if not path.exists():
        return []
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        entries = [dict(entry, case=FuzzCase.from_json(entry["case"])) for entry in data["cases"]]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise RegressionFileError(f"{path}: {type(exc).__name__}: {exc}") from exc
    ids = [entry["id"] for entry in entries]
    if len(set(ids)) != len(ids):
        raise RegressionFileError(f"{path}: duplicate ids {sorted({i for i in ids if ids.count(i) > 1})}")
    return entries


def add_regressions(path: Path, failures: list[dict], rules: LayoutRules, found_on: str) -> list[str]:
    """Append each failure's shrunk case (unless the file holds it already); the ids added."""
    entries = load_regressions(path)
    known = {json.dumps(entry["case"].to_json(), sort_keys=True) for entry in entries}
    added = []
    for failure in failures:
        key = json.dumps(failure["shrunk"], sort_keys=True)
        if key in known:
            continue
        known.add(key)
        case_id = f"{rules.label}-{failure['case'].replace(':', '-')}"
        entries.append(
            {
                "id": case_id,
                "found_on": f"{found_on} ({rules.family_id}), case {failure['case']}",
                "problem": failure["shrunk_detail"] or failure["detail"],
                "case": FuzzCase.from_json(failure["shrunk"]),
            }
        )
        added.append(case_id)
    stored = [dict(entry, case=entry["case"].to_json()) for entry in entries]
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(path, json.dumps({"about": ABOUT, "cases": stored}, indent=1) + "\n")
    return added


def run_regressions(entries: list[dict], rules: LayoutRules, sides: Sides | None) -> dict[str, dict]:
    """Each entry's verdict on this family, or ``{"skip": why}`` where its batch is not one this family makes."""
    results = {}
    for entry in entries:
        case = lay_out(entry["case"], rules)
        why = cannot_express(case, rules)
        if why is not None or sides is None:
            results[entry["id"]] = {"skip": why or "no sides to run on"}
            continue
        results[entry["id"]] = run_case(case, sides)
    return results
