"""Serve tier: Turbo3's server workflow end to end — ``caovan serve``, then ``caovan warmup``, then
``caovan benchmark`` — on the real ``vllm serve`` of the row, tiny Qwen3-Next GDN + MTP model, dummy weights.

One OpenAI-API server is started with ``caovan serve MODEL`` and only the arguments a test needs (dummy weights,
port, eager, memory, triton GDN prefill because FlashInfer is not installed on the tier's machines): caovan's
switch and the MTP speculative config must come from ``caovan serve`` itself (AutoSpec, ``--caovan-mtp 2``).
Then ``caovan warmup`` waits for the server and sends its batches, and ``caovan benchmark`` runs two loads
twice and writes its record.  What is asserted:

* the server log has caovan's status line, the routing line with ``speculative_config=auto MTP=2`` (AutoSpec's
  mark reached the plugin) and ``Caovan SM75 Turbo3 ACTIVE DISPATCH confirmed`` (requests were served by caovan's
  kernels), and ``caovan serve``'s own lines saying what it added;
* warmup exits 0 with ``[Caovan] warmup=READY``;
* benchmark exits 0, and its record holds every request, no error, and the completion tokens asked for.

The text prompts need a tokenizer: the model folder gets the one of
``caovan.bench.model_tokenizer.write_tokenizer`` (no network on the tier's machines).
Timing numbers from this run are not judged (a tiny model on a shared machine says nothing about speed).
"""

from __future__ import annotations

import json
import time

import http_server
import pytest
import serve_env

from caovan.bench.model_folders import write_tiny_qwen3_next
from caovan.bench.model_tokenizer import write_tokenizer

pytestmark = pytest.mark.serve

MTP = 2
MAX_TOKENS = 24
STARTUP_WAIT_S = 480
ACTIVE_LINE = serve_env.ACTIVE_LINE


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory):
    serve_env.require_cuda()
    serve_env.require_plugin_entry_point()
    work = tmp_path_factory.mktemp("http-serve")
    model = write_tiny_qwen3_next(work / "tiny-qwen3-next", torch_dtype="float16")
    write_tokenizer(model)
    serve_args = ["--caovan-mtp", str(MTP), "--load-format", "dummy", "--dtype", "float16", "--enforce-eager"]
    serve_args += ["--max-model-len", "2048", "--max-num-seqs", "8", "--gpu-memory-utilization", "0.25"]
    serve_args += ["--additional-config", json.dumps({"gdn_prefill_backend": "triton"})]
    running = http_server.start(work, model, serve_args)
    yield running
    running.stop()


@pytest.fixture(scope="module")
def warmup(server):
    started = time.monotonic()
    done = http_server.caovan(
        "warmup",
        "--api-base",
        server.api_base,
        "--model",
        server.model,
        "--wait-s",
        str(STARTUP_WAIT_S),
        "--batches",
        "1,4",
        env=serve_env.engine_env(server.log_path.parent),
        timeout=STARTUP_WAIT_S + 300,
    )
    print(f"[http-serve] warmup rc={done.returncode} after {time.monotonic() - started:.0f}s\n{done.stdout}")
    return done


def record_vllm_version() -> str:
    from importlib import metadata

    return metadata.version("vllm")


def test_warmup_reaches_ready_on_the_caovan_server(server, warmup):
    assert warmup.returncode == 0, server.describe(warmup)
    assert warmup.stdout.splitlines()[-1].startswith("[Caovan] warmup=READY"), server.describe(warmup)


def test_caovan_serve_switched_caovan_on_with_autospec(server, warmup):
    log = server.log()
    assert '[Caovan] serve: caovan: caovan=true, caovan_mode="auto" added to --additional-config' in log
    assert f"[Caovan] serve: AutoSpec: MTP speculative decoding, {MTP} token(s) per step" in log
    assert "GDN interface check: PASS" in log, server.describe()
    assert f"speculative_config=auto MTP={MTP}: GDN spec-decode core routed to caovan" in log, server.describe()
    assert ACTIVE_LINE in log, server.describe()


def test_benchmark_writes_a_complete_record(server, warmup, tmp_path):
    assert warmup.returncode == 0, "warmup failed: see test_warmup_reaches_ready_on_the_caovan_server"
    output = tmp_path / "benchmark.json"
    done = http_server.caovan(
        "benchmark",
        "--api-base",
        server.api_base,
        "--model",
        server.model,
        "--max-tokens",
        str(MAX_TOKENS),
        "--repeats",
        "2",
        "--requests",
        "4",
        "--concurrency",
        "2",
        "--load",
        "decode-heavy,mixed",
        "--label",
        "caovan",
        "--output",
        str(output),
        env=serve_env.engine_env(tmp_path),
        timeout=600,
    )
    print(done.stdout)
    assert done.returncode == 0, server.describe(done)
    record = json.loads(output.read_text())
    assert record["settings"]["max_tokens"] == MAX_TOKENS
    assert sorted(record["results"]) == ["decode-heavy", "mixed"], record["results"].keys()
    repeats = [repeat for load in record["results"].values() for repeat in load["repeats"]]
    assert len(repeats) == 4
    for repeat in repeats:
        assert repeat["errors"] == 0 and repeat["ok"] == 4, repeat["first_errors"]
        assert repeat["output_tokens"] == 4 * MAX_TOKENS, repeat["per_request"]
        assert repeat["ttft_p50_s"] is not None and repeat["output_tokens_per_s"] > 0
    assert record["server"]["vllm_version"] == record_vllm_version()
    # two loads, each two warmup requests (as many as --concurrency; not counted in the repeats) and two repeats of four
    assert record["settings"]["warmup_requests"] == 2
    assert record["totals"] == {"requests": 2 * (2 + 2 * 4), "errors": 0, "error_rate": 0.0}, record["totals"]
