"""The compatibility table in docs/compat.md, generated from result files only: ``nox -s compat``.

Reads every ``matrix/results/<runner>/<row>.json``, validates all of them first (a bad file is one
error naming the file and the field, and the doc is left untouched; so is a result whose row is gone from
``matrix/*.yaml`` or was recorded with other pins than the row has now), renders one GitHub-markdown
line per row x runner, and replaces what lies between the two markers in the doc through a temp file
+ ``os.replace``. The output depends on the result files alone (sorted, no clock of its own), so
running it twice changes nothing.

    python -m caovan.matrix.compat [--results matrix/results] [--doc docs/compat.md] [--check]
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import tabulate as tabulate_module
from packaging.version import InvalidVersion, Version
from tabulate import tabulate

from ..doc_markers import MarkerError, replace_between
from . import TIERS, MatrixError
from .fixed_hosts import load_hosts, render_gpu_coverage
from .pin_overrides import PinOverride
from .results import load_result, write_text_atomic
from .schema import MatrixRow, load_matrix, matrix_files
from .sm75_page import HEADER as SM75_HEADER
from .sm75_page import LEGEND as SM75_LEGEND
from .sm75_page import MARK_END as SM75_MARK_END
from .sm75_page import MARK_START as SM75_MARK_START
from .sm75_page import render_page_block, table_cell

MARK_START = "<!-- START compat-table -->"
MARK_END = "<!-- END compat-table -->"
GENERATOR_COMMAND = "nox -s compat"

TIER_CELLS: dict[str, str] = {
    "pass": "✅ pass",
    "fail": "❌ fail",
    "skipped": "⏭️ skipped",
    "error": "⚠️ error",
    "not-run": "➖ not run",
}
NOT_IN_ROW = "—"
#: Outcomes whose reason becomes a note under the table (not-run explains itself in the legend).
OUTCOMES_WITH_NOTES = frozenset({"fail", "skipped", "error"})
NOTE_MAX_CHARS = 300

LEGEND = (
    "Legend: ✅ pass — the tier's tests ran and passed (some may have skipped) · "
    "❌ fail — a test failed · "
    "⏭️ skipped — every test of the tier skipped (e.g. no GPU on that runner) · "
    "⚠️ error — the tier could not run or ran no tests · "
    "➖ not run — the tier was not selected in that run · "
    "— the row does not list the tier. "
    "`[n]` points to the notes below the table. **family** is the GDN adapter family the plugin "
    "chose for that vLLM (probed inside the row's venv); CUDA is the row's torch build tag; "
    "**plugin @source** is the plugin version and the fingerprint of the plugin source and tests the row ran "
    "with (rows run with different source carry different fingerprints; a line whose source is older than the "
    "newest result's has a *stale* note)."
)


@dataclass(frozen=True)
class LoadedResult:
    shown: str
    doc: dict[str, Any]
    #: Tiers the matrix row gained after this result was made: shown as not run, with a note.
    added_tiers: tuple[str, ...] = ()

    @property
    def sort_key(self) -> tuple[str, str]:
        return (self.doc["row"]["id"], self.doc["runner"])


def _shown(path: Path, base: Path | None) -> str:
    if base is not None:
        try:
            return path.resolve().relative_to(base.resolve()).as_posix()
        except ValueError:
            pass
    return str(path)


#: The parts of a row that decide what a result vouches for: a result recorded with other values is not a
#: result of the matrix row of that id any more.
ROW_FIELDS_THAT_MUST_MATCH: tuple[str, ...] = (
    "vllm",
    "torch",
    "python",
    "cuda",
    "tiers",
    "extra_requirements",
    "overrides",  # absent from a row (and its results) that has none
)


def collect_results(
    results_dir: Path, *, base: Path | None = None, matrix_dir: Path | None = None
) -> list[LoadedResult]:
    """Every result file, validated; :class:`MatrixError` lists every bad file and field.

    With ``matrix_dir``, each result must also belong to a row of the matrix there as it is now.
    """
    _require_results_dir(Path(results_dir), base)
    rows = None if matrix_dir is None else _rows_by_id(Path(matrix_dir), base)
    return _collect(Path(results_dir), base, rows, None if matrix_dir is None else _shown(Path(matrix_dir), base))


def _require_results_dir(results_dir: Path, base: Path | None) -> None:
    if not results_dir.is_dir():
        raise MatrixError(
            f"{_shown(results_dir, base)}: results folder does not exist "
            "(run `nox -s matrix`, or download the matrix workflow's result artifacts, first)"
        )


def _rows_by_id(matrix_dir: Path, base: Path | None) -> dict[str, MatrixRow]:
    return {row.id: row for row in load_matrix(matrix_files(matrix_dir), base=base)}


def _collect(
    results_dir: Path, base: Path | None, rows: Mapping[str, MatrixRow] | None, matrix_shown: str | None
) -> list[LoadedResult]:
    """:func:`collect_results` with the matrix rows already read (``None``: not checked against rows)."""
    errors: list[str] = []
    loaded: list[LoadedResult] = []
    # Above or below <runner>/ alike: a file there (artifacts unpacked into a folder of their own) would be left out.
    for stray in sorted(p for p in results_dir.rglob("*.json") if len(p.relative_to(results_dir).parts) != 2):
        errors.append(f"{_shown(stray, base)}: result files belong in <results>/<runner>/<row>.json")
    for path in sorted(results_dir.glob("*/*.json")):
        shown = _shown(path, base)
        try:
            doc = load_result(path, shown=shown)
        except MatrixError as exc:
            errors.extend(exc.messages)
            continue
        if doc["complete"] is not True:
            errors.append(f"{shown}: field 'complete': false — a partial result (its run did not finish)")
        if doc["runner"] != path.parent.name:
            errors.append(f"{shown}: field 'runner': {doc['runner']!r} but the file lies in {path.parent.name}/")
        if doc["row"]["id"] != path.stem:
            errors.append(f"{shown}: field 'row.id': {doc['row']['id']!r} but the file is named {path.name}")
        elif rows is not None:
            mismatch = _matrix_mismatch(shown, doc, rows, matrix_shown)
            if mismatch:
                errors.extend(mismatch)
            else:
                added = [t for t in rows[doc["row"]["id"]].tiers if t not in doc["row"]["tiers"]]
                loaded.append(LoadedResult(shown, doc, tuple(added)))
                continue
        loaded.append(LoadedResult(shown, doc))
    if errors:
        raise MatrixError(errors)
    return loaded


def _matrix_mismatch(shown: str, doc: Mapping[str, Any], rows: Mapping[str, MatrixRow], matrix_shown: str) -> list[str]:
    """One message if the result's row is gone from the matrix or was recorded with other pins."""
    recorded = doc["row"]
    row = rows.get(recorded["id"])
    if row is None:
        return [
            f"{shown}: row {recorded['id']!r} is not in {matrix_shown}/*.yaml any more: delete the file "
            "(or put the row back and re-run it)"
        ]
    spec = row.spec()
    changed = [
        f"{name} {recorded.get(name)!r} -> {spec.get(name)!r}"
        for name in ROW_FIELDS_THAT_MUST_MATCH
        if recorded.get(name) != spec.get(name)
        and not (name == "tiers" and _only_added(recorded.get(name), spec[name]))
    ]
    if not changed:
        return []
    return [
        f"{shown}: matrix row {row.id!r} changed since this result ({'; '.join(changed)}): "
        f're-run the row (nox -s "matrix({row.id})") or delete the file'
    ]


