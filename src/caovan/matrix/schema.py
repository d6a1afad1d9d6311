"""Matrix rows: the YAML files under ``matrix/`` and their validation.

A matrix file is a mapping with one key, ``rows``, holding a list of rows::

    rows:
      - id: vllm-0.21.0        # unique across files; names the nox session and the result file
        vllm: "0.21.0"          # exact pins; quote them (YAML reads 2.11 as a number)
        torch: "2.11.0"
        python: "3.11"
        cuda: cu130             # CUDA build tag of that torch (PyPI's torch 2.11.0 is cu130)
        tiers: [discovery, numerics, sm75, kernel, serve]
        runner_labels: [self-hosted, linux, sm75]
        # optional:
        torch_index: https://download.pytorch.org/whl/cu130  # torch from here (hosts that reach it)
        extra_requirements: ["flashinfer-python==0.5.2"]      # more pins for this row's venv
        overrides:                                            # replace a pin of vLLM's own (uv --override)
          - requirement: "flashinfer-python==0.7.4"
            reason: "vLLM 0.34.0 pins 0.7.3, which the package index here does not serve"

Every problem becomes one message naming the file, the line, the row and the field; all of them are
collected before :class:`~caovan.matrix.MatrixError` is raised, so one run shows everything to fix.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from packaging.requirements import InvalidRequirement, Requirement
from packaging.version import InvalidVersion, Version

from . import TIERS, MatrixError
from .pin_overrides import PinOverride, check_overrides

# \Z, not $: "$" also matches before a final newline ("x\n" would pass as an id and name a session and a file).
ROW_ID_PATTERN = re.compile(r"^[a-z0-9][a-z0-9._-]{0,63}\Z")
PYTHON_PATTERN = re.compile(r"^3\.\d{1,2}\Z")
CUDA_TAG_PATTERN = re.compile(r"^(cu\d{2,3}|cpu|rocm\d+(\.\d+)*)\Z")
RUNNER_LABEL_PATTERN = re.compile(r"^[A-Za-z0-9._-]+\Z")
#: The Python versions a row may name: from pyproject.toml's requires-python (">=3.10"; a unit test keeps the
#: two equal) up to the newest release (raise it when a new Python comes out).
OLDEST_PYTHON: tuple[int, int] = (3, 10)
NEWEST_PYTHON: tuple[int, int] = (3, 15)

REQUIRED_FIELDS: tuple[str, ...] = (
    "id",
    "vllm",
    "torch",
    "python",
    "cuda",
    "tiers",
    "runner_labels",
)
OPTIONAL_FIELDS: tuple[str, ...] = ("torch_index", "extra_requirements", "overrides")
#: Fields that do not change what a row installs or runs, so they stay out of its fingerprint:
#: moving a row to other runner labels must not invalidate results that are still true.
FINGERPRINT_EXCLUDED_FIELDS: frozenset[str] = frozenset({"runner_labels"})


@dataclass(frozen=True)
class MatrixRow:
    """One validated row: a vLLM release with its torch/Python/CUDA pins and the tiers to run
    against it.
    """

    id: str
    vllm: str
    torch: str
    python: str
    cuda: str
    tiers: tuple[str, ...]
    runner_labels: tuple[str, ...]
    torch_index: str | None = None
    extra_requirements: tuple[str, ...] = ()
    overrides: tuple[PinOverride, ...] = ()
    #: ``file:line`` the row came from (diagnostics only; not part of the spec).
    origin: str = field(default="", compare=False)

    def spec(self) -> dict[str, Any]:
        """The row as plain JSON data (what result files record), without its origin."""
        spec = {
            "id": self.id,
            "vllm": self.vllm,
            "torch": self.torch,
            "python": self.python,
            "cuda": self.cuda,
            "tiers": list(self.tiers),
            "runner_labels": list(self.runner_labels),
            "torch_index": self.torch_index,
            "extra_requirements": list(self.extra_requirements),
        }
        # Only where there are some: rows without overrides keep the fingerprints (and results) they had before
        # the field existed.
        if self.overrides:
            spec["overrides"] = [{"requirement": o.requirement, "reason": o.reason} for o in self.overrides]
        return spec

    def fingerprint(self) -> str:
        return spec_fingerprint(self.spec())

    def install_pins(self) -> list[str]:
        """Requirements that pin this row's venv (the plugin and its test extra come on top)."""
        return [f"vllm=={self.vllm}", f"torch=={self.torch}", *self.extra_requirements]

    def override_pins(self) -> list[str]:
        """Lines of the overrides file (``uv pip install --override FILE``); empty when the row has none."""
        return [o.requirement for o in self.overrides]


