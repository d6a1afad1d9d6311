"""The figures quoted from a ``caovan bench kernels --json`` record, computed from the record alone.

Docs quote ranges, geometric means and threshold counts over the model-shape cases, the cases under the
issue's targets (2x vLLM's CUDA-graph time, also on "layers" where recorded, 3x its eager time) and, when a
record replaces another, how each implementation's times moved. ``caovan bench summary RECORD [--against OLD]``
prints them, so every such number in the docs has a command behind it.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from caovan.bench import kernels, layer, tune
from caovan.bench.cases import MODEL_HEADS
from caovan.jsonfile import read_json
from caovan.serving.benchmark import SCHEMA as BENCHMARK_SCHEMA

#: Speedup targets of issue 3 (ours vs vLLM's spec path): CUDA-graph time and eager host-inclusive time.
GRAPH_TARGET = 2.0
EAGER_TARGET = 3.0
THRESHOLDS = (2.0, 3.0, 5.0)
TIMES = ("eager_us", "graph_us")
#: Recorded since the "layers" graph timing was added (older records lack it): summarised when present.
LAYERS = "graph_layers_us"
NAMES = {"eager_us": "eager host-inclusive", "graph_us": "CUDA graph", LAYERS: "CUDA graph, layers (cold L2)"}
TARGETS = {"eager_us": EAGER_TARGET, "graph_us": GRAPH_TARGET, LAYERS: GRAPH_TARGET}
#: The other records caovan writes, by schema, to say which command wrote the file a user passed by mistake.
OTHER_RECORDS = {
    layer.JSON_SCHEMA: "caovan bench layer --json",
    tune.JSON_SCHEMA: "caovan bench tune --json",
    BENCHMARK_SCHEMA: "caovan-sm75-benchmark --output",
}


@dataclass(frozen=True)
class Spread:
    """min, max and geometric mean of positive values."""

    low: float
    high: float
    geomean: float
    n: int

    @classmethod
    def of(cls, values: Iterable[float]) -> Spread:
        vals = list(values)
        return cls(min(vals), max(vals), statistics.geometric_mean(vals), len(vals))


class RecordError(ValueError):
    """A file that is not a usable ``bench kernels`` record; the message names the file and what is wrong."""


#: Microseconds a recorded time may take. Beyond it no measurement, and ratios of two times overflow to inf or
#: underflow to 0, which the geometric means refuse with a traceback.
TIME_RANGE_US = (1e-6, 1e9)


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value > 0


def _positive(value: Any) -> bool:
    """A recorded time: a finite number above 0 (JSON's true is a bool, Infinity parses as a float), in µs range."""
    return _number(value) and TIME_RANGE_US[0] <= value <= TIME_RANGE_US[1]


def _got(value: Any) -> str:
    """The ", got ..." of an error; a positive number out of range says what the range is."""
    low, high = TIME_RANGE_US
    return f", got {value!r}" + (f" (a time in us is {low:g} to {high:g})" if _number(value) else "")


def load_record(path: Path) -> dict[str, Any]:
    """Read and check a record: every row that ran has an id, positive eager/graph times and an accuracy verdict."""
    record = read_json(path, RecordError)
    schema = record.get("schema") if isinstance(record, dict) else None
    if schema is not None and schema != kernels.JSON_SCHEMA:
        # Records carry their schema since they were first written; one without is checked row by row below.
        # A schema of the wrong JSON type (a list, an object) is no key to look up: it is no record of ours either.
        writer = OTHER_RECORDS.get(schema, "not caovan bench kernels") if isinstance(schema, str) else "not caovan's"
        raise RecordError(
            f"{path}: a {schema!r} record ({writer}), the wrong kind: summary reads {kernels.JSON_SCHEMA!r} "
            "records of caovan bench kernels --json"
        )
    rows = record.get("cases") if isinstance(record, dict) else None
    if not isinstance(rows, list) or not rows:
        raise RecordError(f"{path}: expected an object with a non-empty 'cases' list (caovan bench kernels --json)")
    for i, row in enumerate(rows):
        where = f"{path}: cases[{i}]"
        if not isinstance(row, dict) or not isinstance(row.get("id"), str):
            raise RecordError(f"{where}: expected an object with a string 'id'")
        if row.get("error"):
            continue  # a case that failed to run is reported, not summarised
        where = f"{where} ({row['id']})"
        for impl in ("ours", "vllm"):
            times = row.get(impl)
            if not isinstance(times, dict):
                raise RecordError(f"{where}: {impl} should be an object of times, got {times!r}")
            for key in TIMES:
                if not _positive(times.get(key)):
                    raise RecordError(f"{where}: {impl}.{key} should be a finite positive number{_got(times.get(key))}")
            if times.get(LAYERS) is not None and not _positive(times[LAYERS]):
                raise RecordError(f"{where}: {impl}.{LAYERS} should be a finite positive number{_got(times[LAYERS])}")
        roof = row.get("roofline_us")
        if roof is not None and not _positive(roof):
            raise RecordError(f"{where}: roofline_us should be a finite positive number or null{_got(roof)}")
        rule = row.get("accuracy_rule")
        # Without a verdict the row cannot be counted as within or over vLLM's error.
        if not isinstance(rule, dict) or not isinstance(rule.get("passed"), bool):
            raise RecordError(f"{where}: accuracy_rule should be an object with a true/false 'passed', got {rule!r}")
    return record


def is_model_case(row: dict[str, Any]) -> bool:
    return row["id"].split("/", 1)[0] in MODEL_HEADS


def _speedup(row: dict[str, Any], key: str) -> float:
    return row["vllm"][key] / row["ours"][key]


def times_in(rows: Sequence[dict[str, Any]]) -> tuple[str, ...]:
    """The time kinds every row that ran has (eager and graph always; layers in newer records)."""
    ran = [r for r in rows if not r.get("error")]
    has_layers = bool(ran) and all(
        isinstance(r[impl].get(LAYERS), (int, float)) and r[impl][LAYERS] > 0 for r in ran for impl in ("ours", "vllm")
    )
    return (*TIMES, LAYERS) if has_layers else TIMES


def summarize(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Per time kind: our and vLLM's time spread, the speedup spread and how many cases reach each threshold."""
    ran = [r for r in rows if not r.get("error")]
    out: dict[str, Any] = {"cases": len(rows), "failed_to_run": len(rows) - len(ran)}
    if not ran:
        return out
    for key in times_in(ran):
        speedups = [_speedup(r, key) for r in ran]
        out[key] = {
            "ours": Spread.of(r["ours"][key] for r in ran),
            "vllm": Spread.of(r["vllm"][key] for r in ran),
            "speedup": Spread.of(speedups),
            "at_least": {t: sum(s >= t for s in speedups) for t in THRESHOLDS},
        }
    out["accuracy_rule_failures"] = [r["id"] for r in ran if not r["accuracy_rule"]["passed"]]
    return out


def misses(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Cases under a target, with what meeting it would take (and the DRAM roofline where recorded)."""
    found = []
    kinds = times_in(rows)
    for r in rows:
        if r.get("error"):
            continue
        for key in kinds:
            target = TARGETS[key]
            if _speedup(r, key) < target:
                roof = r.get("roofline_us")
                found.append(
                    {
                        "id": r["id"],
                        "time": key,
                        "speedup": _speedup(r, key),
                        "ours_us": r["ours"][key],
                        "vllm_us": r["vllm"][key],
                        "target": target,
                        "target_us": r["vllm"][key] / target,
                        "roofline_us": roof,
                        # the share of the roofline's bandwidth meeting the target would take, and ours
                        "target_pct_roofline": 100 * roof * target / r["vllm"][key] if roof else None,
                        "ours_pct_roofline": 100 * roof / r["ours"][key] if roof else None,
                    }
                )
    return found


def compare(new_rows: Sequence[dict[str, Any]], old_rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """new/old time ratios of the cases both records ran, per implementation and time kind."""
    old = {r["id"]: r for r in old_rows if not r.get("error")}
    both = [r for r in new_rows if not r.get("error") and r["id"] in old]
    out: dict[str, Any] = {"common_cases": len(both)}
    if both:
        in_old = times_in([old[r["id"]] for r in both])
        kinds = [k for k in times_in(both) if k in in_old]
        for impl in ("ours", "vllm"):
            out[impl] = {key: Spread.of(r[impl][key] / old[r["id"]][impl][key] for r in both) for key in kinds}
    return out


def _gpu_name(record: dict[str, Any]) -> str | None:
    gpu = record.get("gpu")
    return gpu.get("name") if isinstance(gpu, dict) else None


def unlike(record: dict[str, Any], old: dict[str, Any]) -> list[str]:
    """What differs between two records that makes their times incomparable: the GPU and the timing settings (the
    case set aside: compare keeps the cases both ran)."""
    found = []
    if _gpu_name(record) != _gpu_name(old):
        found.append(f"GPU {_gpu_name(old)} then, {_gpu_name(record)} now")
    new_s, old_s = record.get("settings"), old.get("settings")
    if isinstance(new_s, dict) and isinstance(old_s, dict):
        keys = sorted(k for k in new_s.keys() | old_s.keys() if k != "cases" and new_s.get(k) != old_s.get(k))
        found += [f"{k} {old_s.get(k)!r} then, {new_s.get(k)!r} now" for k in keys]
    return found


def _spread(s: Spread, unit: str = "", digits: int = 2) -> str:
    return f"{s.low:.{digits}f}-{s.high:.{digits}f}{unit} (geomean {s.geomean:.{digits}f}{unit})"


def format_summary(label: str, summary: dict[str, Any]) -> list[str]:
    lines = [f"{label}: {summary['cases']} cases, {summary['failed_to_run']} failed to run"]
    for key, name in NAMES.items():
        if key not in summary:
            continue
        s = summary[key]
        counts = ", ".join(f">= {t:g}x in {n}" for t, n in s["at_least"].items())
        lines += [
            f"  {name}: caovan {_spread(s['ours'], ' us', 1)}, vLLM {_spread(s['vllm'], ' us', 1)}",
            f"    speedup {_spread(s['speedup'], 'x')}; {counts} of {s['speedup'].n}",
        ]
    if "accuracy_rule_failures" in summary:
        failures = summary["accuracy_rule_failures"]
        lines.append(f"  accuracy: {len(failures)} over vLLM's error{': ' + ', '.join(failures) if failures else ''}")
    return lines


def format_report(record: dict[str, Any], old: dict[str, Any] | None = None) -> str:
    rows = record["cases"]
    model = [r for r in rows if is_model_case(r)]
    lines = format_summary("model cases", summarize(model)) + format_summary("all cases", summarize(rows))
    under = misses(rows)
    lines.append(f"under the targets (graph and layers >= {GRAPH_TARGET:g}x, eager >= {EAGER_TARGET:g}x): {len(under)}")
    for m in under:
        roof = (
            f"; roofline {m['roofline_us']:.2f} us: the target needs {m['target_pct_roofline']:.0f} % of it, "
            f"ours {m['ours_pct_roofline']:.0f} %"
            if m["roofline_us"]
            else ""
        )
        # Each number named: the target time is vLLM's divided by the target, not vLLM's own time.
        lines.append(
            f"  {m['id']} {m['time']}: caovan {m['ours_us']:.2f} us, vLLM {m['vllm_us']:.2f} us, {m['speedup']:.3f}x; "
            f"{m['target']:g}x target {m['target_us']:.2f} us{roof}"
        )
    if old is not None:
        c = compare(model, [r for r in old["cases"] if is_model_case(r)])
        if c["common_cases"]:
            lines.append(f"against the older record, model cases in both: {c['common_cases']} (new / old time)")
        else:
            lines.append("against the older record: no model case ran in both records, nothing to compare")
        differ = unlike(record, old)
        if c["common_cases"] and differ:
            # A ratio across GPUs or timing settings is no measure of a change in the code: said before the ratios.
            lines.append(f"  not like for like: {'; '.join(differ)}")
        for impl in ("ours", "vllm") if c["common_cases"] else ():
            moved = ", ".join(f"{NAMES[key]} {_spread(spread, 'x', 3)}" for key, spread in c[impl].items())
            lines.append(f"  {impl}: {moved}")
    return "\n".join(lines)