def _only_added(recorded: Any, now: list[str]) -> bool:
    """Whether the row's tiers are the recorded ones, in order, plus tiers added since.

    A tier added to the matrix (the numerics tier, say) must not void every result made before it, GPU rows of
    rare hardware above all: their tiers ran with the same pins, and the new tier is shown as not run.
    """
    if not isinstance(recorded, list):
        return False
    kept = [t for t in now if t in recorded]
    return kept == recorded


def _version_key(text: str) -> Version:
    try:
        return Version(text)
    except InvalidVersion:
        return Version("0")


def _matches_pin(pin: str, installed: str | None) -> bool:
    """Whether ``installed`` is what the row's pin asks for: ``3.11`` is met by 3.11.7, ``2.11.0`` by 2.11.0+cu130."""
    if installed is None:
        return False
    try:
        wanted, got = Version(pin).release, Version(installed).release
    except InvalidVersion:
        return pin == installed
    return got[: len(wanted)] == wanted


def _installed_cell(pin: str, installed: str | None) -> str:
    """The installed version, with the row's pin beside it when the two disagree (a host's own interpreter)."""
    if installed is None:
        return f"{pin} (not installed)"
    return installed if _matches_pin(pin, installed) else f"{installed} (row: {pin})"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


class _Notes:
    """Numbered notes under the table; the same text gets the same number."""

    def __init__(self) -> None:
        self.numbers: dict[str, int] = {}

    def ref(self, text: str) -> str:
        text = " ".join(text.split())
        if len(text) > NOTE_MAX_CHARS:
            text = text[: NOTE_MAX_CHARS - 1] + "…"
        number = self.numbers.setdefault(text, len(self.numbers) + 1)
        return f"[{number}]"

    def render(self) -> str:
        return "\n".join(f"- [{n}] {_cell(text)}" for text, n in self.numbers.items())


