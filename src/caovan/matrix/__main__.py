"""``python -m caovan.matrix validate|list [FILES...]``: check the matrix files or print their rows.
``python -m caovan.matrix run-here ROW [matrix options]``: run ROW's tiers in *this* environment.

Without FILES, every ``*.yaml`` in ``matrix/`` is read. Exit 0 when valid; otherwise one line per
problem on stderr (file:line: row: field: problem) and exit 2.

``run-here`` is for a GPU host without network where the row's vLLM/torch and the plugin are already
installed (e.g. from ``nox -s wheelhouse``): no venv is made, pytest runs with this interpreter, and the
result file records ``install.mode = "current-environment"`` and the interpreter, so nobody mistakes it
for an isolated row venv; stored tiers of another install (a row venv, another interpreter) are neither
reused nor kept, as one result file records one install. It takes the same options as the nox session
(``--runner``, ``--tiers``, ``--redo``, ``--strict``). Run it from the repository root; the result goes
to ``results/`` in the ``--matrix-dir`` the row came from (default ``matrix/``). It refuses to run when
the caovan package this interpreter imports is not this checkout's ``src/caovan`` (nor a byte-identical
installed copy, e.g. a wheel built from it), since the result records this checkout's source fingerprint.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from . import MatrixError
from .options import add_matrix_options
from .schema import load_matrix, matrix_files


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m caovan.matrix",
        description="validate|list [FILES...]: check the matrix files or print their rows (default: matrix/*.yaml). "
        "run-here ROW [options]: run ROW's tiers with this interpreter, for a GPU host without network where the "
        "row's packages and the plugin are already installed; run it from the repository root.",
    )
    parser.add_argument("command", choices=("validate", "list", "run-here"))
    parser.add_argument("files", nargs="*", help="matrix files (default: matrix/*.yaml); run-here: ROW")
    parser.add_argument("--matrix-dir", type=Path, default=Path("matrix"))
    run_here_options = parser.add_argument_group("run-here options (as for nox -s matrix)")
    add_matrix_options(run_here_options, wheelhouse=False)
    # Intermixed: options may come before, between or after the positionals (plain parsing lets
    # nargs="*" take nothing when an option comes first, and the positionals after it are left over).
    args = parser.parse_intermixed_args(argv)
    if args.command == "run-here":
        return run_here(args.files, args, args.matrix_dir)
    given = [f"--{name}" for name in ("runner", "tiers", "redo", "strict") if getattr(args, name)]
    if given:
        parser.error(f"{given[0]} is an option of run-here, not of {args.command}")
    args.files = [Path(f) for f in args.files]
    try:
        files = args.files or matrix_files(args.matrix_dir)
        rows = load_matrix(files, base=Path.cwd())
    except MatrixError as exc:
        for message in exc.messages:
            print(f"matrix: error: {message}", file=sys.stderr)
        return 2
    if args.command == "list":
        json.dump([{**row.spec(), "fingerprint": row.fingerprint()} for row in rows], sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        print(f"matrix: {len(rows)} rows in {len(files)} file(s) are valid: {', '.join(r.id for r in rows)}")
    return 0


def run_here(positional: list[str], option_args: argparse.Namespace, matrix_dir: Path) -> int:
    import os
    import subprocess

    import caovan

    from .fingerprint import package_difference, plugin_version, source_fingerprint
    from .options import matrix_options
    from .results import Provenance
    from .row_guard import exit_status
    from .row_run import Prepared, run_row

    root = Path.cwd()
    # Rows and their results stay together, as compat reads them (a results folder's parent holds the rows).
    results_dir = root / matrix_dir / "results"
    try:
        missing = [name for name in ("pyproject.toml", "src/caovan/__init__.py") if not (root / name).is_file()]
        if missing:
            raise MatrixError(
                f"{root} is not the repository root (no {' or '.join(missing)} here): run run-here from the "
                "root of the checkout whose row it runs"
            )
        if len(positional) != 1:
            raise MatrixError([f"run-here takes one row id, got {positional or 'none'}"])
        rows = {row.id: row for row in load_matrix(matrix_files(matrix_dir), base=root)}
        if positional[0] not in rows:
            raise MatrixError([f"row {positional[0]!r} is not in {matrix_dir}/ (rows: {', '.join(rows)})"])
        options = matrix_options(option_args, os.environ)
        row = rows[positional[0]]
        if options.tiers is not None and not any(t in row.tiers for t in options.tiers):
            # As the nox session skips such a row: a run of no tier would store a result of nothing
            # but not-run tiers (with no env facts) over the stored one.
            raise MatrixError(
                f"row {row.id} has none of the selected tiers ({', '.join(options.tiers)}; "
                f"the row's tiers: {', '.join(row.tiers)}): nothing to run, nothing written"
            )
        # The tiers run with this interpreter and environment, so they import the caovan this process
        # imported; the result records this checkout's source fingerprint, so that must be this source.
        imported = Path(caovan.__file__).resolve().parent
        source = (root / "src" / "caovan").resolve()
        difference = None if imported == source else package_difference(imported, source)
        if difference is not None:
            raise MatrixError(
                f"the caovan package this run imports, {imported}, is not this checkout's {source} ({difference}): "
                "the result would vouch for source that did not run; run with PYTHONPATH=src, or install a wheel "
                "built from this checkout"
            )
        provenance = Provenance(row.fingerprint(), plugin_version(root), source_fingerprint(root))
    except MatrixError as exc:
        for message in exc.messages:
            print(f"matrix: error: {message}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("matrix run-here: interrupted before any tier ran: nothing written", file=sys.stderr)
        return 130
    cache_dir = root / "build" / "matrix"

    def prepare() -> Prepared:
        envinfo = cache_dir / "envinfo" / options.runner / f"{row.id}.json"
        envinfo.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run([sys.executable, "-m", "caovan.matrix.envinfo", "--output", str(envinfo)], check=True)
        env = json.loads(envinfo.read_text(encoding="utf-8"))
        return Prepared(sys.executable, env, {})

    try:
        outcome = run_row(
            row,
            provenance,
            runner=options.runner,
            selected_tiers=options.tiers,
            redo=options.redo,
            root=root,
            results_dir=results_dir,
            cache_dir=cache_dir,
            prepare=prepare,
            log=lambda line: print(f"matrix run-here: {line}", flush=True),
            # Known before planning: records of another install are not reused (results.stale_reason).
            install_note={"mode": "current-environment", "python": sys.executable},
        )
    except MatrixError as exc:  # its result file cannot be written
        for message in exc.messages:
            print(f"matrix: error: {message}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as exc:
        return exit_status(exc)  # run_row has said what is kept
    return 1 if options.strict and outcome.bad_tiers else 0


if __name__ == "__main__":
    raise SystemExit(main())
