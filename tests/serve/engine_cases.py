"""Running the serve tier's engine cases: one ``engine_runner.py`` process per case, all on the one GPU.

Shared by the tier's test modules: a case names its ``additional_config``, draft length, model, cudagraph mode and
workload; :func:`start_engines` writes the tiny model folders, runs the cases (``CAOVAN_SERVE_JOBS`` at once, each
stopped at ``CAOVAN_SERVE_TIMEOUT_S``) and hands back what each process recorded.  Each engine has a fixed 1 GiB
KV cache, so engines sharing the GPU do not profile each other.

Environment knobs: ``CAOVAN_SERVE_DTYPE`` (float16 | bfloat16, default float16 as on SM75),
``CAOVAN_SERVE_LOGPROB_TOL`` (default 0.02 nats in fp16, 0.08 in bf16; see ``test_engine_mtp``),
``CAOVAN_SERVE_JOBS`` (engines at once, default all of a module's cases), ``CAOVAN_SERVE_TIMEOUT_S`` (per engine,
default 540), ``CAOVAN_SERVE_ARTIFACTS`` (keep logs/results in this folder instead of pytest's tmp dir).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import serve_env
import serve_workload
import token_agreement

from caovan.bench.model_folders import write_tiny_qwen3_5, write_tiny_qwen3_dense, write_tiny_qwen3_next

RUNNER = Path(__file__).resolve().with_name("engine_runner.py")
PREFILL_BACKEND = {"gdn_prefill_backend": "triton"}
DEFAULT_LOGPROB_TOL = {"float16": 0.02, "bfloat16": 0.08}
TAIL_LINES = 80


@dataclass(frozen=True)
class Case:
    name: str
    additional_config: dict[str, Any]
    num_speculative_tokens: int
    model: str = "qwen3-next"  # key of the model folders: "qwen3-next", "qwen3.5" (GDN + MTP) or "dense"
    cudagraph_mode: str = "eager"  # engine_runner.CUDAGRAPH_MODES
    workload: str = "mixed"  # serve_workload.NAMES
    weights: str = "hf-init"  # engine_weights.WEIGHT_MODES
    tensor_parallel_size: int = 1
    cudagraph_capture_sizes: tuple[int, ...] = ()  # empty: vLLM's own
    max_num_batched_tokens: int | None = None  # None: vLLM's own; below a prompt's length: chunked prefill


@dataclass
class EngineRun:
    case: Case
    returncode: int | None  # None: killed at the timeout
    wall_s: float
    log: str
    result: dict[str, Any] | None
    counters_files: dict[str, dict[str, Any]] = field(default_factory=dict)

    def tail(self) -> str:
        return "\n".join(self.log.splitlines()[-TAIL_LINES:])

    def describe(self) -> str:
        error = (self.result or {}).get("error")
        ended = f"killed at the {TIMEOUT_S:.0f}s timeout" if self.returncode is None else f"rc={self.returncode}"
        return (
            f"engine case {self.case.name!r}: {ended} after {self.wall_s:.0f}s, error={error}\n"
            f"--- last {TAIL_LINES} log lines ---\n{self.tail()}"
        )


def _env_choice(name: str, default: str, choices: tuple[str, ...]) -> str:
    value = os.environ.get(name, default)
    if value not in choices:
        raise pytest.UsageError(f"{name}={value!r}: expected one of {choices}")
    return value


def _env_number(name: str, default: float | None, kind: type = float) -> Any:
    raw = os.environ.get(name)
    if raw is None:
        return default
    try:
        value = kind(raw)
    except ValueError:
        raise pytest.UsageError(f"{name}={raw!r}: expected a {kind.__name__}") from None
    if value <= 0:
        raise pytest.UsageError(f"{name}={raw!r}: must be > 0")
    return value


DTYPE = _env_choice("CAOVAN_SERVE_DTYPE", "float16", ("float16", "bfloat16"))
LOGPROB_TOL = _env_number("CAOVAN_SERVE_LOGPROB_TOL", DEFAULT_LOGPROB_TOL[DTYPE])
JOBS = _env_number("CAOVAN_SERVE_JOBS", None, int)  # None: every case of a module at once
TIMEOUT_S = _env_number("CAOVAN_SERVE_TIMEOUT_S", 540.0)


def _command(case: Case, model_dirs: dict[str, Path], case_dir: Path) -> list[str]:
    sizes = case.cudagraph_capture_sizes
    return [
        sys.executable,
        str(RUNNER),
        "--model",
        str(model_dirs[case.model]),
        "--out",
        str(case_dir / "result.json"),
        "--additional-config",
        json.dumps(case.additional_config),
        "--num-speculative-tokens",
        str(case.num_speculative_tokens),
        "--dtype",
        DTYPE,
        "--cudagraph-mode",
        case.cudagraph_mode,
        "--workload",
        case.workload,
        "--weights",
        case.weights,
        "--tensor-parallel-size",
        str(case.tensor_parallel_size),
        *(["--cudagraph-capture-sizes", ",".join(map(str, sizes))] if sizes else []),
        *(["--max-num-batched-tokens", str(case.max_num_batched_tokens)] if case.max_num_batched_tokens else []),
    ]


def _collect(case: Case, case_dir: Path, returncode: int | None, wall_s: float) -> EngineRun:
    result_path = case_dir / "result.json"
    result = json.loads(result_path.read_text()) if result_path.is_file() else None
    counters = {p.name: json.loads(p.read_text()) for p in sorted(case_dir.glob("counters-*.json"))}
    log = (case_dir / "engine.log").read_text(errors="replace")
    return EngineRun(case, returncode, wall_s, log, result, counters)


def _run_all(cases: tuple[Case, ...], model_dirs: dict[str, Path], work_dir: Path) -> dict[str, EngineRun]:
    jobs = JOBS or len(cases)
    pending, running, done = list(cases), {}, {}
    while pending or running:
        while pending and len(running) < jobs:
            case = pending.pop(0)
            case_dir = work_dir / case.name
            case_dir.mkdir(parents=True, exist_ok=True)
            log = open(case_dir / "engine.log", "w")  # noqa: SIM115  (closed when the process ends)
            proc = subprocess.Popen(
                _command(case, model_dirs, case_dir),
                stdout=log,
                stderr=subprocess.STDOUT,
                env=serve_env.engine_env(case_dir, VLLM_ENABLE_V1_MULTIPROCESSING="0"),
                cwd=case_dir,
                start_new_session=True,  # its own process group, so a timeout can stop all it started
            )
            running[case.name] = (case, case_dir, proc, log, time.monotonic())
        for name, (case, case_dir, proc, log, started) in list(running.items()):
            code = proc.poll()
            elapsed = time.monotonic() - started
            if code is None and elapsed > TIMEOUT_S:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
                code = None
            elif code is None:
                continue
            log.close()
            done[name] = _collect(case, case_dir, code, elapsed)
            del running[name]
            print(f"[serve] {name}: returncode={code} after {elapsed:.0f}s", flush=True)
        time.sleep(1.0)
    return done


def start_engines(
    cases: tuple[Case, ...], tmp_path_factory: pytest.TempPathFactory, group: str
) -> dict[str, EngineRun]:
    """Run ``cases`` (a module's engines, under the folder ``group``) and return each case's run by name."""
    serve_env.require_cuda(max(case.tensor_parallel_size for case in cases))
    serve_env.require_plugin_entry_point()
    artifacts = os.environ.get("CAOVAN_SERVE_ARTIFACTS")
    work_dir = Path(artifacts) / group if artifacts else tmp_path_factory.mktemp(group)
    work_dir.mkdir(parents=True, exist_ok=True)
    model_dirs = {
        "qwen3-next": write_tiny_qwen3_next(work_dir / "tiny-qwen3-next", torch_dtype=DTYPE),
        "qwen3.5": write_tiny_qwen3_5(work_dir / "tiny-qwen3.5", torch_dtype=DTYPE),
        "dense": write_tiny_qwen3_dense(work_dir / "tiny-qwen3-dense", torch_dtype=DTYPE),
    }
    print(
        f"[serve] {group}: models {model_dirs}, artifacts {work_dir}, dtype {DTYPE}, "
        f"{JOBS or len(cases)} engines at once",
        flush=True,
    )
    return _run_all(cases, model_dirs, work_dir)


# --- what the tests read from one run -------------------------------------------------------------------------


def succeeded(run: EngineRun) -> dict[str, Any]:
    if run.returncode != 0 or not run.result or not run.result.get("ok"):
        pytest.fail(f"the engine run failed\n{run.describe()}")
    return run.result


def dispatch_totals(run: EngineRun) -> tuple[dict[str, int], dict[str, int]]:
    """caovan's counters summed over every process of the run (``CAOVAN_COUNTERS_FILE``): (dispatched, fallbacks)."""
    dispatched: dict[str, int] = {}
    fallbacks: dict[str, int] = {}
    for snapshot in run.counters_files.values():
        for kind, n in snapshot.get("dispatched", {}).items():
            dispatched[kind] = dispatched.get(kind, 0) + n
        for reason, n in snapshot.get("fallbacks", {}).items():
            fallbacks[reason] = fallbacks.get(reason, 0) + n
    return dispatched, fallbacks


def greedy_steps(run: EngineRun) -> list[list[token_agreement.Step]]:
    result = succeeded(run)
    expected = serve_workload.workload(run.case.workload, run.case.num_speculative_tokens).max_tokens
    sequences = result.get("sequences") or []
    lengths = [len(s["token_ids"]) for s in sequences]
    assert lengths == list(expected), f"{run.case.name}: unexpected output lengths {lengths}"
    return token_agreement.runs_from_records(sequences)


def compare(candidate: EngineRun, reference: EngineRun) -> token_agreement.Agreement:
    """Greedy-token agreement of two runs of the same workload (printed with every divergence)."""
    assert candidate.case.workload == reference.case.workload, "runs of different workloads do not compare"
    assert candidate.case.weights == reference.case.weights, "runs of different weights do not compare"
    agreement = token_agreement.compare_greedy_runs(
        greedy_steps(candidate), greedy_steps(reference), logprob_tolerance=LOGPROB_TOL
    )
    print(f"[serve] {candidate.case.name} vs {reference.case.name}: {agreement.report()}")
    for run in (candidate, reference):
        print(f"[serve] {run.case.name} spec-decode metrics: {run.result.get('spec_decode_metrics')}")
    return agreement