def _cuda_cell(row: Mapping[str, Any], env: Mapping[str, Any]) -> str:
    tag = row["cuda"]
    torch_cuda = env.get("torch_cuda")
    if env.get("torch") is None:
        return tag
    if torch_cuda is None:
        return f"{tag} (torch is a CPU build)" if tag != "cpu" else tag
    # A cpu or rocm tag with a CUDA torch (PyPI's default wheels) would otherwise read as the build that ran.
    if not tag.startswith("cu") or tag[2:] != torch_cuda.replace(".", ""):
        return f"{tag} (torch built for CUDA {torch_cuda})"
    return tag


def _newest(results: Sequence[LoadedResult]) -> LoadedResult:
    """The result that finished last (ties broken by fingerprint and place, so that the pick never varies)."""
    return max(results, key=lambda r: (r.doc["finished_at"], r.doc["plugin"]["source_fingerprint"], r.sort_key))


def _table_line(result: LoadedResult, notes: _Notes, newest: LoadedResult) -> list[str]:
    doc = result.doc
    row, env, tiers = doc["row"], doc["env"], doc["tiers"]
    vllm = row["vllm"]
    if env.get("vllm") != row["vllm"]:
        vllm += f" (installed: {env.get('vllm') or 'none'})"
    for override in row.get("overrides") or []:
        pinned = override["requirement"]
        installed = (env.get("packages") or {}).get(PinOverride(**override).name)
        vllm += " " + notes.ref(
            f"{pinned} in place of the release's own pin (uv --override"
            + (f"; installed: {installed}" if installed else "")
            + f"): {override['reason']}"
        )
    family = env.get("family") or ("none " + notes.ref(f"family: {env.get('family_reason') or 'no reason recorded'}"))
    # envinfo's gpu names the count of each model (``2 × NVIDIA H200``).
    gpu = env["gpu"] if env["gpu"] == "cpu" else f"{env['gpu']} ({env.get('gpu_arch') or '?'})"
    line = [
        vllm,
        family,
        _installed_cell(row["torch"], env.get("torch")),
        _installed_cell(row["python"], env["python"]),
        _cuda_cell(row, env),
    ]
    fingerprint = doc["plugin"]["source_fingerprint"]
    plugin = f"{doc['plugin']['version']} @{fingerprint[:8]}"
    newest_fingerprint = newest.doc["plugin"]["source_fingerprint"]
    if fingerprint != newest_fingerprint:
        # The doc is made from result files alone, so the newest of them stands for the current source: a line
        # of other source is older than that (GPU rows are re-run less often than the source changes).
        plugin += " " + notes.ref(
            f"stale: ran with plugin source @{fingerprint[:8]}, older than that of the newest result "
            f"(@{newest_fingerprint[:8]}, {newest.doc['runner']}/{newest.doc['row']['id']}, "
            f"{newest.doc['finished_at']}); re-run it to refresh"
        )
    install = doc.get("install") or {}
    if install.get("mode") == "current-environment":
        # run-here: the host's own environment (e.g. an offline GPU box), not the row's isolated venv.
        plugin += " " + notes.ref(
            f"{doc['runner']}: ran in the host's environment (python -m caovan.matrix run-here, "
            f"{install.get('python', '?')}), not in an isolated venv of the row; versions as installed there"
        )
    line += [gpu, doc["runner"], plugin]
    for tier in TIERS:
        record = tiers.get(tier)
        if tier in result.added_tiers:
            line.append(
                TIER_CELLS["not-run"] + " " + notes.ref(f"{tier}: added to the row after this result; re-run it")
            )
            continue
        if record is None:
            line.append(NOT_IN_ROW)
            continue
        cell = TIER_CELLS[record["outcome"]]
        if record["outcome"] in OUTCOMES_WITH_NOTES and record.get("reason"):
            cell += " " + notes.ref(f"{tier}: {record['reason']}")
        line.append(cell)
    line.append(table_cell(doc, notes.ref))
    line.append(doc["finished_at"][:10])
    return [_cell(item) for item in line]


