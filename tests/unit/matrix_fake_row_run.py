"""A fake matrix row's run in a process of its own, for the kill-and-restart tests (test_matrix_kill_restart.py).

``python matrix_fake_row_run.py CHECKOUT``: run_row on the shared fake row (matrix_fixtures) with the real tier
runner, in a fake checkout whose tests/ stand for the row's tiers; exit 0, 2 with one ``error:`` line per problem,
or the status of the signal that stopped it.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from matrix_fixtures import ENV, PROVENANCE, ROW

from caovan.matrix import MatrixError
from caovan.matrix.row_guard import exit_status
from caovan.matrix.row_run import Prepared, run_row


def main(argv: list[str]) -> int:
    root = Path(argv[0])
    # The fake tiers need no plugin of the test venv: without them each tier's pytest starts in a fraction of the time.
    run_env = {**os.environ, "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
    try:
        run_row(
            ROW,
            PROVENANCE,
            runner="qa",
            selected_tiers=None,
            redo=False,
            root=root,
            results_dir=root / "matrix" / "results",
            cache_dir=root / "build" / "matrix",
            prepare=lambda: Prepared(sys.executable, dict(ENV), {}, run_env),
            log=lambda line: print(f"row: {line}", flush=True),
        )
    except MatrixError as exc:
        for message in exc.messages:
            print(f"error: {message}", file=sys.stderr, flush=True)
        return 2
    except KeyboardInterrupt as exc:
        return exit_status(exc)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
