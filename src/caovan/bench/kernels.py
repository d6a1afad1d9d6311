"""``caovan bench kernels``: our spec-decode kernels and vLLM's path, side by side, case by case.

For every case, on copies of one random input set:
  - eager host-inclusive time: ``eager_iters`` back-to-back calls (after ``warmup`` calls) in
    ``eager_blocks`` blocks, wall clock around each block with one ``torch.cuda.synchronize()`` at its end,
    divided by its count; the median block - what a PIECEWISE CUDA-graph server pays, Python and launch
    overhead included (one host hiccup, a GC pause or a preempted thread, lands in one block only). The
    blocks of ours and vLLM's alternate, so both see the same host;
  - CUDA-graph replay time: ``graph_calls`` calls captured in one ``torch.cuda.CUDAGraph``, replayed
    ``graph_replays`` times between two CUDA events, per call; the median of ``graph_repeats`` such
    timings - the GPU time under full graphs. Every call works on the same buffers, so a call may find
    what the previous one read or wrote in L2;
  - the same on "layers": the captured calls cycle through copies of the inputs (each copy one GDN layer's
    caches and activations), enough copies that one cycle touches at least ``layers_l2_multiple`` times
    the GPU's L2. In a model every other layer runs between two calls of one layer, so a call finds its
    state in DRAM; this is the GPU time per layer call there;
  - DRAM roofline: minimum bytes (``roofline.spec_decode_traffic``) over the device-to-device copy
    bandwidth measured in the same run, and each implementation's % of it (graph time);
  - max abs error against the float64 reference, for both.
Plain torch timing (no triton.testing), so what is measured is visible here.
"""

from __future__ import annotations

import math
import platform
import shlex
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace
from datetime import datetime, timezone
from typing import Any

from caovan.bench import accuracy
from caovan.bench.cases import SpecDecodeCase, SpecDecodeInputs, build_inputs
from caovan.bench.roofline import roofline_us, spec_decode_traffic

JSON_SCHEMA = "caovan-bench-kernels/1"


@dataclass(frozen=True)
class BenchSettings:
    warmup: int = 10
    eager_iters: int = 200
    eager_blocks: int = 5
    graph_calls: int = 20
    graph_replays: int = 20
    graph_repeats: int = 3
    copy_bytes: int = 512 << 20  # far beyond any L2 (H200: 60 MiB, 2080 Ti: 5.5 MiB)
    copy_iters: int = 10
    # "layers" graph time: copies of the inputs, cycled, so that one cycle touches this many times the L2;
    # at least 2 copies, at most max_layers, and no more than layers_memory_bytes of copies per implementation
    layers_l2_multiple: float = 2.0
    max_layers: int = 64
    layers_memory_bytes: int = 4 << 30


QUICK_SETTINGS = BenchSettings(
    warmup=5, eager_iters=50, eager_blocks=5, graph_calls=10, graph_replays=10, graph_repeats=1, copy_iters=5
)


