"""``docs/performance.md``'s table and plot, made from the committed ``caovan bench e2e`` records only.

    python -m caovan.bench.e2e_report RECORDS_DIR --doc docs/performance.md --plot FILE.png   # nox -s performance
    python -m caovan.bench.e2e_report RECORDS_DIR --doc docs/performance.md --check          # is the doc current?

Reads every ``RECORDS_DIR/*/e2e.json`` (one per cudagraph mode, see :mod:`caovan.bench.e2e`), writes the table
between the doc's markers and, with ``--plot``, a bar chart of decode tokens/s, caovan off and on, per mode and
concurrency (matplotlib, imported only for the plot). Nothing is written when a record is unreadable.
"""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tabulate import tabulate

from caovan.bench.e2e import LOAD, SCHEMA, benchmark_record_name
from caovan.doc_markers import MarkerError, replace_between
from caovan.jsonfile import read_json, write_text_atomic

MARK_START = "<!-- START e2e-table -->"
MARK_END = "<!-- END e2e-table -->"
#: Order of the modes in the table and the plot: what SM75 users run first, then vLLM's default.
MODE_ORDER = ("PIECEWISE", "FULL_AND_PIECEWISE")


class ReportError(ValueError):
    """A record or the doc cannot be used; the message names the file."""


@dataclass(frozen=True)
class E2ERecord:
    path: Path
    data: dict[str, Any]

    @property
    def mode(self) -> str:
        return self.data["settings"]["cudagraph_mode"]

    @property
    def setup(self) -> str:
        """The mode, and the tensor parallelism when the run split the model over GPUs."""
        tp = self.data["settings"].get("tensor_parallel_size", 1)
        return self.mode if tp == 1 else f"{self.mode}, TP={tp}"


def load_records(folder: Path) -> list[E2ERecord]:
    paths = sorted(folder.glob("*/e2e.json"))
    if not paths:
        raise ReportError(f"{folder}: no */e2e.json (made by `caovan bench e2e --out {folder}`)")
    records = []
    for path in paths:
        record = read_json(path, ReportError)
        if not isinstance(record, dict) or record.get("schema") != SCHEMA:
            raise ReportError(f"{path}: not a {SCHEMA} record")
        records.append(E2ERecord(path, record))
    setups = [r.setup for r in records]
    if len(set(setups)) != len(setups):
        raise ReportError(f"{folder}: two records of one setup ({', '.join(sorted(setups))})")
    return sorted(records, key=lambda r: (r.data["settings"].get("tensor_parallel_size", 1), _mode_rank(r.mode)))


def _mode_rank(mode: str) -> tuple[int, str]:
    return (MODE_ORDER.index(mode) if mode in MODE_ORDER else len(MODE_ORDER), mode)


def _rate(rates: dict[str, float]) -> str:
    return f"{rates['median']:.1f} ({rates['min']:.1f}–{rates['max']:.1f})"


def table(records: list[E2ERecord], doc_folder: Path) -> str:
    rows = []
    for record in records:
        for row in record.data["summary"]:
            rows.append(
                [
                    record.setup,
                    row["concurrency"],
                    _rate(row["baseline_tok_s"]),
                    _rate(row["caovan_tok_s"]),
                    f"{row['ratio']:.2f}×",
                ]
            )
    headers = ["cudagraph mode", "concurrency", "caovan off: tok/s", "caovan on: tok/s", "on / off"]
    lines = [tabulate(rows, headers=headers, tablefmt="github", disable_numparse=True), ""]
    lines.append("Output tokens/s: median over the repeats (min–max). Measured on:")
    lines.append("")
    for record in records:
        data, settings, versions = record.data, record.data["settings"], record.data["versions"]
        link = Path(os.path.relpath(record.path, doc_folder)).as_posix()
        lines.append(
            f"- {record.setup}: {data['gpu']}, vLLM {versions['vllm']}, torch {versions['torch']}, "
            f"caovan {versions['caovan']}, {data['written_at'][:10]}; {settings['repeats']} repeats of "
            f"concurrency × {settings['requests_per_slot']} requests, {settings['max_tokens']} tokens out; "
            f"{_acceptance(record)}record [`{link}`]({link})"
        )
    for record in records:
        lines.extend(_step_table(record))
    return "\n".join(lines)


def _both_runs(record: E2ERecord, key: str) -> tuple[Any, Any] | None:
    """The two runs' ``key`` entries (caovan off, on), or None unless both runs are there and have one."""
    found = {run["label"]: run.get(key) for run in record.data.get("runs", [])}
    if set(found) != {"baseline", "caovan"} or None in found.values():
        return None
    return found["baseline"], found["caovan"]


def _acceptance(record: E2ERecord) -> str:
    """Both runs' MTP mean acceptance length from vLLM's counters, as a clause; empty where a run lacks it."""
    counters = _both_runs(record, "spec_decode")
    lengths = [c.get("mean_acceptance_length") for c in counters] if counters else [None]
    if None in lengths:
        return ""
    return f"MTP mean acceptance length {lengths[0]:.2f} off, {lengths[1]:.2f} on; "


def _profiles(record: E2ERecord) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """Both runs' profile summaries (caovan off, on), or None when either run was not profiled or found no step."""
    profiles = _both_runs(record, "profile")
    if profiles is None or not all(p.get("steps") for p in profiles):
        return None
    return profiles


def _step_cell(category: dict[str, Any]) -> str:
    return f"{category['per_step_us']:.0f} ({category['share']:.0%})"