def _github_table(lines: list[list[str]], headers: list[str]) -> str:
    # tabulate counts an emoji as two columns when it can import wcwidth and as one when not: the doc would
    # depend on what is installed where it is generated, and `compat --check` fail where it is checked.
    saved = tabulate_module.WIDE_CHARS_MODE
    tabulate_module.WIDE_CHARS_MODE = False
    try:
        return tabulate(lines, headers=headers, tablefmt="github", disable_numparse=True)
    finally:
        tabulate_module.WIDE_CHARS_MODE = saved


def render_block(
    results: Sequence[LoadedResult], rows_without_results: Sequence[str] = (), gpu_coverage: str = ""
) -> str:
    """The generated markdown between the markers (no markers), from validated results only, the ids of the
    matrix rows that have no result on any runner yet (listed under the table, so that they are not invisible), and
    what the fixed-software GPU hosts ran (``fixed_hosts.render_gpu_coverage``)."""
    header = [
        f"<!-- generated by `{GENERATOR_COMMAND}` from matrix/results/<runner>/<row>.json; do not edit by hand -->",
        f"_Generated by `{GENERATOR_COMMAND}` from the result files in `matrix/results/`._",
        "",
    ]
    waiting = (
        [f"Rows of `matrix/*.yaml` with no result yet: {', '.join(f'`{row}`' for row in rows_without_results)}."]
        if rows_without_results
        else []
    )
    if not results:
        empty = [*header, f"_No results yet: run `nox -s matrix`, then `{GENERATOR_COMMAND}`._"]
        return "\n".join([*empty, "", *waiting] if waiting else empty)
    ordered = sorted(results, key=lambda r: r.sort_key)
    ordered = sorted(ordered, key=lambda r: _version_key(r.doc["row"]["vllm"]), reverse=True)
    notes = _Notes()
    newest = _newest(ordered)
    lines = [_table_line(result, notes, newest) for result in ordered]
    headers = ["vLLM", "family", "torch", "Python", "CUDA", "GPU (arch)", "runner", "plugin @source", *TIERS]
    table = _github_table(lines, [*headers, SM75_HEADER, "date"])
    parts = [*header, table, "", LEGEND, "", SM75_LEGEND]
    if notes.numbers:
        parts += ["", "Notes:", "", notes.render()]
    if waiting:
        parts += ["", *waiting]
    if gpu_coverage:
        parts += ["", gpu_coverage]
    return "\n".join([*parts, "", render_families()])


def render_families() -> str:
    """One line per family, oldest first, each saying what differs from the one before (the records' ``differs``)."""
    # Plain dataclasses: importing them loads neither vLLM nor torch.
    from caovan.adapters.families import FAMILIES

    lines = [
        "GDN families, oldest first (from their records in `src/caovan/adapters/families/`), each with what "
        "differs from the one before:",
        "",
    ]
    for family in reversed(FAMILIES):
        served = (
            "" if family.refusal is None else " (caovan recognises it but does not serve it: its row's note says why)"
        )
        lines.append(
            f"- **{family.label}** `{family.family_id}` (vLLM {family.version_hint}){served}: {family.differs}."
        )
    return "\n".join(lines)


def replace_block(doc_text: str, block: str, *, shown: str) -> str:
    try:
        return replace_between(doc_text, block, start=MARK_START, end=MARK_END, shown=shown)
    except MarkerError as exc:
        raise MatrixError(str(exc)) from None


