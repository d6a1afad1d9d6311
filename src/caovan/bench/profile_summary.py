"""Where a decode step's GPU time goes, from a torch-profiler trace of a vLLM server (``caovan bench e2e --profile``).

    python -m caovan.bench.profile_summary TRACE.pt.trace.json.gz [--json FILE]

The trace is the worker's chrome trace (vLLM's ``--profiler-config '{"profiler": "torch", ...}'``, written between
``POST /start_profile`` and ``/stop_profile``). Every GPU kernel (``"cat": "kernel"``) is put in the first
category of :data:`CATEGORIES` whose pattern its name matches; a step is one ``gpu_model_runner: forward`` range of
the target model (vLLM 0.21's name, opened only with ``VLLM_CUSTOM_SCOPES_FOR_PROFILING=1`` in the server's
environment, which ``caovan bench e2e --profile`` sets), so the profiled window's total divided by the steps is a
step's GPU time. The GPU's busy share (the union of kernel intervals over the span from the first kernel's start to
the last one's end) says which side bounds a step: near 100 % the GPU does, and host-side savings cannot show; well
below it the GPU waits on the host.
Kernels inside CUDA graphs are recorded one by one (CUPTI), so PIECEWISE and FULL graphs are covered too.
"""

from __future__ import annotations

import argparse
import gzip
import json
import re
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

from tabulate import tabulate

from caovan.jsonfile import write_text_atomic

#: (category, kernel-name pattern), first match wins. The GDN spec core is both sides' kernels of that step:
#: caovan's two, or the spec path of vLLM's family (gating, conv update, recurrent update).
CATEGORIES: tuple[tuple[str, str], ...] = (
    (
        "GDN spec core",
        r"_caovan_sm75_|fused_sigmoid_gating_delta_rule|fused_recurrent_gated_delta_rule"
        r"|causal_conv1d_update|fused_gdn_gating",
    ),  # fmt: skip
    (
        "GDN other",
        r"chunk_|l2norm|causal_conv1d|gated_delta|solve_tril|recompute_w_u|kkt|layer_norm_fwd|rms_norm_gated",
    ),
    ("attention", r"flash|fmha|attn|attention|paged|reshape_and_cache"),
    ("GEMMs", r"gemm|gemv|cutlass|nvjet|xmma|cublas|marlin|wgmma|splitk|_tn_|_nt_|_nn_"),
    ("the rest", r""),
)
STEP_EVENT = "gpu_model_runner: forward"
#: With CUDA activity on, the profiler writes each named range twice: the host's (``user_annotation``) and its
#: twin on the GPU stream (this category). Counting both halved every per-step figure (seen on vLLM 0.21: 128
#: ranges where the server's own table said 64 calls).
GPU_TWIN_CATEGORY = "gpu_user_annotation"
TOP_KERNELS = 3
#: The text table's widest kernel name: a C++ kernel's demangled name (template arguments, parameter list) runs to
#: a thousand characters; the JSON keeps it whole.
KERNEL_NAME_WIDTH = 80


class TraceError(ValueError):
    """The trace cannot be read or holds no kernel (the caller names the file)."""


