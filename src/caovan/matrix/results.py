"""Result files ``matrix/results/<runner>/<row>.json``: layout, validation, currency, atomic writes.

One file per row and runner. It records the row spec and its fingerprint, the runner, the plugin
version and source fingerprint, the environment facts measured inside the row's venv (``python -m
caovan.matrix.envinfo``), and per tier its outcome, reason, counts and per-test outcomes. While a
row runs, the same document with ``"complete": false`` is kept as partial state outside the results
folder, rewritten after every tier, so an interrupted run resumes at the first unfinished tier.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from ..jsonfile import read_json, write_text_atomic
from . import RESULT_SCHEMA_VERSION, TIERS, MatrixError
from .schema import CUDA_TAG_PATTERN, PYTHON_PATTERN, ROW_ID_PATTERN, MatrixRow, pep440_form
from .tiers import FINAL_TIER_OUTCOMES, TIER_OUTCOMES

RUNNER_NAME_PATTERN = re.compile(r"^[a-z0-9][a-z0-9._-]{0,63}\Z")
#: Row and source fingerprints (:func:`~caovan.matrix.schema.spec_fingerprint`, ``source_fingerprint``).
FINGERPRINT_PATTERN = re.compile(r"^[0-9a-f]{16}\Z")
#: How result files write times (:func:`caovan.matrix.tiers.utc_now`).
TIMESTAMP_FORMAT = "%Y-%m-%dT%H:%M:%SZ"


@dataclass(frozen=True)
class Provenance:
    """What a result was produced from; a stored result is current only if all three match."""

    row_fingerprint: str
    plugin_version: str
    source_fingerprint: str


def result_path(results_dir: Path, runner: str, row_id: str) -> Path:
    return Path(results_dir) / runner / f"{row_id}.json"


def write_json_atomic(path: Path, data: Any) -> None:
    """JSON via a temp file in the same folder + os.replace: readers never see half a file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(data, indent=2, sort_keys=True, ensure_ascii=False) + "\n"
    write_text_atomic(path, text)


# --- validation ------------------------------------------------------------------------------

_MISSING = object()


class _Validator:
    def __init__(self, shown: str):
        self.shown = shown
        self.errors: list[str] = []

    def get(self, data: Any, dotted: str) -> Any:
        node = data
        for part in dotted.split("."):
            if not isinstance(node, Mapping) or part not in node:
                return _MISSING
            node = node[part]
        return node

    def require(
        self,
        data: Any,
        dotted: str,
        kind: type | tuple[type, ...],
        *,
        nullable: bool = False,
        optional: bool = False,
    ) -> Any:
        value = self.get(data, dotted)
        if value is _MISSING and optional:
            return _MISSING
        if value is _MISSING:
            self.errors.append(f"{self.shown}: field {dotted!r}: missing")
            return _MISSING
        if value is None and nullable:
            return None
        if not isinstance(value, kind) or isinstance(value, bool) and kind is not bool:
            names = " or ".join(k.__name__ for k in (kind if isinstance(kind, tuple) else (kind,)))
            self.errors.append(
                f"{self.shown}: field {dotted!r}: expected "
                f"{names}{' or null' if nullable else ''}, "
                f"got {_kind(value)} {value!r:.60}"
            )
            return _MISSING
        return value

    def text(self, data: Any, dotted: str, valid: Callable[[str], bool], what: str) -> Any:
        """A required string field that ``valid`` accepts; else one error saying what it should be."""
        value = self.require(data, dotted, str)
        if value is not _MISSING and not valid(value):
            self.errors.append(f"{self.shown}: field {dotted!r}: {value!r:.60} is not {what}")
            return _MISSING
        return value


def _kind(value: Any) -> str:
    return "null" if value is None else type(value).__name__


def _is_version(text: str) -> bool:
    # The matrix's own rule for pins (results record the row's pins and the plugin's version in that form).
    return pep440_form(text) == text


def _is_timestamp(text: str) -> bool:
    try:
        datetime.strptime(text, TIMESTAMP_FORMAT)
    except ValueError:
        return False
    return True


