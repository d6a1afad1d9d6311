#!/usr/bin/env python3
"""Write the best configuration of a ``caovan bench tune --json`` record into launch_configs.json.

Usage: tools/apply-tuned-launch-config.py TUNE_JSON [--arch smNN]
The architecture defaults to the GPU the record was measured on; the entry's note names TUNE_JSON (commit it).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

DATA = Path(__file__).resolve().parents[1] / "src/caovan/kernels/gdn_spec_decode/launch_configs.json"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("tune_json", type=Path)
    parser.add_argument("--arch")
    args = parser.parse_args()
    record = json.loads(args.tune_json.read_text(encoding="utf-8"))
    best = record.get("best")
    if not best:
        print(f"{args.tune_json}: no valid configuration in this record", file=sys.stderr)
        return 2
    major, minor = (int(x) for x in record["gpu"]["capability"].split("."))
    arch = args.arch or f"sm{major}{minor}"
    config = best["config"]
    # carried over as measured with (bench tune does not sweep it; see launch_configs.py)
    stagger = config.get("stagger_min_state_write_bytes")
    write_through = config.get("write_through_last_min_state_write_bytes")
    entries = json.loads(DATA.read_text(encoding="utf-8"))
    entries[arch] = {
        "capability": [major, minor],
        "qk": config["qk"],
        "v_gdn": config["v_gdn"],
        "pdl": bool(config.get("pdl", False)),
        **({"stagger_min_state_write_bytes": stagger} if stagger is not None else {}),
        **({"write_through_last_min_state_write_bytes": write_through} if write_through is not None else {}),
        "tuned": True,
        "note": (
            f"tuned on {record['gpu']['name']} by `caovan bench tune` ({args.tune_json.as_posix()}): "
            f"{best['label']}, {best['geomean_graph_us']:.2f} us geomean CUDA-graph time, "
            f"x{best['vs_base']:.2f} vs the previous entry"
        ),
    }
    tmp = DATA.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(entries, indent=2) + "\n", encoding="utf-8")
    os.replace(tmp, DATA)
    print(f"{DATA}: {arch} = {best['label']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