def spec_fingerprint(spec: dict[str, Any]) -> str:
    """Hash of the parts of a row spec that decide what gets installed and run (sha256, 16 hex
    digits).
    """
    relevant = {k: v for k, v in spec.items() if k not in FINGERPRINT_EXCLUDED_FIELDS}
    canonical = json.dumps(relevant, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]


def pep440_form(text: str) -> str | None:
    """``text`` as PEP 440 writes the version it names (``v0.21`` -> ``0.21``), or None if it names none.

    Pins must be written in this form: it is what pip and envinfo report, and what the result files record.
    """
    try:
        return str(Version(text))
    except InvalidVersion:
        return None


def _type_name(value: Any) -> str:
    if value is None:
        return "null"
    return {
        bool: "boolean",
        int: "integer",
        float: "number",
        str: "string",
        list: "list",
        dict: "mapping",
    }.get(type(value), type(value).__name__)


def _describe(value: Any) -> str:
    if value is None:
        return "null"
    text = repr(value)
    return f"{_type_name(value)} {text if len(text) <= 40 else text[:37] + '...'}"


class _RowChecker:
    """Checks one row mapping; its messages already carry file, line, row and field."""

    def __init__(
        self,
        where: str,
        field_lines: dict[str, int],
        row_line: int,
        errors: list[str],
        field_texts: dict[str, str] | None = None,
    ):
        self.where = where
        self.field_lines = field_lines
        #: Each scalar field's text as written (YAML reads 3.10 as the number 3.1; hints quote the text).
        self.field_texts = field_texts or {}
        self.row_line = row_line
        self.errors = errors

    def error(self, name: str | None, problem: str) -> None:
        line = self.field_lines.get(name, self.row_line) if name else self.row_line
        prefix = f"{self.where.format(line=line)}: field {name!r}: " if name else f"{self.where.format(line=line)}: "
        self.errors.append(prefix + problem)

    def string(self, row: dict[str, Any], name: str, *, hint: str = "") -> str | None:
        value = row[name]
        if not isinstance(value, str):
            self.error(name, f"expected a string, got {_describe(value)}{hint}")
            return None
        if not value.strip():
            self.error(name, "must not be empty")
            return None
        return value

    def pattern(
        self, row: dict[str, Any], name: str, pattern: re.Pattern[str], what: str, hint: str = ""
    ) -> str | None:
        value = self.string(row, name, hint=hint)
        if value is not None and not pattern.match(value):
            self.error(name, f"{value!r} is not {what}")
            return None
        return value

    def quote_hint(self, row: dict[str, Any], name: str, what: str) -> str:
        if not isinstance(row[name], (int, float)) or isinstance(row[name], bool):
            return ""
        return f' (quote {what} in YAML: {name}: "{self.field_texts.get(name, row[name])}")'

    def version(self, row: dict[str, Any], name: str) -> str | None:
        value = self.string(row, name, hint=self.quote_hint(row, name, "versions"))
        if value is None:
            return None
        canonical = pep440_form(value)
        if canonical is None:
            self.error(name, f'{value!r} is not an exact version (e.g. "0.21.0"; ranges are not pins)')
            return None
        # The pin goes into `name==value` and the result files: only the form PEP 440 writes compares
        # equal to what pip and envinfo report (no "v" prefix, no spaces).
        if canonical != value:
            self.error(name, f"{value!r} is not written as PEP 440 writes it: {canonical!r}")
            return None
        # pip reads ==0.21 as ==0.21.0, but the installed version (and so the result file) says 0.21.0: a short pin
        # would never match its own results.
        release = Version(value).release
        if len(release) < 3:
            padded = ".".join(str(part) for part in (*release, 0, 0)[:3])
            self.error(name, f'{value!r} is not an exact version: write every part, as pip reports it ("{padded}")')
            return None
        return value

    def string_list(
        self, row: dict[str, Any], name: str, *, allowed: Iterable[str] | None = None
    ) -> tuple[str, ...] | None:
        value = row[name]
        if not isinstance(value, list):
            self.error(name, f"expected a list of strings, got {_describe(value)}")
            return None
        if not value and name != "extra_requirements":
            self.error(name, "must not be empty")
            return None
        items: list[str] = []
        ok = True
        for index, item in enumerate(value):
            if not isinstance(item, str):
                self.error(name, f"item {index + 1}: expected a string, got {_describe(item)}")
                ok = False
            elif item in items:
                self.error(name, f"item {index + 1}: {item!r} is listed twice")
                ok = False
            elif allowed is not None and item not in allowed:
                self.error(
                    name,
                    f"item {index + 1}: unknown {name[:-1]} {item!r} (known: {', '.join(allowed)})",
                )
                ok = False
            else:
                items.append(item)
        return tuple(items) if ok else None


