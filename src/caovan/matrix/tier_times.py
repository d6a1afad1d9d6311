"""What each tier of a matrix run cost, from its result files: ``duration_s`` per row and tier, summed.

    python -m caovan.matrix.tier_times matrix/results/cpu --out FILE [--tier NAME] [--note TEXT]

The README's figures for the main job's tiers (a cold and a warm compile cache for the sm75 tier, say) come from
files this writes, so each number has its JSON and the command that made it. It reads the result files of one
runner folder as they are (complete or not) and writes one JSON document; a file that is not a valid result is an
error naming it and the field (the matrix's own result validation), and nothing is written.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from caovan.jsonfile import write_text_atomic

from . import TIERS, MatrixError
from .results import load_result


def tier_times(folder: Path, only: str | None = None) -> dict[str, Any]:
    """Per row, the seconds each tier that ran took (``only``: that tier's); per tier, the sum, least and most."""
    files = sorted(Path(folder).glob("*.json"))
    if not files:
        raise MatrixError(f"{folder}: no result files (*.json)")
    rows = []
    for path in files:
        doc = load_result(path)
        seconds = {
            tier: round(float(record["duration_s"]), 1)
            for tier, record in doc["tiers"].items()
            if isinstance(record.get("duration_s"), (int, float)) and only in (None, tier)
        }
        rows.append(
            {
                "row": doc["row"]["id"],
                "runner": doc["runner"],
                "source": doc["plugin"]["source_fingerprint"],
                "finished_at": doc["finished_at"],
                "tiers_s": seconds,
            }
        )
    totals = {}
    for tier in TIERS:
        values = [r["tiers_s"][tier] for r in rows if tier in r["tiers_s"]]
        if values:
            totals[tier] = {
                "rows": len(values),
                "sum_s": round(sum(values), 1),
                "min_s": min(values),
                "max_s": max(values),
            }
    return {"folder": str(folder), "rows": rows, "tiers": totals}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m caovan.matrix.tier_times", description=__doc__.split("\n")[0])
    parser.add_argument("folder", type=Path, help="a runner folder of results, e.g. matrix/results/cpu")
    parser.add_argument("--out", type=Path, required=True, help="where to write the JSON")
    parser.add_argument("--tier", choices=TIERS, help="only this tier (a run of one tier, say)")
    parser.add_argument("--note", default="", help="what the run was (kept in the JSON)")
    args = parser.parse_args(argv)
    try:
        document = {"note": args.note, **tier_times(args.folder, args.tier)}
    except MatrixError as exc:
        for message in exc.messages:
            print(f"tier_times: error: {message}", file=sys.stderr)
        return 2
    args.out.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(args.out, json.dumps(document, indent=2) + "\n")
    for tier, total in document["tiers"].items():
        print(f"{tier}: {total['sum_s']} s over {total['rows']} rows ({total['min_s']} to {total['max_s']} s a row)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
