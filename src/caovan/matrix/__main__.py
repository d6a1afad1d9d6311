"""``python -m caovan.matrix validate|list [FILES...]``: check the matrix files or print their rows.

Without FILES, every ``*.yaml`` in ``matrix/`` is read. Exit 0 when valid; otherwise one line per
problem on stderr (file:line: row: field: problem) and exit 2.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from . import MatrixError
from .schema import load_matrix, matrix_files


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m caovan.matrix", description=__doc__.splitlines()[0]
    )
    parser.add_argument("command", choices=("validate", "list"))
    parser.add_argument("files", nargs="*", type=Path, help="matrix files (default: matrix/*.yaml)")
    parser.add_argument("--matrix-dir", type=Path, default=Path("matrix"))
    args = parser.parse_args(argv)
    try:
        files = args.files or matrix_files(args.matrix_dir)
        rows = load_matrix(files, base=Path.cwd())
    except MatrixError as exc:
        for message in exc.messages:
            print(f"matrix: error: {message}", file=sys.stderr)
        return 2
    if args.command == "list":
        json.dump(
            [{**row.spec(), "fingerprint": row.fingerprint()} for row in rows], sys.stdout, indent=2
        )
        sys.stdout.write("\n")
    else:
        print(
            f"matrix: {len(rows)} rows in {len(files)} file(s) are valid: "
            f"{', '.join(r.id for r in rows)}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
