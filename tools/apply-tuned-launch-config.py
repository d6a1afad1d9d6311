#!/usr/bin/env python3
"""Write the best configuration of a ``caovan bench tune --json`` record into launch_configs.json.

Usage: tools/apply-tuned-launch-config.py TUNE_JSON [--arch smNN] [--data launch_configs.json]
The architecture defaults to the GPU the record was measured on; the entry's note names TUNE_JSON (commit it).
The winner is written whole, as it was measured: the fields ``bench tune`` sweeps and those it carries from the
entry it started from (thresholds, the split-row block). The entry is checked by the loader the kernels use before
the file is replaced, so a record the loader would refuse changes nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from caovan.kernels.gdn_spec_decode.launch_configs import DATA_FILE, load_entry  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("tune_json", type=Path)
    parser.add_argument("--arch")
    parser.add_argument("--data", type=Path, default=DATA_FILE, help="the launch-config file to write into")
    args = parser.parse_args()
    record = json.loads(args.tune_json.read_text(encoding="utf-8"))
    best = record.get("best")
    if not best:
        print(f"{args.tune_json}: no valid configuration in this record", file=sys.stderr)
        return 2
    major, minor = (int(x) for x in record["gpu"]["capability"].split("."))
    arch = args.arch or f"sm{major}{minor}"
    entry = {key: value for key, value in best["config"].items() if key != "arch"}
    entry.update(
        capability=[major, minor],
        tuned=True,
        note=(
            f"tuned on {record['gpu']['name']} by `caovan bench tune` ({args.tune_json.as_posix()}): "
            f"{best['label']}, {best['geomean_graph_us']:.2f} us geomean CUDA-graph time, "
            f"x{best['vs_base']:.2f} vs the previous entry"
        ),
    )
    try:
        load_entry(arch, entry)
    except (KeyError, TypeError, ValueError) as exc:
        problem = f"missing field {exc}" if isinstance(exc, KeyError) else str(exc)
        print(
            f"{args.tune_json}: its best configuration is not a valid {arch} entry: {problem}; nothing written",
            file=sys.stderr,
        )
        return 2
    entries = json.loads(args.data.read_text(encoding="utf-8"))
    entries[arch] = entry
    tmp = args.data.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(entries, indent=2) + "\n", encoding="utf-8")
    os.replace(tmp, args.data)
    print(f"{args.data}: {arch} = {best['label']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