def _mapping_key_lines(node: yaml.MappingNode, where: str, errors: list[str]) -> dict[str, int]:
    """Line of every key of a YAML mapping node; duplicate keys (which PyYAML silently merges) are
    errors.
    """
    lines: dict[str, int] = {}
    for key_node, _ in node.value:
        key = key_node.value if isinstance(key_node, yaml.ScalarNode) else str(key_node.value)
        line = key_node.start_mark.line + 1
        if key in lines:
            errors.append(f"{where.format(line=line)}: field {key!r} is given twice (first at line {lines[key]})")
        else:
            lines[key] = line
    return lines


def _display(path: Path, base: Path | None) -> str:
    if base is not None:
        try:
            return str(path.resolve().relative_to(base.resolve()))
        except ValueError:
            pass
    return str(path)


def load_matrix_file(path: Path, errors: list[str], *, base: Path | None = None) -> list[MatrixRow]:
    """Rows of one file; problems are appended to ``errors`` (the valid rows are still returned)."""
    shown = _display(path, base)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        errors.append(f"{shown}: cannot read: {exc.strerror or exc}")
        return []
    except UnicodeDecodeError as exc:
        errors.append(f"{shown}: not UTF-8 text (bad byte at offset {exc.start})")
        return []
    try:
        document = yaml.compose(text, Loader=yaml.SafeLoader)
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        problem = getattr(exc, "problem", None) or str(exc)
        at = f":{mark.line + 1}:{mark.column + 1}" if mark is not None else ""
        errors.append(f"{shown}{at}: malformed YAML: {problem}")
        return []
    if not isinstance(data, dict) or not isinstance(document, yaml.MappingNode):
        errors.append(f"{shown}:1: expected a mapping with a 'rows' list at the top, got {_type_name(data)}")
        return []
    top_lines = _mapping_key_lines(document, shown + ":{line}", errors)
    for key in data:
        if key != "rows":
            errors.append(f"{shown}:{top_lines.get(str(key), 1)}: unknown top-level field {key!r} (only 'rows')")
    if "rows" not in data:
        errors.append(f"{shown}:1: missing top-level field 'rows'")
        return []
    # PyYAML keeps the last of duplicate keys (reported above), so the node must be the last one too;
    # a 'rows' that came in through a merge key (<<:) has no node of its own here.
    rows_nodes = [v for k, v in document.value if isinstance(k, yaml.ScalarNode) and k.value == "rows"]
    rows_node = rows_nodes[-1] if rows_nodes else None
    if rows_node is None:
        errors.append(f"{shown}:1: field 'rows': write it out at the top, not through a merge key (<<)")
        return []
    if not isinstance(data["rows"], list) or not isinstance(rows_node, yaml.SequenceNode):
        errors.append(
            f"{shown}:{top_lines['rows']}: field 'rows': expected a list of rows, got {_describe(data['rows'])}"
        )
        return []
    if not data["rows"]:
        errors.append(f"{shown}:{top_lines['rows']}: field 'rows': no rows (a matrix file lists at least one)")
        return []

    rows: list[MatrixRow] = []
    for index, (raw, node) in enumerate(zip(data["rows"], rows_node.value, strict=True), start=1):
        row_line = node.start_mark.line + 1
        label = f"row {index}"
        if isinstance(raw, dict) and isinstance(raw.get("id"), str):
            label += f" (id {raw['id']!r})"
        where = f"{shown}:{{line}}: {label}"
        if not isinstance(raw, dict) or not isinstance(node, yaml.MappingNode):
            errors.append(f"{shown}:{row_line}: {label}: expected a mapping of fields, got {_describe(raw)}")
            continue
        texts = {
            k.value: v.value for k, v in node.value if isinstance(k, yaml.ScalarNode) and isinstance(v, yaml.ScalarNode)
        }
        checker = _RowChecker(where, _mapping_key_lines(node, where, errors), row_line, errors, texts)
        row = _check_row(raw, checker)
        if row is not None:
            rows.append(MatrixRow(**row, origin=f"{shown}:{row_line}"))
    return rows


