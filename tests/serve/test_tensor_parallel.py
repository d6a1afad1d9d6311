"""Serve tier at tensor parallel 2: the Turbo3 deployment shape (two GPUs), tiny Qwen3-Next and Qwen3.5 GDN + MTP.

Needs two CUDA GPUs; on fewer every test skips, saying how many it found.  Each GPU holds half the heads (the
tiny models' GDN H=2 / HV=4 and H=2 / HV=6 become 1 / 2 and 1 / 3 per GPU).

Engines (``engine_runner.py``, eager, MTP with 2 draft tokens, re-drawn weights, the mixed workload; see
``test_engine_mtp`` for the rules), caovan on and off per model:

* every worker process dispatches: each writes its own counters (``CAOVAN_COUNTERS_FILE``, one file per pid, the
  forked workers included) with spec-decode dispatches, and logs the activation line (vLLM prefixes a worker's lines
  with its ``pid=``);
* greedy tokens agree with caovan off at the same tensor parallelism.

HTTP (``caovan serve MODEL -tp 2``, then ``caovan benchmark`` with 16 requests in flight): no request fails, and the
server log has the activation line from both workers.

Run: ``pytest -m serve tests/serve/test_tensor_parallel.py -v`` (two CUDA GPUs; caovan installed).
"""

from __future__ import annotations

import json
import re

import http_server
import pytest
import serve_env
from engine_cases import PREFILL_BACKEND, Case, EngineRun, compare, start_engines, succeeded

from caovan.bench.model_folders import write_tiny_qwen3_5, write_tiny_qwen3_next
from caovan.bench.model_tokenizer import write_tokenizer

pytestmark = pytest.mark.serve

TP = 2
NUM_SPECULATIVE_TOKENS = 2
MODELS = ("qwen3-next", "qwen3.5")
CONCURRENCY = 16
ACTIVE_LINE = serve_env.ACTIVE_LINE
WRITERS = {"qwen3-next": write_tiny_qwen3_next, "qwen3.5": write_tiny_qwen3_5}

CASES = tuple(
    Case(
        f"{model}_tp{TP}_{side}",
        {**PREFILL_BACKEND, "caovan": on},
        NUM_SPECULATIVE_TOKENS,
        model=model,
        tensor_parallel_size=TP,
    )  # fmt: skip
    for model in MODELS
    for side, on in (("on", True), ("off", False))
)


@pytest.fixture(scope="module")
def engine_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, EngineRun]:
    return start_engines(CASES, tmp_path_factory, "tensor-parallel")


def _activation_pids(log: str) -> set[int]:
    """The processes that logged the activation line: vLLM prefixes a child's lines with its ``pid=``, a worker's
    under its engine core's (``(EngineCore_DP0 pid=1) (Worker_TP0 pid=2) ...``), so the last one is the logger's."""
    pids = set()
    for line in log.splitlines():
        if ACTIVE_LINE in line:
            found = re.findall(r"pid=(\d+)", line.split(ACTIVE_LINE)[0])
            pids.add(int(found[-1]) if found else -1)
    return pids


@pytest.mark.parametrize("model", MODELS)
def test_every_worker_dispatches_to_caovan(engine_runs, model):
    run = engine_runs[f"{model}_tp{TP}_on"]
    succeeded(run)
    dispatching = {s["pid"]: s["dispatched"] for s in run.counters_files.values() if s["dispatched"].get("spec")}
    assert len(dispatching) == TP, (
        f"{len(dispatching)} of {TP} workers dispatched spec-decode steps to caovan: {run.counters_files}\n"
        f"{run.describe()}"
    )
    # Both halves of every layer ran every step: the workers' counts are equal.
    assert len({json.dumps(d, sort_keys=True) for d in dispatching.values()}) == 1, dispatching
    assert set(dispatching) <= _activation_pids(run.log), (
        f"workers {sorted(dispatching)} did not all log '{ACTIVE_LINE}' (found pids {_activation_pids(run.log)})"
    )


@pytest.mark.parametrize("model", MODELS)
def test_greedy_tokens_agree_with_caovan_off_at_the_same_tensor_parallelism(engine_runs, model):
    agreement = compare(engine_runs[f"{model}_tp{TP}_on"], engine_runs[f"{model}_tp{TP}_off"])
    problems = agreement.problems()
    assert not problems, f"{model} at TP={TP}:\n" + "\n".join(problems + [agreement.report()])


@pytest.fixture(scope="module", params=MODELS)
def tp_server(request, tmp_path_factory: pytest.TempPathFactory):
    serve_env.require_cuda(TP)
    serve_env.require_plugin_entry_point()
    work = tmp_path_factory.mktemp(f"http-tp{TP}-{request.param}")
    model = WRITERS[request.param](work / f"tiny-{request.param}", torch_dtype="float16")
    write_tokenizer(model)
    serve_args = ["--tensor-parallel-size", str(TP), "--caovan-mtp", str(NUM_SPECULATIVE_TOKENS)]
    serve_args += ["--load-format", "dummy", "--dtype", "float16", "--enforce-eager", "--max-model-len", "2048"]
    serve_args += ["--max-num-seqs", str(CONCURRENCY), "--gpu-memory-utilization", "0.25"]
    serve_args += ["--additional-config", json.dumps(PREFILL_BACKEND)]
    server = http_server.start(work, model, serve_args)
    yield server
    server.stop()


def test_sixteen_requests_in_flight_all_answered_and_both_workers_dispatch(tp_server, tmp_path):
    output = tmp_path / "benchmark.json"
    done = http_server.caovan(
        "benchmark", "--api-base", tp_server.api_base, "--model", tp_server.model, "--wait-s", "600",
        "--max-tokens", "16", "--repeats", "2", "--requests", str(2 * CONCURRENCY), "--concurrency", str(CONCURRENCY),
        "--load", "decode-heavy,mixed", "--output", str(output),
        env=serve_env.engine_env(tmp_path), timeout=1200,
    )  # fmt: skip
    print(done.stdout)
    assert done.returncode == 0, tp_server.describe(done)
    record = json.loads(output.read_text())
    assert record["totals"]["errors"] == 0 and record["totals"]["requests"] > 0, record["totals"]
    assert len(_activation_pids(tp_server.log())) == TP, tp_server.describe()
