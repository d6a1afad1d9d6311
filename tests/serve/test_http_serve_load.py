"""Serve tier: ``caovan serve``'s HTTP server (the row's real ``vllm serve``, caovan on, MTP 2, tiny Qwen3-Next GDN
model, dummy weights) under a load of 64 concurrent streaming completions, by :mod:`helpers.http_load`.

What is asserted, from one run of the load (its record is written to ``CAOVAN_SERVE_ARTIFACTS/http-load/
load-test.json``, pytest's tmp dir otherwise, beside the server's log):

* every one of the 64 streams, of mixed prompt lengths (3 to 900 words) and ``max_tokens`` (8 to 128), greedy, ends
  complete: HTTP 200, no error event, one final chunk with ``finish_reason`` ``length``, a usage chunk whose
  ``completion_tokens`` is ``max_tokens`` and the number of token ids streamed, ``[DONE]``;
* each stream's greedy token ids and text equal those of the same request sent alone (the sequential run first);
* a client that closes its stream after 3 chunks, while the others stream, disturbs none of them, and vLLM's
  ``vllm:num_requests_running`` is back to 0 afterwards (the closed request was aborted, not left running);
* malformed requests sent during the load (a body that is not JSON, ``max_tokens`` -1, a string ``temperature``,
  a model not served) each get a 4xx, and the engine keeps serving: the same request afterwards equals its first
  answer, ``/health`` is 200, and the server is still running;
* caovan served the load (its routing and ACTIVE DISPATCH lines are in the server's log).

``--max-num-seqs 64``, so the engine batches up to all 64 streams' spec-decode steps at once. The dummy weights
make the logits depend little on the context (``engine_weights.hf_init_weights`` says why), so equal outputs here
show that no stream got another's tokens or lost its own, rather than that the GDN state is right to the last bit;
the engine tests compare tokens on drawn weights.
"""

from __future__ import annotations

import json
import os
from importlib import metadata
from pathlib import Path

import http_server
import pytest
import serve_env
from helpers import http_load

from caovan.bench.model_folders import write_tiny_qwen3_next
from caovan.bench.model_tokenizer import write_tokenizer

pytestmark = pytest.mark.serve

MTP = 2
MAX_NUM_SEQS = http_load.STREAMS
STARTUP_WAIT_S = 480


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    artifacts = os.environ.get("CAOVAN_SERVE_ARTIFACTS")
    work = Path(artifacts) / "http-load" if artifacts else tmp_path_factory.mktemp("http-load")
    work.mkdir(parents=True, exist_ok=True)
    return work


@pytest.fixture(scope="module")
def server(work: Path):
    serve_env.require_cuda()
    serve_env.require_plugin_entry_point()
    model = write_tiny_qwen3_next(work / "tiny-qwen3-next", torch_dtype="float16")
    write_tokenizer(model)
    serve_args = ["--caovan-mtp", str(MTP), "--load-format", "dummy", "--dtype", "float16", "--enforce-eager"]
    serve_args += ["--max-model-len", "2048", "--max-num-seqs", str(MAX_NUM_SEQS), "--gpu-memory-utilization", "0.25"]
    serve_args += ["--additional-config", json.dumps({"gdn_prefill_backend": "triton"})]
    running = http_server.start(work, model, serve_args)
    yield running
    running.stop()


@pytest.fixture(scope="module")
def load(server, work: Path) -> dict:
    http_server.wait_until_ready(server, STARTUP_WAIT_S)
    result = http_load.run_load_test(server.api_base, server.model)
    record = {"vllm_version": metadata.version("vllm"), **result.to_dict()}
    path = work / "load-test.json"
    path.write_text(json.dumps(record, indent=2) + "\n")
    print(
        f"[http-load] {record['counts']}, timings {record['timings']}, disconnect {record['disconnect']}, "
        f"malformed {[(a['name'], a['status']) for a in record['malformed']]}; record {path}",
        flush=True,
    )
    for failure in record["failures"]:
        print(f"[http-load] FAILED: {failure}", flush=True)
    return record


def test_64_concurrent_streams_all_complete_without_errors(load, server):
    counts = load["counts"]
    assert counts["streams"] == 64
    stream_failures = [f for f in load["failures"] if f.startswith(("sequential run:", "concurrent run:"))]
    assert stream_failures == [], server.describe()
    assert counts["sequential_complete"] == counts["concurrent_complete"] == 64 and counts["concurrent_errors"] == 0
    asked = [s["request"]["max_tokens"] for s in load["streams"]]
    assert [s["concurrent"]["completion_tokens"] for s in load["streams"]] == asked


def test_greedy_outputs_equal_the_sequential_runs(load):
    assert load["mismatches"] == [], json.dumps(load["mismatches"], indent=1)[:4000]


def test_a_client_disconnecting_mid_stream_does_not_disturb_the_others(load):
    disconnect = load["disconnect"]
    assert disconnect["closed_mid_stream"] and disconnect["others_streaming_at_close"] > 0, disconnect
    assert load["counts"]["concurrent_errors"] == 0
    assert load["requests_running_after"] == 0, "vLLM still counts running requests after the load"


def test_malformed_requests_get_4xx_and_the_engine_keeps_serving(load, server):
    statuses = {a["name"]: a["status"] for a in load["malformed"]}
    assert all(status is not None and 400 <= status < 500 for status in statuses.values()), load["malformed"]
    after = [f for f in load["failures"] if f.startswith("request after the load") or "/health" in f]
    assert after == [] and load["health_status"] == 200, after
    assert server.proc.poll() is None, server.describe()
    assert "EngineDeadError" not in server.log(), server.describe()


def test_caovan_served_the_load(load, server):
    log = server.log()
    assert f"speculative_config=auto MTP={MTP}: GDN spec-decode core routed to caovan" in log, server.describe()
    assert serve_env.ACTIVE_LINE in log, server.describe()


def test_the_load_test_found_no_other_failure(load):
    assert load["failures"] == []