def regenerate(
    results_dir: Path,
    doc_path: Path,
    *,
    base: Path | None = None,
    check: bool = False,
    matrix_dir: Path | None = None,
    sm75_doc: Path | None = None,
) -> bool:
    """Regenerate the doc's table (and ``sm75_doc``'s releases, when given); True if a doc changed (with
    ``check``: would change).

    Results are checked against the matrix rows in ``matrix_dir`` (default: the folder holding the results
    folder, as ``matrix/`` holds ``matrix/results/``).
    """
    results_dir = Path(results_dir)
    matrix_dir = results_dir.parent if matrix_dir is None else Path(matrix_dir)
    _require_results_dir(results_dir, base)
    rows = _rows_by_id(matrix_dir, base)
    results = _collect(results_dir, base, rows, _shown(matrix_dir, base))
    with_results = {result.doc["row"]["id"] for result in results}
    waiting = [row_id for row_id in rows if row_id not in with_results]
    hosts = load_hosts(matrix_dir, _shown(matrix_dir, base))
    ran = {(result.doc["runner"], result.doc["row"]["id"]) for result in results}
    coverage = render_gpu_coverage(hosts, rows, ran)
    updates = [(Path(doc_path), "compat doc", render_block(results, waiting, coverage), MARK_START, MARK_END)]
    if sm75_doc is not None:
        page = render_page_block(results, list(rows))
        updates.append((Path(sm75_doc), "SM75 page", page, SM75_MARK_START, SM75_MARK_END))
    # Every doc is rendered before any is written: a problem with the second leaves the first as it was too.
    pending = []
    for path, what, block, start, end in updates:
        shown = _shown(path, base)
        old_text = _read_doc(path, shown, what)
        try:
            new_text = replace_between(old_text, block, start=start, end=end, shown=shown)
        except MarkerError as exc:
            raise MatrixError(str(exc)) from None
        if new_text != old_text:
            pending.append((path, what, shown, new_text))
    if not check:
        for path, what, shown, new_text in pending:
            try:
                write_text_atomic(path, new_text)
            except OSError as exc:  # a full disk, a read-only checkout: the temp file is gone, the doc as it was
                raise MatrixError(f"{shown}: cannot write the {what}: {exc.strerror or exc} (left as it was)") from None
    return bool(pending)


def _read_doc(path: Path, shown: str, what: str) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except OSError as exc:
        raise MatrixError(f"{shown}: cannot read the {what}: {exc.strerror or exc}") from exc
    except UnicodeDecodeError as exc:
        raise MatrixError(f"{shown}: the {what} is not UTF-8 text (bad byte at offset {exc.start})") from None


def lines_at_other_source(results: Sequence[LoadedResult], checkout_fingerprint: str) -> list[str]:
    """``runner/row @fingerprint`` of each result that ran with other plugin source than ``checkout_fingerprint``."""
    return [
        f"{result.doc['runner']}/{result.doc['row']['id']} @{result.doc['plugin']['source_fingerprint'][:8]}"
        for result in sorted(results, key=lambda r: r.sort_key)
        if result.doc["plugin"]["source_fingerprint"] != checkout_fingerprint
    ]


def older_source_note(results_dir: Path, root: Path, matrix_dir: Path | None = None) -> str | None:
    """A note naming the lines whose plugin source is not the checkout at ``root``'s; None when all are, or when
    ``root`` is no checkout. A note, not an error: the table shows what ran, and GPU rows are re-run less often
    than the source changes."""
    from .fingerprint import source_fingerprint

    if not ((root / "pyproject.toml").is_file() and (root / "src" / "caovan").is_dir()):
        return None
    try:
        results = collect_results(results_dir, base=root, matrix_dir=matrix_dir or Path(results_dir).parent)
        current = source_fingerprint(root)
    except (MatrixError, OSError):
        return None  # the run itself reports a bad result file
    older = lines_at_other_source(results, current)
    if not older:
        return None
    return (
        f"{len(older)} of {len(results)} lines ran with other plugin source than this checkout (@{current[:8]}): "
        f"{', '.join(older)}; re-run them to refresh"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m caovan.matrix.compat", description=__doc__.splitlines()[0])
    parser.add_argument("--results", type=Path, default=Path("matrix/results"), help="results folder")
    parser.add_argument("--doc", type=Path, default=Path("docs/compat.md"), help="markdown file with the markers")
    parser.add_argument(
        "--sm75-doc", type=Path, default=Path("docs/sm75.md"), help="the SM75 page (its releases' sections)"
    )
    parser.add_argument("--check", action="store_true", help="exit 1 if the doc is not up to date; write nothing")
    parser.add_argument(
        "--matrix-dir",
        type=Path,
        default=None,
        help="matrix rows the results must match (default: the results' parent)",
    )
    args = parser.parse_args(argv)
    try:
        changed = regenerate(
            args.results,
            args.doc,
            base=Path.cwd(),
            check=args.check,
            matrix_dir=args.matrix_dir,
            sm75_doc=args.sm75_doc,
        )
    except MatrixError as exc:
        for message in exc.messages:
            print(f"compat: error: {message}", file=sys.stderr)
        return 2
    if args.check and changed:
        print(f"compat: {args.doc} or {args.sm75_doc} is out of date: run `{GENERATOR_COMMAND}`", file=sys.stderr)
        return 1
    print(f"compat: {args.doc}, {args.sm75_doc} {'updated' if changed else 'already up to date'}")
    note = older_source_note(args.results, Path.cwd(), args.matrix_dir)
    if note:
        print(f"compat: note: {note}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
