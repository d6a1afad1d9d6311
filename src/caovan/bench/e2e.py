"""``caovan bench e2e``: a model served through the user's own commands, caovan off then on, decode tokens/s compared.

For one cudagraph mode, into ``OUT/<mode>/``:

1. ``caovan serve MODEL`` (Turbo3's ``caovan-vllm-serve``) with the user's serve arguments plus
   ``--compilation-config '{"cudagraph_mode": MODE}'`` and ``{"caovan": false}`` merged into ``--additional-config``;
   once it answers ``/v1/models`` (start-up, compiles and graph capture are over: not timed), ``caovan benchmark``
   (``caovan-sm75-benchmark``) decode-heavy at every ``--concurrency``, each writing ``baseline-c<N>.json``; the
   server is stopped.
2. The same with ``{"caovan": true}``, each benchmark with ``--compare baseline-c<N>.json`` (same flags, same
   prompts: the benchmark refuses otherwise), writing ``caovan-c<N>.json``.
3. ``e2e.json``: the exact commands, their exit statuses, each server's start-up seconds, the GPU, and per
   concurrency the two median output tokens/s (over ``--repeats``) and their ratio. Server logs sit beside it.

With ``profile``, each server also runs with vLLM's torch profiler configured (``--profiler-config``, the same
for both runs but its folder), and after its benchmarks one warm greedy request of ``PROFILE_TOKENS`` tokens is
profiled (``POST /start_profile`` / ``/stop_profile``): ``<label>-profile.txt`` says where a step's GPU time goes
(:mod:`caovan.bench.profile_summary`), caovan off (before) and on (after). Those servers also get
``VLLM_CUSTOM_SCOPES_FOR_PROFILING=1``: without it vLLM's model runner opens no ``gpu_model_runner: forward`` range,
and the summary could not count steps (seen on vLLM 0.21: "0 model steps"). Every server gets ``SERVER_ENV``
(Triton's autotuning cache, so that both runs use the same configurations of the kernels they share).

Each finished run also leaves ``<label>-run.json``; with ``resume``, a run whose file and records are all there, made
on the GPU this host has, is not repeated (a procedure split over two sittings, e.g. two calls of a time-limited GPU
host, which may hand out another card in between).

Warm only, as Turbo3 taught: each benchmark's warmup requests (as many as ``--concurrency``, sent together) pay the
first-request compiles of that batch size before the repeats are timed.
"""

from __future__ import annotations

import datetime
import json
import os
import re
import shlex
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from caovan import __version__
from caovan.jsonfile import write_text_atomic
from caovan.matrix.envinfo import distribution_version
from caovan.serving.server_process import ServerProcess, free_port

SCHEMA = "caovan-e2e/1"
LOAD = "decode-heavy"
#: The two runs, in the order they run: the baseline first, so the caovan run can --compare against it.
RUNS = (("baseline", False), ("caovan", True))
PROFILE_TOKENS = 64
PROFILE_PROMPT = "Tell a long story about a river."
#: vLLM's switch for the model runner's named ranges (``record_function_or_nullcontext``), which mark the steps.
PROFILE_ENV = {"VLLM_CUSTOM_SCOPES_FOR_PROFILING": "1"}
#: Every server of the procedure: Triton keeps its autotuning results on disk (``knobs.autotuning.cache``, Triton
#: 3.2 on), so the second run's kernels that both runs share (vLLM's GDN prefill, attention, sampling) take the
#: configurations the first run chose instead of tuning afresh: the runs differ only in caovan, and the second
#: start-up finds on disk the tuning that vLLM's warm-up run otherwise pays at every start-up.
SERVER_ENV = {"TRITON_CACHE_AUTOTUNING": "1"}
#: vLLM's spec-decode counters (Prometheus names, without the ``_total`` suffix) and their keys in a run's entry.
SPEC_DECODE_COUNTERS = {
    "vllm:spec_decode_num_drafts": "drafts",
    "vllm:spec_decode_num_draft_tokens": "draft_tokens",
    "vllm:spec_decode_num_accepted_tokens": "accepted_tokens",
}
#: One sample line of the Prometheus text format: a name, optional labels, a value.
PROMETHEUS_SAMPLE = re.compile(r"^(?P<name>[A-Za-z_:][\w:]*)(?:\{[^}]*\})?\s+(?P<value>\S+)")
#: How long the worker may take to write its trace after /stop_profile answered.
TRACE_WAIT_S = 300.0
LOG_TAIL_LINES = 40