def validate_result(data: Any, shown: str) -> list[str]:
    """Problems with a result document, each naming the file and the field; empty if usable."""
    check = _Validator(shown)
    if not isinstance(data, Mapping):
        return [f"{shown}: expected a JSON object at the top, got {_kind(data)}"]
    version = check.require(data, "schema_version", int)
    if version is not _MISSING and version > RESULT_SCHEMA_VERSION:
        # Its other fields follow a layout this checkout does not know: checking them would only mislead.
        return [
            f"{shown}: field 'schema_version': {version} — written by a newer caovan than this checkout "
            f"(which reads version {RESULT_SCHEMA_VERSION}); update the checkout"
        ]
    if version is not _MISSING and version != RESULT_SCHEMA_VERSION:
        check.errors.append(
            f"{shown}: field 'schema_version': {version} is not the supported version "
            f"{RESULT_SCHEMA_VERSION} "
            "(rerun the row with this checkout)"
        )
    # A missing or malformed object is one message, not one per field inside it.
    present = {name for name in ("row", "plugin", "env") if check.require(data, name, Mapping) is not _MISSING}
    if "row" in present:
        check.text(data, "row.id", ROW_ID_PATTERN.match, "a row id")
        check.text(data, "row.vllm", _is_version, "a PEP 440 version")
        check.text(data, "row.torch", _is_version, "a PEP 440 version")
        check.text(data, "row.python", PYTHON_PATTERN.match, 'a Python version like "3.11"')
        check.text(data, "row.cuda", CUDA_TAG_PATTERN.match, "a CUDA/torch build tag like cu130, cpu")
    row_tiers = check.require(data, "row.tiers", list) if "row" in present else _MISSING
    if row_tiers is not _MISSING:
        for index, item in enumerate(row_tiers, start=1):
            if not isinstance(item, str) or item not in TIERS:
                check.errors.append(
                    f"{shown}: field 'row.tiers': item {index}: {item!r:.60} is not a tier (known: {', '.join(TIERS)})"
                )
                row_tiers = _MISSING
    check.text(data, "row_fingerprint", FINGERPRINT_PATTERN.match, "a fingerprint (16 hex digits)")
    runner = check.require(data, "runner", str)
    if runner is not _MISSING and not RUNNER_NAME_PATTERN.match(runner):
        check.errors.append(f"{shown}: field 'runner': {runner!r} is not a runner name")
    if "plugin" in present:
        check.text(data, "plugin.version", _is_version, "a PEP 440 version")
        check.text(data, "plugin.source_fingerprint", FINGERPRINT_PATTERN.match, "a fingerprint (16 hex digits)")
    check.require(data, "complete", bool)
    if "env" in present:
        for name in ("python", "gpu"):
            check.require(data, f"env.{name}", str)
        for name in ("vllm", "torch", "triton", "torch_cuda", "gpu_arch", "family", "family_reason"):
            check.require(data, f"env.{name}", str, nullable=True)
    # compat reads install.mode to mark run-here results (the host's environment, not a row venv).
    if check.require(data, "install", Mapping) is not _MISSING:
        check.require(data, "install.mode", str, nullable=True, optional=True)
    for name in ("started_at", "finished_at"):
        check.text(data, name, _is_timestamp, "a UTC time like 2026-01-01T00:00:00Z")
    tiers = check.require(data, "tiers", Mapping)
    if tiers is not _MISSING:
        for tier, record in tiers.items():
            if tier not in TIERS:
                check.errors.append(f"{shown}: field 'tiers.{tier}': unknown tier (known: {', '.join(TIERS)})")
                continue
            if not isinstance(record, Mapping):
                check.errors.append(f"{shown}: field 'tiers.{tier}': expected an object, got {record!r:.60}")
                continue
            outcome = check.require(data, f"tiers.{tier}.outcome", str)
            if outcome is not _MISSING and outcome not in TIER_OUTCOMES:
                check.errors.append(
                    f"{shown}: field 'tiers.{tier}.outcome': {outcome!r} is not one of {', '.join(TIER_OUTCOMES)}"
                )
            check.require(data, f"tiers.{tier}.reason", str, nullable=True)
            # What a tier found out (the sm75 tier's parts): objects by part name; the reader of each part checks it.
            findings = check.require(data, f"tiers.{tier}.findings", Mapping, optional=True)
            if findings is not _MISSING:
                for part, content in findings.items():
                    if not isinstance(content, Mapping):
                        check.errors.append(
                            f"{shown}: field 'tiers.{tier}.findings.{part}': expected an object, got {_kind(content)}"
                        )
        if row_tiers is not _MISSING:
            for tier in row_tiers:
                if tier not in tiers:
                    check.errors.append(f"{shown}: field 'tiers.{tier}': missing (the row lists this tier)")
            for tier in tiers:
                if tier in TIERS and tier not in row_tiers:
                    check.errors.append(
                        f"{shown}: field 'tiers.{tier}': the result's row does not list this tier "
                        f"(row.tiers: {', '.join(row_tiers)})"
                    )
    return check.errors


def load_result(path: Path, *, shown: str | None = None) -> dict[str, Any]:
    """A validated result document; :class:`MatrixError` names the file and the field otherwise."""
    shown = shown or str(path)
    data = read_json(path, MatrixError, shown=shown)
    errors = validate_result(data, shown)
    if errors:
        raise MatrixError(errors)
    return data