# --------------------------------------------------------------------------------------------------
# Timers (CUDA). Each takes a zero-argument callable that launches one call.
# --------------------------------------------------------------------------------------------------
def time_eager_us(fns: Sequence[Callable[[], None]], settings: BenchSettings) -> list[float]:
    """Eager host-inclusive time per call of each of ``fns``, measured side by side.

    After ``warmup`` calls of each, ``eager_blocks`` rounds; in each round every fn runs one block of
    ``eager_iters / eager_blocks`` calls, timed with a synchronize at its end. Per fn, the median of its blocks.
    The blocks of the implementations alternate, so a stretch of slow host (seconds long: another process, a
    CPU clock change) slows each of them alike instead of only the one being timed at that moment.
    """
    import torch

    for fn in fns:
        for _ in range(settings.warmup):
            fn()
    torch.cuda.synchronize()
    per_block = max(1, settings.eager_iters // max(1, settings.eager_blocks))
    block_us: list[list[float]] = [[] for _ in fns]
    for _ in range(max(1, settings.eager_blocks)):
        for fn, blocks in zip(fns, block_us, strict=True):
            t0 = time.perf_counter()
            for _ in range(per_block):
                fn()
            torch.cuda.synchronize()
            blocks.append((time.perf_counter() - t0) / per_block * 1e6)
    return [statistics.median(blocks) for blocks in block_us]


def time_cuda_graph_us(fn: Callable[[], None], settings: BenchSettings) -> float:
    import torch

    # Warm up on a side stream before capture (torch.cuda.graphs docs): compiles, caches, allocator.
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(settings.graph_calls):
            fn()
    graph.replay()
    torch.cuda.synchronize()
    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(settings.graph_replays):
        graph.replay()
    end.record()
    end.synchronize()
    us = start.elapsed_time(end) * 1e3 / (settings.graph_replays * settings.graph_calls)
    del graph
    return us


def measure_copy_bandwidth(settings: BenchSettings, device: Any = "cuda") -> float:
    """Device-to-device copy bandwidth in bytes/s, read + write counted, best of ``copy_iters``."""
    import torch

    src = torch.empty(settings.copy_bytes, dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    src.fill_(1)
    dst.copy_(src)
    torch.cuda.synchronize()
    best_ms = math.inf
    for _ in range(settings.copy_iters):
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        dst.copy_(src)
        end.record()
        end.synchronize()
        best_ms = min(best_ms, start.elapsed_time(end))
    del src, dst
    return 2 * settings.copy_bytes / (best_ms * 1e-3)


# --------------------------------------------------------------------------------------------------
# One case
# --------------------------------------------------------------------------------------------------
Timer = Callable[[Callable[[], None], BenchSettings], float]
EagerTimer = Callable[[Sequence[Callable[[], None]], BenchSettings], list[float]]


def median_graph_us(fn: Callable[[], None], settings: BenchSettings, graph_timer: Timer = time_cuda_graph_us) -> float:
    """The median of ``settings.graph_repeats`` CUDA-graph timings of ``fn``."""
    return statistics.median(graph_timer(fn, settings) for _ in range(max(1, settings.graph_repeats)))


def layer_copies(footprint_bytes: int, copy_bytes: int, l2_bytes: int, settings: BenchSettings) -> int:
    """How many input copies the "layers" graph time cycles through (see the module docstring).

    ``footprint_bytes``: what one call touches (its roofline traffic); ``copy_bytes``: the memory one copy
    takes (whole caches); ``l2_bytes``: the GPU's L2 (0 when unknown: the minimum of 2 copies).
    """
    wanted = math.ceil(settings.layers_l2_multiple * l2_bytes / max(footprint_bytes, 1))
    by_memory = settings.layers_memory_bytes // max(copy_bytes, 1)
    return max(2, min(wanted, settings.max_layers, by_memory))


def _cycling_call(calls: Sequence[Callable[[], None]]) -> Callable[[], None]:
    """One call per invocation, each the next of ``calls`` in turn (captured calls cycle through them)."""
    state = {"next": 0}

    def call() -> None:
        i = state["next"]
        state["next"] = (i + 1) % len(calls)
        calls[i]()

    return call


def _layers_graph_us(
    fn: Callable[..., None], copies: Sequence[SpecDecodeInputs], settings: BenchSettings, graph_timer: Timer
) -> float:
    calls = [_bound_call(fn, c) for c in copies]
    cycled = replace(settings, graph_calls=max(settings.graph_calls, len(calls)))
    return median_graph_us(_cycling_call(calls), cycled, graph_timer)


def _l2_bytes(device: Any) -> int:
    import torch

    if torch.device(device).type != "cuda":
        return 0
    return int(getattr(torch.cuda.get_device_properties(torch.device(device)), "L2_cache_size", 0) or 0)


def _bound_call(fn: Callable[..., None], inputs: SpecDecodeInputs) -> Callable[[], None]:
    # Views and kwargs are made once: the timed call is exactly fn(*tensors, **kwargs).
    args, kwargs = inputs.kernel_args()
    return lambda: fn(*args, **kwargs)


def _pct(roof: float, t: float | None) -> float | None:
    return None if t is None or t <= 0 else 100.0 * roof / t


def _ratio(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None or b <= 0 else a / b


def bench_case(
    case: SpecDecodeCase,
    *,
    ours: Callable[..., None],
    vllm: Callable[..., None],
    reference: Callable[..., None],
    bandwidth: float,
    settings: BenchSettings,
    device: Any = "cuda",
    eager_timer: EagerTimer = time_eager_us,
    graph_timer: Timer = time_cuda_graph_us,
) -> dict[str, Any]:
    """Errors, times, roofline and speedups of one case, as a JSON-able row."""
    inputs = build_inputs(case, device)
    traffic = spec_decode_traffic(inputs.plan)
    roof = roofline_us(traffic.total, bandwidth)
    ref = accuracy.run_reference(reference, inputs)
    err_ours = accuracy.measure(ours, inputs, ref)
    err_vllm = accuracy.measure_vllm(vllm, inputs, ref)
    del ref

    vllm_layout = getattr(vllm, "ssm_layout", "vk")  # the layout the release's kernel takes
    calls = {
        "ours": _bound_call(ours, inputs.clone()),
        "vllm": _bound_call(vllm, inputs.with_ssm_layout(vllm_layout)),
    }
    eager_us = eager_timer(list(calls.values()), settings)
    times = {
        name: {"eager_us": eager, "graph_us": median_graph_us(call, settings, graph_timer)}
        for (name, call), eager in zip(calls.items(), eager_us, strict=True)
    }
    del calls
    l2 = _l2_bytes(device)
    n_layers = layer_copies(traffic.total, inputs.nbytes(), l2, settings)
    for name, fn, layout in (("ours", ours, None), ("vllm", vllm, vllm_layout)):
        copies = [inputs.clone() if layout is None else inputs.with_ssm_layout(layout) for _ in range(n_layers)]
        times[name]["graph_layers_us"] = _layers_graph_us(fn, copies, settings, graph_timer)
        del copies

    def impl_row(name: str, err: accuracy.ErrorReport) -> dict[str, Any]:
        t = times[name]
        return {
            **t,
            "pct_roofline_graph": _pct(roof, t["graph_us"]),
            "pct_roofline_graph_layers": _pct(roof, t["graph_layers_us"]),
            "pct_roofline_eager": _pct(roof, t["eager_us"]),
            "errors": err.as_dict(),
        }

    problems = accuracy.check_against_vllm(case, err_ours, err_vllm)
    return {
        "id": case.id,
        "case": case.as_dict(),
        "num_tokens": inputs.plan.query_start_loc[-1],
        "traffic_bytes": traffic.as_dict(),
        "roofline_us": roof,
        "ours": impl_row("ours", err_ours),
        "vllm": impl_row("vllm", err_vllm),
        "speedup_eager": _ratio(times["vllm"]["eager_us"], times["ours"]["eager_us"]),
        "speedup_graph": _ratio(times["vllm"]["graph_us"], times["ours"]["graph_us"]),
        "speedup_graph_layers": _ratio(times["vllm"]["graph_layers_us"], times["ours"]["graph_layers_us"]),
        "layers": {
            "copies": n_layers,
            "l2_bytes": l2,
            # one cycle's footprint over L2 (None without a known L2)
            "footprint_vs_l2": n_layers * traffic.total / l2 if l2 else None,
        },
        "accuracy_rule": {"passed": not problems, "problems": problems},
        "error": None,
    }


def failed_row(case: SpecDecodeCase, exc: BaseException) -> dict[str, Any]:
    return {"id": case.id, "case": case.as_dict(), "error": f"{type(exc).__name__}: {exc}"}


def run_each(
    cases: Sequence[Any], bench_one: Callable[[Any], dict[str, Any]], progress: Callable[[str], None]
) -> list[dict[str, Any]]:
    """``bench_one(case)`` for every case (each has ``id`` and ``as_dict()``); a case that raises becomes a row
    with ``error`` set."""
    rows = []
    for i, case in enumerate(cases, 1):
        progress(f"[{i}/{len(cases)}] {case.id}")
        try:
            rows.append(bench_one(case))
        except Exception as exc:  # one broken case must not hide the others' numbers
            rows.append(failed_row(case, exc))
            progress(f"  error: {rows[-1]['error']}")
    return rows


def run_cases(
    cases: Sequence[SpecDecodeCase],
    *,
    progress: Callable[[str], None] = lambda line: print(line, file=sys.stderr, flush=True),
    **kwargs: Any,
) -> list[dict[str, Any]]:
    """``bench_case`` for every case; a case that raises becomes a row with ``error`` set."""
    return run_each(cases, lambda case: bench_case(case, **kwargs), progress)


# --------------------------------------------------------------------------------------------------
# Report
# --------------------------------------------------------------------------------------------------
def _fmt(x: float | None, spec: str) -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else format(x, spec)


TABLE_HEADERS = (
    "case",
    "MB",
    "roof us",
    "eager ours",
    "eager vLLM",
    "x eager",
    "graph ours",
    "graph vLLM",
    "x graph",
    "layers ours",
    "layers vLLM",
    "x layers",
    "%roof ours",
    "%roof vLLM",
    "err out ours",
    "err out vLLM",
    "err ssm ours",
    "err ssm vLLM",
    "acc",
)


def table_rows(rows: Sequence[dict[str, Any]]) -> list[list[str]]:
    out = []
    for r in rows:
        if r.get("error"):
            out.append([r["id"], "ERROR: " + r["error"]] + [""] * (len(TABLE_HEADERS) - 2))
            continue
        o, v = r["ours"], r["vllm"]
        out.append(
            [
                r["id"],
                _fmt(r["traffic_bytes"]["total"] / 1e6, ".2f"),
                _fmt(r["roofline_us"], ".2f"),
                _fmt(o["eager_us"], ".1f"),
                _fmt(v["eager_us"], ".1f"),
                _fmt(r["speedup_eager"], ".2f"),
                _fmt(o["graph_us"], ".1f"),
                _fmt(v["graph_us"], ".1f"),
                _fmt(r["speedup_graph"], ".2f"),
                _fmt(o.get("graph_layers_us"), ".1f"),
                _fmt(v.get("graph_layers_us"), ".1f"),
                _fmt(r.get("speedup_graph_layers"), ".2f"),
                _fmt(o["pct_roofline_graph"], ".0f"),
                _fmt(v["pct_roofline_graph"], ".0f"),
                _fmt(o["errors"]["out"], ".1e"),
                _fmt(v["errors"]["out"], ".1e"),
                _fmt(o["errors"]["ssm_state"], ".1e"),
                _fmt(v["errors"]["ssm_state"], ".1e"),
                "ok" if r["accuracy_rule"]["passed"] else "FAIL",
            ]
        )
    return out


def format_table(rows: Sequence[dict[str, Any]]) -> str:
    from tabulate import tabulate

    return tabulate(table_rows(rows), headers=TABLE_HEADERS, tablefmt="github", disable_numparse=True)


def _version(dist: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(dist)
    except PackageNotFoundError:
        return None


def environment(device: Any = "cuda") -> dict[str, Any]:
    """GPU and software versions for the JSON record."""
    import torch

    import caovan

    gpu: dict[str, Any] = {}
    if torch.cuda.is_available():
        idx = torch.device(device).index or 0
        props = torch.cuda.get_device_properties(idx)
        gpu = {
            "index": idx,
            "name": props.name,
            "capability": f"{props.major}.{props.minor}",
            "total_memory_bytes": props.total_memory,
            "multiprocessors": props.multi_processor_count,
        }
    return {
        "gpu": gpu,
        "versions": {
            "python": platform.python_version(),
            "torch": torch.__version__,
            "torch_cuda": torch.version.cuda,
            "triton": _version("triton"),
            "vllm": _version("vllm"),
            "caovan": caovan.__version__,
        },
    }


def _json_safe(x: Any) -> Any:
    """NaN/inf become strings (strict JSON has no NaN); containers recurse."""
    if isinstance(x, float) and not math.isfinite(x):
        return str(x)
    if isinstance(x, dict):
        return {k: _json_safe(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_json_safe(v) for v in x]
    return x


def record_head(schema: str, argv: Sequence[str] | None = None, timestamp: str | None = None) -> dict[str, Any]:
    """A bench record's first keys: its schema, the command that made it (``sys.argv`` by default), when."""
    argv = list(sys.argv if argv is None else argv)
    return {
        "schema": schema,
        "command": shlex.join(argv),
        "argv": argv,
        "timestamp": timestamp or datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }


def build_report(
    rows: Sequence[dict[str, Any]],
    *,
    env: dict[str, Any],
    bandwidth: float,
    settings: BenchSettings,
    case_set: str,
    quick: bool,
    argv: Sequence[str] | None = None,
    timestamp: str | None = None,
) -> dict[str, Any]:
    return _json_safe(
        {
            **record_head(JSON_SCHEMA, argv, timestamp),
            **env,
            "bandwidth": {
                "bytes_per_s": bandwidth,
                "gb_per_s": bandwidth / 1e9,
                "method": f"device-to-device copy of {settings.copy_bytes} B, "
                f"best of {settings.copy_iters}, "
                "read + write bytes counted",
            },
            "settings": {**asdict(settings), "cases": case_set, "quick": quick},
            "summary": summarize(rows),
            "cases": list(rows),
        }
    )


def summarize(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    ok = [r for r in rows if not r.get("error")]

    def geomean(key: str) -> float | None:
        vals = [r[key] for r in ok if r.get(key)]
        return statistics.geometric_mean(vals) if vals else None

    return {
        "cases": len(rows),
        "errors": len(rows) - len(ok),
        "accuracy_rule_failures": sum(not r["accuracy_rule"]["passed"] for r in ok),
        "geomean_speedup_eager": geomean("speedup_eager"),
        "geomean_speedup_graph": geomean("speedup_graph"),
        "geomean_speedup_graph_layers": geomean("speedup_graph_layers"),
    }