class E2EError(RuntimeError):
    """The procedure cannot go on (a server that died or never answered, a benchmark that failed)."""


@dataclass(frozen=True)
class ServedRunsSettings:
    """What every procedure that serves a model through ``caovan serve`` twice takes (``bench e2e``, ``bench
    ttft``): the model, where it writes, the servers' cudagraph mode, keys and arguments, and how they are started."""

    model: str
    out_dir: Path
    cudagraph_mode: str = "PIECEWISE"
    additional_config: dict[str, Any] = field(default_factory=dict)
    serve_args: tuple[str, ...] = ()
    ready_timeout_s: float = 1800.0
    port: int | None = None
    profile: bool = False

    @property
    def tensor_parallel_size(self) -> int:
        """From the serve arguments, as vLLM reads them (1 when not given)."""
        from caovan.serving.serve_flags import parallel_size

        return parallel_size(self.serve_args, {}, "--tensor-parallel-size", "-tp")

    @property
    def mode_dir(self) -> Path:
        tp = self.tensor_parallel_size
        return self.out_dir / (self.cudagraph_mode.lower() + (f"-tp{tp}" if tp > 1 else ""))


@dataclass(frozen=True)
class E2ESettings(ServedRunsSettings):
    concurrency: tuple[int, ...] = (1, 4, 8)
    repeats: int = 2
    max_tokens: int = 256
    #: Requests per repeat = concurrency x this (every slot busy for the whole repeat but its last request).
    requests_per_slot: int = 2


def trace_dir(settings: E2ESettings, label: str) -> Path:
    return (settings.mode_dir / f"{label}-trace").absolute()  # vLLM wants an absolute folder


def server_command(settings: E2ESettings, caovan_on: bool, port: int) -> list[str]:
    """``caovan serve`` as a user types it; the caovan switch is theirs, so serve adds none (AutoSpec alike)."""
    config = {**settings.additional_config, "caovan": caovan_on}
    label = dict((on, name) for name, on in RUNS)[caovan_on]
    profiler = []
    if settings.profile:
        # ignore_frontend: only the worker's trace (the GPU), and no front-end profiling over the whole window.
        options = {"profiler": "torch", "torch_profiler_dir": str(trace_dir(settings, label)), "ignore_frontend": True,
                   "torch_profiler_with_stack": False}  # fmt: skip
        profiler = ["--profiler-config", json.dumps(options)]
    return caovan_serve_command(settings, config, port, profiler)


def caovan_serve_command(
    settings: ServedRunsSettings, config: dict[str, Any], port: int, extra: Sequence[str] = ()
) -> list[str]:
    """``caovan serve MODEL ARGS --port ... --compilation-config ... --additional-config CONFIG EXTRA``."""
    return [
        sys.executable,
        "-m",
        "caovan",
        "serve",
        settings.model,
        *settings.serve_args,
        "--port",
        str(port),
        "--compilation-config",
        json.dumps({"cudagraph_mode": settings.cudagraph_mode}),
        "--additional-config",
        json.dumps(config, sort_keys=True),
        *extra,
    ]


def benchmark_command(
    settings: E2ESettings, label: str, concurrency: int, port: int, baseline: Path | None
) -> list[str]:
    command = [
        sys.executable,
        "-m",
        "caovan",
        "benchmark",
        "--api-base",
        f"http://127.0.0.1:{port}",
        "--load",
        LOAD,
        "--concurrency",
        str(concurrency),
        "--requests",
        str(concurrency * settings.requests_per_slot),
        "--repeats",
        str(settings.repeats),
        "--max-tokens",
        str(settings.max_tokens),
        "--label",
        label,
        "--output",
        str(record_path(settings, label, concurrency)),
    ]
    return command + (["--compare", str(baseline)] if baseline is not None else [])


def benchmark_record_name(label: str, concurrency: int) -> str:
    """The file name of one run's ``caovan benchmark`` record at one concurrency, beside ``e2e.json``."""
    return f"{label}-c{concurrency}.json"


def record_path(settings: E2ESettings, label: str, concurrency: int) -> Path:
    return settings.mode_dir / benchmark_record_name(label, concurrency)