def _unprofiled_step_us(record: E2ERecord, label: str) -> float | None:
    """Median time per output token at concurrency 1 from ``label``'s benchmark record beside ``e2e.json``, in µs;
    None where the run did not measure concurrency 1. The profiler slows the host, not the GPU: this is the step
    time to set against the GPU time of the profiled step (about one token per step while drafts are rejected)."""
    path = record.path.parent / benchmark_record_name(label, 1)
    if not path.exists():
        return None
    record = read_json(path, ReportError)
    try:
        return record["results"][LOAD]["summary"]["tpot_p50_s"]["median"] * 1e6
    except (KeyError, TypeError) as exc:
        raise ReportError(f"{path}: no results.{LOAD}.summary.tpot_p50_s.median ({exc!r})") from None


def _step_table(record: E2ERecord) -> list[str]:
    """Where one warm decode step's GPU time goes, caovan off and on (``--profile``); nothing without profiles."""
    profiles = _profiles(record)
    if profiles is None:
        return []
    off, on = profiles
    rows = [
        [a["category"], _step_cell(a), _step_cell(b)] for a, b in zip(off["categories"], on["categories"], strict=True)
    ]
    rows.append(["all GPU kernels", f"{off['gpu_us'] / off['steps']:.0f}", f"{on['gpu_us'] / on['steps']:.0f}"])
    if off.get("gpu_busy") is not None and on.get("gpu_busy") is not None:
        # The profiler slows the host, so this span tells how busy the GPU was while profiled; the unprofiled time
        # per token below is the step time to set against the GPU time.
        wall = [f"{p['span_us'] / p['steps']:.0f} ({p['gpu_busy']:.0%})" for p in profiles]
        rows.append(["profiled wall time (GPU busy)", *wall])
    unprofiled = [_unprofiled_step_us(record, label) for label in ("baseline", "caovan")]
    if None not in unprofiled:
        rows.append(["time per token, concurrency 1, not profiled", *(f"{us:.0f}" for us in unprofiled)])
    headers = ["", "caovan off: µs/step (share)", "caovan on: µs/step (share)"]
    return [
        "",
        f"Where a decode step's GPU time goes, {record.setup} (one warm request profiled with vLLM's torch profiler; "
        f"{off['steps']} and {on['steps']} model steps; a step is one forward of the target model and the MTP "
        "drafts that follow it):",
        "",
        tabulate(rows, headers=headers, tablefmt="github", disable_numparse=True),
    ]


def plot(records: list[E2ERecord], target: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(records), figsize=(5 * len(records), 3.6), squeeze=False, sharey=True)
    for ax, record in zip(axes[0], records, strict=True):
        summary = record.data["summary"]
        x = range(len(summary))
        off = [row["baseline_tok_s"]["median"] for row in summary]
        on = [row["caovan_tok_s"]["median"] for row in summary]
        ax.bar([i - 0.2 for i in x], off, width=0.4, label="caovan off", color="#9e9e9e")
        bars = ax.bar([i + 0.2 for i in x], on, width=0.4, label="caovan on", color="#1f77b4")
        for bar, row in zip(bars, summary, strict=True):
            ax.annotate(f"{row['ratio']:.2f}×", (bar.get_x() + bar.get_width() / 2, bar.get_height()), ha="center",
                        va="bottom", fontsize=8)  # fmt: skip
        ax.set_xticks(list(x), [str(row["concurrency"]) for row in summary])
        ax.set_xlabel("concurrency")
        ax.set_title(f"{record.setup}\n{record.data['gpu']}, vLLM {record.data['versions']['vllm']}")
    axes[0][0].set_ylabel("decode output tokens/s (median)")
    axes[0][0].legend(loc="upper left", fontsize=8)
    fig.tight_layout()
    target.parent.mkdir(parents=True, exist_ok=True)
    # No creation date or library version in the file: the same records make the same picture.
    fig.savefig(target, dpi=110, metadata={"Software": None})
    plt.close(fig)


def regenerate(folder: Path, doc: Path, *, check: bool = False, plot_to: Path | None = None) -> bool:
    """Write the table into ``doc`` (and, with ``plot_to``, the plot); True when the table changed (with
    ``check``: would change, nothing written)."""
    records = load_records(folder)
    try:
        old = doc.read_text()
        new = replace_between(old, table(records, doc.parent), start=MARK_START, end=MARK_END, shown=str(doc))
    except OSError as exc:
        raise ReportError(f"{doc}: cannot read it ({exc.strerror or exc})") from None
    except MarkerError as exc:
        raise ReportError(str(exc)) from None
    if check:
        return new != old
    if new != old:
        write_text_atomic(doc, new)
    if plot_to is not None:
        plot(records, plot_to)
    return new != old


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m caovan.bench.e2e_report", description=__doc__.split("\n\n")[0])
    parser.add_argument("records", type=Path, help="the folder holding <mode>/e2e.json")
    parser.add_argument("--doc", type=Path, required=True, help="the markdown file with the table's markers")
    parser.add_argument("--plot", type=Path, metavar="FILE.png", help="also draw the bar chart into FILE.png")
    parser.add_argument("--check", action="store_true", help="exit 1 when the doc's table is not current")
    args = parser.parse_args(argv)
    try:
        changed = regenerate(args.records, args.doc, check=args.check, plot_to=args.plot)
    except ReportError as exc:
        print(f"{parser.prog}: error: {exc}", file=sys.stderr)
        return 2
    if args.check and changed:
        print(f"{args.doc}: the table is not current (run `nox -s performance`)", file=sys.stderr)
        return 1
    print(f"{args.doc}: {'updated' if changed else 'already up to date'}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