# --- currency and resuming -------------------------------------------------------------------


def provenance_of(doc: Mapping[str, Any]) -> Provenance | None:
    try:
        return Provenance(doc["row_fingerprint"], doc["plugin"]["version"], doc["plugin"]["source_fingerprint"])
    except (KeyError, TypeError):
        return None


def _install_of(install: Any) -> tuple[Any, Any]:
    """What a result's ``install`` says about where its tiers ran: the mode and, for run-here, the
    interpreter (no mode: an isolated venv of the row, made by ``nox -s matrix``)."""
    install = install if isinstance(install, Mapping) else {}
    return install.get("mode"), install.get("python")


def _identity_of(install: Any) -> Any:
    return install.get("identity") if isinstance(install, Mapping) else None


def _describe_install(install: tuple[Any, Any]) -> str:
    mode, python = install
    if mode is None:
        return "an isolated venv of the row"
    if mode == "current-environment":
        return f"the host's environment ({python})"
    return f"install mode {mode!r}" + (f" ({python})" if python else "")


def stale_reason(
    doc: Mapping[str, Any], provenance: Provenance, install: Mapping[str, Any] | None = None
) -> str | None:
    """Why the tier records of ``doc`` do not hold for this row and checkout, run in ``install`` (this
    run's install note; None: a row venv); None when they do."""
    version = doc.get("schema_version")
    if version != RESULT_SCHEMA_VERSION:
        return f"written in result layout {version!r}, this checkout writes {RESULT_SCHEMA_VERSION}"
    theirs = provenance_of(doc)
    if theirs is None:
        return "it records no row or plugin fingerprint"
    if theirs.row_fingerprint != provenance.row_fingerprint:
        return (
            f"recorded for other row settings (row fingerprint {theirs.row_fingerprint}, "
            f"now {provenance.row_fingerprint})"
        )
    if theirs.plugin_version != provenance.plugin_version:
        return f"recorded with plugin {theirs.plugin_version} (this checkout: {provenance.plugin_version})"
    if theirs.source_fingerprint != provenance.source_fingerprint:
        return (
            f"recorded with other source (source fingerprint {theirs.source_fingerprint}, "
            f"this checkout's {provenance.source_fingerprint})"
        )
    # One result records one install: tiers of another install kept beside this run's would be shown
    # as run where they were not.
    theirs_install, ours_install = _install_of(doc.get("install")), _install_of(install)
    if theirs_install != ours_install:
        return (
            f"they ran in {_describe_install(theirs_install)}, this run in {_describe_install(ours_install)} "
            "(a result file does not mix installs)"
        )
    # A committed result from another machine or clone, or one made before a dependency resolved anew, says
    # nothing about this install (caovan.matrix.install_identity).
    theirs_id, ours_id = _identity_of(doc.get("install")), _identity_of(install)
    if theirs_id != ours_id:
        if theirs_id is None:
            return "it records no install identity, so it was not made by this checkout's install"
        return (
            f"made by another install (identity {theirs_id}, this run's {ours_id}: another clone or machine, "
            "or other packages resolved)"
        )
    return None


def is_current(doc: Mapping[str, Any] | None, provenance: Provenance, install: Mapping[str, Any] | None = None) -> bool:
    """Same schema, row fingerprint, plugin version, plugin source fingerprint and install."""
    return doc is not None and stale_reason(doc, provenance, install) is None


def _final_records(doc: Mapping[str, Any] | None) -> dict[str, dict[str, Any]]:
    """The tier records of ``doc`` that need no rerun where ``doc`` holds (pass / fail / skipped / error)."""
    tiers = doc.get("tiers") if doc is not None else None
    if not isinstance(tiers, Mapping):
        return {}
    return {
        tier: dict(record)
        for tier, record in tiers.items()
        if isinstance(record, Mapping) and record.get("outcome") in FINAL_TIER_OUTCOMES
    }


@dataclass
class RowPlan:
    """What a matrix run does for one row: tiers to run, tiers to carry over, or nothing."""

    selected: list[str]
    to_run: list[str]
    #: Records carried over: selected tiers already done, and the stored records of tiers not selected.
    reused: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: The stored result already covers every selected tier with this checkout: nothing to do.
    up_to_date: bool = False
    ignored: list[str] = field(default_factory=list)
    #: The partial state of an interrupted run of this checkout is carried on (its start time too).
    resumes_partial: bool = False
    #: Tiers whose stored record is neither reused nor rerun on request, and why: a selected one runs
    #: again, any other one is recorded as not run.
    not_kept: dict[str, str] = field(default_factory=dict)