def shown(command: Sequence[str]) -> str:
    """A command as the user would type it (``python -m caovan X`` is the ``caovan X`` console script)."""
    words = list(command)
    if words[:3] == [sys.executable, "-m", "caovan"]:
        words = ["caovan", *words[3:]]
    return shlex.join(words)


def gpu_name() -> str:
    """The GPUs as nvidia-smi names them (not through torch: a CUDA context here would hold memory the servers
    need)."""
    from caovan.matrix.envinfo import describe_gpus
    from caovan.matrix.options import nvidia_smi_gpu_names

    return describe_gpus(nvidia_smi_gpu_names()) or "unknown"


def median_rate(record: dict[str, Any]) -> dict[str, float]:
    summary = record["results"][LOAD]["summary"]["output_tokens_per_s"]
    return {key: summary[key] for key in ("median", "min", "max")}


def summarise(records: dict[tuple[str, int], dict[str, Any]], concurrency: Sequence[int]) -> list[dict[str, Any]]:
    """Per concurrency: both runs' output tokens/s (median, min, max over the repeats) and the ratio of medians."""
    rows = []
    for n in concurrency:
        baseline, caovan = (median_rate(records[(label, n)]) for label, _ in RUNS)
        rows.append(
            {
                "concurrency": n,
                "baseline_tok_s": baseline,
                "caovan_tok_s": caovan,
                "ratio": round(caovan["median"] / baseline["median"], 4),
            }
        )
    return rows


def step_range_sources() -> list[str]:
    """vLLM's worker modules that open the range the profile summary counts decode steps by
    (:data:`caovan.bench.profile_summary.STEP_EVENT`), as paths under ``vllm/``: read as text, nothing imported."""
    import importlib.util

    from caovan.bench.profile_summary import STEP_EVENT

    spec = importlib.util.find_spec("vllm")
    if spec is None or not spec.submodule_search_locations:
        return []
    root = Path(next(iter(spec.submodule_search_locations)))
    needle = f'"{STEP_EVENT}"'
    return sorted(
        str(path.relative_to(root.parent))
        for path in (root / "v1" / "worker").rglob("*.py")
        if needle in path.read_text(encoding="utf-8", errors="replace")
    )


def profiler_problem() -> str | None:
    """Why ``--profile`` cannot work with the installed vLLM (None: it can): it needs ``--profiler-config`` and a
    model runner that opens the step range (vLLM 0.34's runner opens none)."""
    try:
        from vllm.engine.arg_utils import EngineArgs
    except Exception as exc:  # the servers would not start either; say it before any is started
        return f"--profile: vLLM is not importable here ({type(exc).__name__}: {exc})"
    if "profiler_config" not in getattr(EngineArgs, "__dataclass_fields__", {}):
        return "--profile: this vLLM has no --profiler-config (vLLM 0.19 and later have it)"
    if not step_range_sources():
        from caovan.bench.profile_summary import STEP_EVENT

        return (
            f"--profile: no model runner of this vLLM opens the {STEP_EVENT!r} range that the summary counts "
            "decode steps by (vllm/v1/worker/gpu_model_runner.py opened it, up to vLLM 0.33)"
        )
    return None


def profile_decode(port: int, folder: Path, wait_s: float = TRACE_WAIT_S) -> Path:
    """One warm greedy request under vLLM's torch profiler; the trace the worker wrote into ``folder``."""
    import httpx

    base = f"http://127.0.0.1:{port}"
    before = set(folder.glob("*.pt.trace.json*"))
    try:
        with httpx.Client(timeout=600.0) as http:
            model = http.get(f"{base}/v1/models").raise_for_status().json()["data"][0]["id"]
            http.post(f"{base}/start_profile").raise_for_status()
            request = {"model": model, "prompt": PROFILE_PROMPT, "max_tokens": PROFILE_TOKENS, "temperature": 0,
                       "ignore_eos": True}  # fmt: skip
            http.post(f"{base}/v1/completions", json=request).raise_for_status()
            http.post(f"{base}/stop_profile").raise_for_status()
    except httpx.HTTPError as exc:
        raise E2EError(f"profiling a decode on {base} failed: {type(exc).__name__}: {exc}") from None
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        new = sorted(set(folder.glob("*.pt.trace.json*")) - before, key=lambda p: p.stat().st_mtime)
        if new and not new[-1].name.endswith(".tmp"):
            return new[-1]
        time.sleep(1.0)
    raise E2EError(f"no trace appeared in {folder} within {wait_s:.0f} s of /stop_profile")