def load_trace(path: Path) -> dict[str, Any]:
    try:
        raw = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
        trace = json.loads(raw)
    except (OSError, EOFError, gzip.BadGzipFile, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise TraceError(f"cannot read it as a (gzipped) chrome trace: {exc}") from None
    if not isinstance(trace, dict) or not isinstance(trace.get("traceEvents"), list):
        raise TraceError("no traceEvents list (not a torch profiler trace)")
    return trace


def category_of(kernel: str) -> str:
    for name, pattern in CATEGORIES:
        if re.search(pattern, kernel, re.IGNORECASE):
            return name
    return CATEGORIES[-1][0]


def summarise(trace: dict[str, Any]) -> dict[str, Any]:
    """GPU kernel time per category: total, share, per step, and the categories' biggest kernels."""
    per_kernel: dict[str, float] = defaultdict(float)
    intervals: list[tuple[float, float]] = []
    steps = 0
    for event in trace["traceEvents"]:
        if not isinstance(event, dict):
            continue
        if event.get("cat") == "kernel" and isinstance(event.get("dur"), int | float):
            per_kernel[str(event.get("name", "?"))] += event["dur"]
            if isinstance(event.get("ts"), int | float):
                intervals.append((event["ts"], event["ts"] + event["dur"]))
        elif event.get("name") == STEP_EVENT and event.get("ph") == "X" and event.get("cat") != GPU_TWIN_CATEGORY:
            steps += 1
    # Each distinct kernel name is classified once; the categories' totals follow from the kernels'.
    by_category: dict[str, list[str]] = defaultdict(list)
    for kernel in sorted(per_kernel, key=lambda k: -per_kernel[k]):
        by_category[category_of(kernel)].append(kernel)
    per_category = {name: sum(per_kernel[k] for k in by_category[name]) for name, _ in CATEGORIES}
    total = sum(per_category.values())
    if total == 0:
        raise TraceError("no GPU kernel in the trace (was the profiler started while requests ran?)")
    rows = []
    for name, _ in CATEGORIES:
        rows.append(
            {
                "category": name,
                "gpu_us": round(per_category[name], 1),
                "share": round(per_category[name] / total, 4),
                "per_step_us": round(per_category[name] / steps, 1) if steps else None,
                "top_kernels": [[k, round(per_kernel[k], 1)] for k in by_category[name][:TOP_KERNELS]],
            }
        )
    return {"steps": steps, "gpu_us": round(total, 1), **_busy(intervals), "categories": rows}


def _busy(intervals: list[tuple[float, float]]) -> dict[str, float | None]:
    """The kernels' span (µs) and the share of it in which at least one kernel ran; None without timestamps."""
    if not intervals:
        return {"span_us": None, "gpu_busy": None}
    intervals.sort()
    busy, (start, end) = 0.0, intervals[0]
    for begin, finish in intervals[1:]:
        if begin > end:
            busy, start = busy + end - start, begin
        end = max(end, finish)
    busy += end - start
    span = end - intervals[0][0]
    return {"span_us": round(span, 1), "gpu_busy": round(busy / span, 4) if span > 0 else None}


def short_kernel_name(name: str, width: int = KERNEL_NAME_WIDTH) -> str:
    """*name* without ``void``, ``(anonymous namespace)`` and its parameter list, cut to *width* characters."""
    name = name.removeprefix("void ").replace("(anonymous namespace)::", "")
    depth = 0
    for index, char in enumerate(name):
        depth += {"<": 1, ">": -1}.get(char, 0)
        if char == "(" and depth == 0:
            name = name[:index]
            break
    return name if len(name) <= width else name[: width - 1] + "…"


def format_summary(summary: dict[str, Any], title: str) -> str:
    rows = [
        [r["category"], f"{r['share']:.1%}", "-" if r["per_step_us"] is None else f"{r['per_step_us']:.1f}",
         ", ".join(short_kernel_name(k) for k, _ in r["top_kernels"]) or "-"]
        for r in summary["categories"]
    ]  # fmt: skip
    steps = summary["steps"]
    per_step = (
        f"{summary['gpu_us'] / steps:.1f} µs of GPU kernels per step"
        if steps
        else "steps not found (was VLLM_CUSTOM_SCOPES_FOR_PROFILING=1 set?)"
    )
    head = f"{title}: {steps} model steps, {per_step}"
    if summary.get("gpu_busy") is not None:
        head += f"; the GPU was busy {summary['gpu_busy']:.0%} of the {summary['span_us'] / 1e6:.2f} s profiled"
    table = tabulate(rows, headers=["", "share", "µs/step", "biggest kernels"], tablefmt="simple")
    return f"{head}\n{table}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m caovan.bench.profile_summary", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("trace", type=Path, help="the worker's trace (.pt.trace.json or .json.gz)")
    parser.add_argument("--json", type=Path, metavar="FILE", help="also write the summary as JSON")
    args = parser.parse_args(argv)
    try:
        summary = summarise(load_trace(args.trace))
    except TraceError as exc:
        print(f"{parser.prog}: error: {args.trace}: {exc}", file=sys.stderr)
        return 2
    print(format_summary(summary, args.trace.name))
    if args.json is not None:
        write_text_atomic(args.json, json.dumps(summary, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
