"""Serve tier: the start-up profiles' KV prediction against vLLM's own start-up log line, on a GPU (issue 51).

Qwen3.6-27B's architecture (``caovan.bench.model_folders``, a tokenizer from ``caovan.bench.model_tokenizer``) is
served with dummy weights by ``caovan serve MODEL --load-format dummy --max-model-len N`` and no other sizing flag:
the profiles measure the GPUs through NVML and add the TP, the memory share, the KV-cache dtype, the sequences and
the batched tokens themselves, with AutoSpec's MTP 3. Per context asked for:

* ``caovan serve`` prints its KV prediction (``[Caovan] serve: KV prediction: vLLM will log "GPU KV cache size: P
  tokens"``);
* vLLM logs ``GPU KV cache size: L tokens``, and P is within 10 % of L;
* ``caovan warmup`` gets a request served.

Each context writes a record (the prediction, vLLM's figure, their ratio, the profile lines, the GPU, vLLM's
version) to ``CAOVAN_SERVE_ARTIFACTS/profile-kv/`` (pytest's tmp dir otherwise) and prints it. Without a CUDA GPU
each test skips, saying so; where the profiles refuse the model on these GPUs, it skips with their one line.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import http_server
import pytest
import serve_env

from caovan.bench.model_folders import write_architecture_config
from caovan.bench.model_tokenizer import write_tokenizer

pytestmark = pytest.mark.serve

CONTEXTS = (32768, 131072)
TOLERANCE = 0.10
STARTUP_WAIT_S = 900
#: vLLM's own line (after its "[file:line]" prefix), not caovan serve's quotation of it.
VLLM_LINE = re.compile(r"\] GPU KV cache size: ([\d,]+) tokens")
#: vLLM's own memory figures at start-up, kept in the record to calibrate the profiles' reserve (issue 51): what vLLM
#: takes besides weights and KV is its share less these two.
VLLM_MEMORY = {
    "vllm_weights_gib": re.compile(r"Model loading took ([\d.]+) GiB"),
    "vllm_kv_cache_gib": re.compile(r"Available KV cache memory: ([\d.]+) GiB"),
    "vllm_cuda_graphs_estimate_gib": re.compile(r"Estimated CUDA graph memory: ([\d.]+) GiB"),
}
PREDICTION = re.compile(r'\[Caovan\] serve: KV prediction: vLLM will log "GPU KV cache size: ([\d,]+) tokens"')
#: The 27B is a vision-language model: its folder here has a tokenizer but no image processor, so vLLM would fail
#: profiling the vision encoder with a dummy image (seen with vLLM 0.25.0: "Found 1 <|image_pad|> tokens in the text
#: but no images were passed"). No images per prompt serves the language model alone, as a text-only user runs it.
SERVE_ARGS = [
    "--load-format", "dummy", "--limit-mm-per-prompt", json.dumps({"image": 0, "video": 0}),
    "--additional-config", json.dumps({"gdn_prefill_backend": "triton"}),
]  # fmt: skip


def _work(tmp_path_factory: pytest.TempPathFactory, context: int) -> Path:
    artifacts = os.environ.get("CAOVAN_SERVE_ARTIFACTS")
    work = Path(artifacts) / "profile-kv" / str(context) if artifacts else tmp_path_factory.mktemp(f"kv-{context}")
    work.mkdir(parents=True, exist_ok=True)
    return work


def _refusal(model: Path, args: list[str], env: dict[str, str]) -> str | None:
    """caovan serve's own line where the profiles cannot serve the model on these GPUs (dry run, nothing started)."""
    done = subprocess.run(
        [sys.executable, "-m", "caovan", "serve", str(model), *args, "--caovan-dry-run"],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    if done.returncode == 2 and "error:" in done.stderr:
        return done.stderr.strip().splitlines()[-1]
    assert done.returncode == 0, f"caovan serve --caovan-dry-run failed:\n{done.stderr[-3000:]}"
    return None


@pytest.mark.parametrize("context", CONTEXTS)
def test_the_kv_prediction_is_within_ten_percent_of_vllms_log_line(context, tmp_path_factory):
    serve_env.require_cuda()
    serve_env.require_plugin_entry_point()
    work = _work(tmp_path_factory, context)
    model = write_tokenizer(write_architecture_config("qwen3.6-27b", work / "qwen3.6-27b"))
    args = [*SERVE_ARGS, "--max-model-len", str(context)]
    refusal = _refusal(model, args, serve_env.engine_env(work))
    if refusal is not None:
        pytest.skip(f"the 27B architecture at {context} tokens does not fit these GPUs: {refusal}")
    server = http_server.start(work, model, args)
    try:
        http_server.wait_until_ready(server, STARTUP_WAIT_S)  # fails at once where the engine died starting
        warmup = http_server.caovan(
            "warmup", "--api-base", server.api_base, "--model", server.model, "--wait-s", str(STARTUP_WAIT_S),
            "--batches", "1", env=serve_env.engine_env(work), timeout=STARTUP_WAIT_S + 300,
        )  # fmt: skip
        log = server.log()
    finally:
        server.stop()
    predicted, logged = PREDICTION.search(log), VLLM_LINE.search(log)
    assert predicted is not None, f"caovan serve printed no KV prediction\n{server.describe()}"
    assert logged is not None, f"vLLM logged no 'GPU KV cache size' line\n{server.describe(warmup)}"
    predicted_tokens, logged_tokens = (int(m.group(1).replace(",", "")) for m in (predicted, logged))
    record = {
        "context": context,
        "predicted_tokens": predicted_tokens,
        "vllm_tokens": logged_tokens,
        "ratio": round(predicted_tokens / logged_tokens, 4),
        **{name: float(m.group(1)) if (m := pattern.search(log)) else None for name, pattern in VLLM_MEMORY.items()},
        "profile_lines": [line for line in log.splitlines() if line.startswith("[Caovan] serve: ")],
        "gpu": subprocess.run(
            ["nvidia-smi", "--query-gpu=name,memory.total", "--format=csv,noheader"], capture_output=True, text=True
        ).stdout.strip(),
        "vllm_version": metadata.version("vllm"),
        "warmup_returncode": warmup.returncode,
    }
    (work / "record.json").write_text(json.dumps(record, indent=1) + "\n")
    print(f"[profile-kv] {context} tokens: {json.dumps(record, indent=1)}\nrecord: {work / 'record.json'}")
    assert abs(predicted_tokens - logged_tokens) <= TOLERANCE * logged_tokens, record
    assert warmup.returncode == 0, server.describe(warmup)
    assert warmup.stdout.splitlines()[-1].startswith("[Caovan] warmup=READY"), server.describe(warmup)