class Server(ServerProcess):
    """One ``caovan serve`` run of the procedure; :meth:`wait_ready` times its start-up."""

    def __init__(
        self,
        command: list[str],
        log_path: Path,
        popen: Callable[..., Any] = subprocess.Popen,
        env: dict[str, str] | None = None,
    ):
        self.started = time.monotonic()
        super().__init__(command, log_path, env=env, popen=popen)

    def wait_ready(self, port: int, timeout_s: float) -> float:
        """Seconds until the server answered ``/v1/models``; :class:`E2EError` when it exits or never answers."""
        from caovan.serving.client import ServerSettings, ServingClient
        from caovan.serving.errors import ClientError

        def sleep(seconds: float) -> None:
            if self.proc.poll() is not None:
                raise E2EError(
                    f"the server exited with status {self.proc.returncode} before it answered "
                    f"({shown(self.command)}); last lines of {self.log_path}:\n{self.log_tail(LOG_TAIL_LINES)}"
                )
            time.sleep(seconds)

        settings = ServerSettings(f"http://127.0.0.1:{port}", None, timeout_s, 30.0)
        with ServingClient(settings) as client:
            try:
                client.wait_ready(timeout_s, sleep=sleep)
            except ClientError as exc:
                raise E2EError(f"{exc}; last lines of {self.log_path}:\n{self.log_tail(LOG_TAIL_LINES)}") from None
        return round(time.monotonic() - self.started, 1)


def _profile(settings: E2ESettings, label: str, port: int) -> dict[str, Any]:
    from caovan.bench.profile_summary import TraceError, format_summary, load_trace, summarise

    folder = trace_dir(settings, label)
    folder.mkdir(parents=True, exist_ok=True)
    trace = profile_decode(port, folder)
    try:
        summary = summarise(load_trace(trace))
    except TraceError as exc:
        raise E2EError(f"{trace}: {exc}") from None
    title = f"{settings.cudagraph_mode}, caovan {'on' if label == 'caovan' else 'off'} ({trace.name})"
    write_text_atomic(settings.mode_dir / f"{label}-profile.txt", format_summary(summary, title) + "\n")
    return {"trace": trace.name, **summary}


def spec_decode_counters(port: int) -> dict[str, Any]:
    """vLLM's spec-decode counters over the server's life (every request it answered, the benchmarks' warm-up too)
    and the mean acceptance length they give (tokens a request gains per step); ``{"error": ...}`` where /metrics
    cannot say. With dummy weights the drafts are almost never accepted: the length is then about 1."""
    import httpx

    try:
        text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=30.0).raise_for_status().text
    except httpx.HTTPError as exc:
        return {"error": f"/metrics: {exc}"}
    counts = dict.fromkeys(SPEC_DECODE_COUNTERS.values(), 0.0)
    for line in text.splitlines():
        sample = PROMETHEUS_SAMPLE.match(line)
        key = SPEC_DECODE_COUNTERS.get(sample["name"].removesuffix("_total")) if sample else None
        if key is not None:
            counts[key] += float(sample["value"])
    if not counts["drafts"]:
        return {"error": "/metrics: no spec-decode drafts counted (was the server started with MTP?)", **counts}
    return {**counts, "mean_acceptance_length": round(1 + counts["accepted_tokens"] / counts["drafts"], 3)}


def server_env(settings: ServedRunsSettings) -> dict[str, str]:
    """What the procedure adds to each server's environment (the record keeps it too)."""
    return {**SERVER_ENV, **(PROFILE_ENV if settings.profile else {})}


def _read(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text())


def _finished_run(settings: E2ESettings, label: str, gpu: str) -> dict[str, Any] | None:
    """A run an earlier sitting finished on this GPU: its entry, when the entry and every record of it are there.

    A lent host may hand out another card between two sittings; tokens/s of two GPUs must not be compared, so a run
    made on another GPU is made again.
    """
    entry_path = settings.mode_dir / f"{label}-run.json"
    paths = [record_path(settings, label, n) for n in settings.concurrency]
    if not entry_path.is_file() or not all(path.is_file() for path in paths):
        return None
    entry = _read(entry_path)
    if [b["concurrency"] for b in entry.get("benchmarks", [])] != list(settings.concurrency):
        return None
    if entry.get("gpu") != gpu:
        print(f"[Caovan] e2e: {label}: made again: {entry_path} ran on {entry.get('gpu')}, this host has {gpu}")
        return None
    return entry