def _check_row(raw: dict[str, Any], check: _RowChecker) -> dict[str, Any] | None:
    before = len(check.errors)
    for name in raw:
        if name not in REQUIRED_FIELDS and name not in OPTIONAL_FIELDS:
            check.error(str(name), f"unknown field (known: {', '.join(REQUIRED_FIELDS + OPTIONAL_FIELDS)})")
    for name in REQUIRED_FIELDS:
        if name not in raw:
            check.error(None, f"missing field {name!r}")
    row: dict[str, Any] = {}
    present = [n for n in REQUIRED_FIELDS + OPTIONAL_FIELDS if n in raw]
    for name in present:
        if name == "id":
            row[name] = check.pattern(raw, name, ROW_ID_PATTERN, "a row id (lowercase letters, digits, '.', '_', '-')")
        elif name in ("vllm", "torch"):
            row[name] = check.version(raw, name)
        elif name == "python":
            hint = check.quote_hint(raw, name, "it")
            python = check.pattern(raw, name, PYTHON_PATTERN, 'a Python version like "3.11"', hint)
            if python is not None and not OLDEST_PYTHON <= tuple(map(int, python.split("."))) <= NEWEST_PYTHON:
                check.error(
                    name,
                    f"{python!r} is not a Python caovan supports "
                    f"({'.'.join(map(str, OLDEST_PYTHON))} to {'.'.join(map(str, NEWEST_PYTHON))})",
                )
                python = None
            row[name] = python
        elif name == "cuda":
            row[name] = check.pattern(raw, name, CUDA_TAG_PATTERN, "a CUDA/torch build tag like cu130, cu128, cpu")
        elif name == "tiers":
            row[name] = check.string_list(raw, name, allowed=TIERS)
        elif name == "runner_labels":
            labels = check.string_list(raw, name)
            if labels is not None:
                for label in labels:
                    if not RUNNER_LABEL_PATTERN.match(label):
                        check.error(
                            name,
                            f"{label!r} is not a runner label (letters, digits, '.', '_', '-')",
                        )
            row[name] = labels
        elif name == "torch_index":
            if raw[name] is None:
                row[name] = None
                continue
            url = check.string(raw, name)
            if url is not None and not url.startswith(("https://", "http://", "file://")):
                check.error(name, f"{url!r} is not an index URL (https://..., http://... or file://...)")
            row[name] = url
        elif name == "extra_requirements":
            requirements = check.string_list(raw, name)
            for requirement in requirements or ():
                try:
                    parsed = Requirement(requirement)
                except InvalidRequirement as exc:
                    check.error(name, f"{requirement!r} is not a requirement: {exc}")
                    continue
                # vllm and torch are the row's own pins: a second pin here would contradict or repeat them.
                if parsed.name.lower() in ("vllm", "torch"):
                    check.error(name, f"{requirement!r}: {parsed.name.lower()} is pinned by the row's own field")
            row[name] = requirements
        elif name == "overrides":
            row[name] = check_overrides(raw[name], check.error, row.get("extra_requirements") or ())
    if len(check.errors) != before:
        return None
    return row


def matrix_files(matrix_dir: Path) -> list[Path]:
    """The matrix files: ``*.yaml`` / ``*.yml`` directly in ``matrix_dir`` (results live in a
    subfolder).
    """
    if not matrix_dir.is_dir():
        # Absolute: the folder is looked up from the working directory, which the message must not leave implicit.
        raise MatrixError(
            f"no matrix folder at {Path(matrix_dir).resolve()}: run from the repository root, "
            "or name the folder (--matrix-dir) or the matrix files"
        )
    files = sorted(p for p in matrix_dir.iterdir() if p.is_file() and p.suffix in (".yaml", ".yml"))
    if not files:
        raise MatrixError(f"{matrix_dir}: no matrix files (*.yaml) in this folder")
    return files


def load_matrix(paths: Iterable[Path], *, base: Path | None = None) -> list[MatrixRow]:
    """All rows of all files, in file order; raises :class:`MatrixError` listing every problem
    found.
    """
    errors: list[str] = []
    rows: list[MatrixRow] = []
    first_seen: dict[str, str] = {}
    for path in paths:
        for row in load_matrix_file(Path(path), errors, base=base):
            if row.id in first_seen:
                errors.append(f"{row.origin}: row id {row.id!r} is defined twice (first at {first_seen[row.id]})")
                continue
            first_seen[row.id] = row.origin
            rows.append(row)
    if errors:
        raise MatrixError(errors)
    return rows
