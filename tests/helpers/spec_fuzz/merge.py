"""One fuzz record from the records of one run split by ``--start`` across processes.

A 10,000-case run of one family takes about 105 minutes on one core (``docs/fuzz``), so it is split: the same
``--seed`` with ``--start 0``, ``--start 5000`` ... in parallel, each writing its own record. This joins them into
the record one process would have written, and refuses parts that are not one run: another family, vLLM, seed or
case space, an unfinished part, or index ranges with a gap or an overlap.

    PYTHONPATH=src:tests python -m helpers.spec_fuzz.merge PART.json [PART.json ...] --out RECORD.json
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from itertools import pairwise
from pathlib import Path

from .cases import LISTED_ABOVE_VLLM

#: What every part must share to be one run.
SAME_RUN = ("schema", "family", "device", "space", "bf16_left_out", "seed")


class MergeError(ValueError):
    """Parts that are not one run, or one that is not a finished record: the message names the file."""


def _check_parts(parts: list[tuple[str, dict]]) -> list[tuple[str, dict]]:
    if not parts:
        raise MergeError("no fuzz records to merge")
    for name, record in parts:
        if not record.get("complete") or "summary" not in record:
            raise MergeError(f"{name}: not a finished run (complete is not true, or no summary): wait for it or rerun")
    first_name, first = parts[0]
    for name, record in parts[1:]:
        for key in SAME_RUN:
            if record.get(key) != first.get(key):
                raise MergeError(f"{name}: its {key} differs from {first_name}'s: not the same run")
    ordered = sorted(parts, key=lambda part: part[1]["summary"]["first_index"])
    for (name_a, a), (name_b, b) in pairwise(ordered):
        end = a["summary"]["first_index"] + a["summary"]["cases"]
        if b["summary"]["first_index"] != end:
            how = "a gap" if b["summary"]["first_index"] > end else "an overlap"
            raise MergeError(
                f"{name_b}: starts at case {b['summary']['first_index']}, {name_a} ends before {end}: {how}"
            )
    return ordered


def _merge_listed(summaries: list[dict], key: str) -> dict:
    listed = [entry for s in summaries for entry in s[key]["first"]]
    return {"count": sum(s[key]["count"] for s in summaries), "first": listed[:LISTED_ABOVE_VLLM]}


def _merge_worst(summaries: list[dict]) -> dict:
    worst: dict = {}
    for s in summaries:
        for side, errors in s["worst_error_vs_float64"].items():
            for key, entry in errors.items():
                best = worst.setdefault(side, {}).get(key)
                if best is None or not entry["error"] <= best["error"]:  # NaN wins, as in FuzzSummary.add
                    worst[side][key] = entry
    return worst


def merge_summaries(summaries: list[dict]) -> dict:
    """The summary one process would have written for the joined index range (``FuzzSummary.to_json``'s fields);
    the listed entries keep the first ``LISTED_ABOVE_VLLM`` in case order."""
    cases = sum(s["cases"] for s in summaries)
    passed = sum(s["passed"] for s in summaries)
    seconds = sum(s["seconds"] for s in summaries)
    covered: Counter = Counter()
    for s in summaries:
        covered.update(s["covered"])
    return {
        "family_id": summaries[0]["family_id"],
        "seed": summaries[0]["seed"],
        "first_index": summaries[0]["first_index"],
        "cases": cases,
        "passed": passed,
        "failed": cases - passed,
        "seconds": round(seconds, 1),
        "seconds_per_case": round(seconds / cases, 3) if cases else None,
        "slowest_case_s": max(s["slowest_case_s"] for s in summaries),
        "covered": dict(sorted(covered.items())),
        "worst_error_vs_float64": _merge_worst(summaries),
        "caovan_above_vllm": _merge_listed(summaries, "caovan_above_vllm"),
        "vllm_above_tolerance": _merge_listed(summaries, "vllm_above_tolerance"),
        "failures": [failure for s in summaries for failure in s["failures"]],
    }


def merge_records(parts: list[tuple[str, dict]]) -> dict:
    """``parts``: (name, record) of each process's record; the joined record, ``parts`` naming where each came from."""
    ordered = _check_parts(parts)
    first = ordered[0][1]
    return {
        **{key: first[key] for key in (*SAME_RUN, "family") if key in first},
        "complete": True,
        "command": [record["command"] for _, record in ordered],
        "parts": [
            {
                "file": name,
                "first_index": record["summary"]["first_index"],
                "cases": record["summary"]["cases"],
                "cpus": record.get("cpus"),
                "wall_s": record.get("wall_s"),
            }
            for name, record in ordered
        ],
        "summary": merge_summaries([record["summary"] for _, record in ordered]),
    }


def main(argv: list[str] | None = None) -> int:
    from caovan.jsonfile import read_json, write_text_atomic

    parser = argparse.ArgumentParser(prog="python -m helpers.spec_fuzz.merge", description=__doc__.splitlines()[0])
    parser.add_argument("parts", nargs="+", type=Path, help="the records of one run's parts")
    parser.add_argument("--out", type=Path, required=True, help="the joined record")
    args = parser.parse_args(argv)
    try:
        parts = [(path.name, read_json(path, MergeError)) for path in args.parts]
        record = merge_records(parts)
    except MergeError as exc:
        print(f"merge: {exc}", file=sys.stderr)
        return 2
    write_text_atomic(args.out, json.dumps(record, indent=1) + "\n")
    s = record["summary"]
    print(f"{s['passed']}/{s['cases']} passed from {len(parts)} parts; record: {args.out}")
    return 0 if s["failed"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