def _make_run(
    settings: E2ESettings, label: str, caovan_on: bool, port: int, gpu: str, run: Callable[..., Any],
    popen: Callable[..., Any], records: dict[tuple[str, int], dict[str, Any]],
) -> dict[str, Any]:  # fmt: skip
    """One server, its benchmarks (their records go into ``records``) and its profile; the run's entry."""
    env = {**os.environ, **server_env(settings)}
    server = Server(server_command(settings, caovan_on, port), settings.mode_dir / f"{label}-server.log", popen, env)
    entry: dict[str, Any] = {"label": label, "caovan": caovan_on, "gpu": gpu, "server_command": shown(server.command)}
    try:
        print(f"[Caovan] e2e: {label}: {entry['server_command']}", flush=True)
        entry["server_ready_after_s"] = server.wait_ready(port, settings.ready_timeout_s)
        entry["benchmarks"] = []
        for n in settings.concurrency:
            baseline = record_path(settings, "baseline", n) if caovan_on else None
            command = benchmark_command(settings, label, n, port, baseline)
            print(f"[Caovan] e2e: {shown(command)}", flush=True)
            done = run(command)
            entry["benchmarks"].append({"concurrency": n, "command": shown(command), "returncode": done.returncode})
            if done.returncode != 0:
                raise E2EError(f"the benchmark exited with status {done.returncode}: {shown(command)}")
            records[(label, n)] = _read(record_path(settings, label, n))
        entry["spec_decode"] = spec_decode_counters(port)
        if settings.profile:
            entry["profile"] = _profile(settings, label, port)
    finally:
        entry["server_returncode"] = server.stop()
    write_text_atomic(settings.mode_dir / f"{label}-run.json", json.dumps(entry, indent=1) + "\n")
    return entry


def run_e2e(
    settings: E2ESettings,
    *,
    resume: bool = False,
    only: str | None = None,
    run: Callable[..., Any] = subprocess.run,
    popen: Callable[..., Any] = subprocess.Popen,
) -> dict[str, Any] | None:
    """The whole procedure for one cudagraph mode; the e2e record, also written to ``<mode>/e2e.json``.

    ``only`` (a run's label) starts that run's server alone, one server per call of a time-limited host: the other
    run is kept from an earlier call as with ``resume``. Without both runs there is no record yet (None).
    """
    settings.mode_dir.mkdir(parents=True, exist_ok=True)
    port = settings.port or free_port()
    runs, records = [], {}
    gpu = gpu_name()
    for label, caovan_on in RUNS:
        make = only in (None, label)
        done_before = _finished_run(settings, label, gpu) if resume or not make else None
        if done_before is not None:
            print(f"[Caovan] e2e: {label}: kept from {settings.mode_dir / (label + '-run.json')}", flush=True)
            runs.append(done_before)
            records.update({(label, n): _read(record_path(settings, label, n)) for n in settings.concurrency})
        elif make:
            runs.append(_make_run(settings, label, caovan_on, port, gpu, run, popen, records))
        elif label == "baseline":  # the caovan run compares against it
            raise E2EError(
                f"--only {only}: no finished baseline run on this GPU in {settings.mode_dir}; make it first "
                "(--only baseline)"
            )
        else:
            print(f"[Caovan] e2e: {label}: not made yet (--only {label} makes it, then e2e.json)", flush=True)
            return None
    record = {
        "schema": SCHEMA,
        "written_at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "settings": {
            **asdict(settings),
            "out_dir": str(settings.out_dir),
            "load": LOAD,
            "tensor_parallel_size": settings.tensor_parallel_size,
            "server_env": server_env(settings),
        },
        "gpu": gpu,
        "versions": {
            "caovan": __version__,
            "vllm": records[("baseline", settings.concurrency[0])].get("server", {}).get("vllm_version"),
            "torch": distribution_version("torch"),
            "python": sys.version.split()[0],
        },
        "runs": runs,
        "summary": summarise(records, settings.concurrency),
    }
    text = json.dumps(record, indent=1, sort_keys=True) + "\n"
    write_text_atomic(settings.mode_dir / "e2e.json", text)
    return json.loads(text)