def plan_row(
    row: MatrixRow,
    provenance: Provenance,
    *,
    selected_tiers: Sequence[str] | None,
    stored: Mapping[str, Any] | None,
    partial: Mapping[str, Any] | None,
    redo: bool,
    install: Mapping[str, Any] | None = None,
) -> RowPlan:
    """The work for a row, from its stored result and partial state (either may be None/stale).

    ``redo`` reruns the selected tiers only: every other tier keeps its stored record where that
    holds for this row and checkout, as it does without ``redo``. ``install`` is this run's install
    note (None: a row venv); records of another install are neither reused nor kept.
    """
    wanted = list(row.tiers) if selected_tiers is None else [t for t in row.tiers if t in selected_tiers]
    ignored = [] if selected_tiers is None else [t for t in selected_tiers if t not in row.tiers]
    why = stale_reason(stored, provenance, install) if stored is not None else None
    stored_final = _final_records(stored)
    stored_done = stored_final if why is None else {}
    resumes_partial = is_current(partial, provenance, install)
    partial_done = _final_records(partial) if resumes_partial else {}
    if redo:
        to_run = wanted
    elif resumes_partial:
        # An interrupted run of this checkout: a tier it was to run and did not finish runs (again),
        # even if the stored result has it, for that run may have been a redo of it.
        assert partial is not None
        meant = partial.get("selected_tiers")
        meant = meant if isinstance(meant, list) else row.tiers
        to_run = [t for t in wanted if t not in partial_done and (t in meant or t not in stored_done)]
    else:
        to_run = [t for t in wanted if t not in stored_done]
    # The partial state is newer than the stored result (the state is removed once a result is written).
    available = {**stored_done, **partial_done}
    reused = {t: available[t] for t in row.tiers if t not in to_run and t in available}
    not_kept = {
        t: why
        for t in row.tiers
        if why is not None and t in stored_final and t not in reused and not (redo and t in to_run)
    }
    up_to_date = (
        not redo and not resumes_partial and stored is not None and stored.get("complete") is True and not to_run
    )
    return RowPlan(
        selected=wanted,
        to_run=to_run,
        reused=reused,
        up_to_date=up_to_date,
        ignored=ignored,
        resumes_partial=resumes_partial,
        not_kept=not_kept,
    )


def build_result(
    row: MatrixRow,
    provenance: Provenance,
    *,
    runner: str,
    env: Mapping[str, Any],
    tiers: Mapping[str, Mapping[str, Any]],
    selected: Iterable[str],
    started_at: str,
    finished_at: str,
    complete: bool,
    install: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The result document. Row tiers that have no record are marked ``not-run`` with the reason."""
    if not RUNNER_NAME_PATTERN.match(runner):
        raise MatrixError(f"runner name {runner!r} is not a slug (lowercase letters, digits, '.', '_', '-')")
    selected = list(selected)
    tier_records: dict[str, Any] = {}
    for tier in row.tiers:
        if tier in tiers:
            tier_records[tier] = dict(tiers[tier])
        elif complete:
            tier_records[tier] = {
                "outcome": "not-run",
                "reason": f"not selected in this run (tiers run: {', '.join(selected) or 'none'})",
            }
    return {
        "schema_version": RESULT_SCHEMA_VERSION,
        "complete": complete,
        "row": row.spec(),
        "row_fingerprint": provenance.row_fingerprint,
        "runner": runner,
        "plugin": {
            "version": provenance.plugin_version,
            "source_fingerprint": provenance.source_fingerprint,
        },
        "env": dict(env),
        "selected_tiers": selected,
        "tiers": tier_records,
        "install": dict(install or {}),
        "started_at": started_at,
        "finished_at": finished_at,
    }


def read_stored_result(path: Path, shown: str) -> dict[str, Any] | None:
    """The stored result a run plans from and then replaces; None when there is none.

    A file that is not a result (cut short, a bad hand edit, a merge conflict) is :class:`MatrixError`, its
    problems naming the file: it is not run over, as whoever broke it may want what it held. A result of an older
    layout is no problem here: the plan finds it stale and runs the row again.
    """
    if not Path(path).exists():
        return None
    advice = (
        f"a broken result file is not run over: restore it (git checkout -- {shown}) or delete it, "
        "then run again; nothing was run"
    )
    try:
        data = read_json(path, MatrixError, shown=shown)
    except MatrixError as exc:
        raise MatrixError([*exc.messages[:-1], f"{exc.messages[-1]}; {advice}"]) from None
    version = data.get("schema_version") if isinstance(data, Mapping) else None
    if isinstance(version, int) and not isinstance(version, bool) and version < RESULT_SCHEMA_VERSION:
        return dict(data)
    errors = validate_result(data, shown)
    if errors:
        raise MatrixError([*errors[:-1], f"{errors[-1]}; {advice}"])
    return data
