"""``caovan bench ttft``: time to first token of a served model, caovan's GDN prefill off, then on.

The sibling of ``bench e2e`` (``e2e.py``) for the prompt path. For one cudagraph mode, into ``OUT/<mode>/``:

1. ``caovan serve MODEL`` with the user's serve arguments, ``{"caovan": true}`` merged into ``--additional-config``
   (caovan's spec-decode step in both runs, so that only the prefill differs); once it answers ``/v1/models``
   (start-up not timed), per prompt length, ``warmup`` then ``repeats`` streamed completions of one token, one at a
   time, each on a prompt of exactly that many token ids that no other request shares (no prefix-cache hit): time to
   the first streamed token (TTFT) per request; the server is stopped.
2. The same with ``"caovan_prefill": true`` as well.
3. ``ttft.json``: the exact server commands, their start-up seconds, the GPU, every TTFT, and per prompt length the
   two medians and their ratio. Server logs sit beside it.
"""

from __future__ import annotations

import datetime
import json
import os
import statistics
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from caovan import __version__
from caovan.bench.e2e import E2EError, ServedRunsSettings, Server, caovan_serve_command, gpu_name, server_env, shown
from caovan.jsonfile import write_text_atomic
from caovan.matrix.envinfo import distribution_version
from caovan.serving.server_process import free_port

SCHEMA = "caovan-ttft/1"
#: The two runs, in order: (label, caovan_prefill).
RUNS = (("prefill-off", False), ("prefill-on", True))
DEFAULT_PROMPT_TOKENS = (256, 1024, 4096, 32768)
#: Token ids of the synthetic prompts: ordinary ids of any Qwen tokenizer (its first thousand are bytes and pieces).
TOKEN_ID_RANGE = (1000, 30000)


@dataclass(frozen=True)
class TtftSettings(ServedRunsSettings):
    prompt_tokens: tuple[int, ...] = DEFAULT_PROMPT_TOKENS
    warmup: int = 1
    repeats: int = 5


def server_command(settings: TtftSettings, prefill_on: bool, port: int) -> list[str]:
    """``caovan serve`` as a user types it, caovan on, its prefill as the run says."""
    config = {**settings.additional_config, "caovan": True, "caovan_prefill": prefill_on}
    return caovan_serve_command(settings, config, port)


def prompt_ids(tokens: int, key: int) -> list[int]:
    """``tokens`` token ids from a linear congruential sequence seeded by ``key``: a prompt no other key shares."""
    low, high = TOKEN_ID_RANGE
    state, ids = 2654435761 * (key + 1) % (1 << 31), []
    for _ in range(tokens):
        state = (1103515245 * state + 12345) % (1 << 31)
        ids.append(low + state % (high - low))
    return ids


def measure(client: Any, model: str, settings: TtftSettings, run_index: int) -> list[dict[str, Any]]:
    """Per prompt length: every request's TTFT (warm-up ones apart) and the median of the timed ones."""
    results = []
    for n, tokens in enumerate(settings.prompt_tokens):
        ttfts, warmup = [], []
        for i in range(settings.warmup + settings.repeats):
            key = (run_index * 1000 + n) * 1000 + i  # distinct prompts across runs too: no shared prefix
            done = client.stream_complete(model, prompt_ids(tokens, key), 1)
            (warmup if i < settings.warmup else ttfts).append(done.ttft_s)
        results.append(
            {
                "prompt_tokens": tokens,
                "ttft_s": ttfts,
                "warmup_ttft_s": warmup,
                "median_ttft_s": statistics.median(ttfts),
            }
        )
    return results


def _run(settings: TtftSettings, label: str, prefill_on: bool, index: int, port: int, popen: Callable[..., Any]):
    from caovan.serving.client import ServerSettings, ServingClient, wait_for_model

    env = {**os.environ, **server_env(settings)}
    server = Server(server_command(settings, prefill_on, port), settings.mode_dir / f"{label}-server.log", popen, env)
    entry: dict[str, Any] = {"label": label, "caovan_prefill": prefill_on, "server_command": shown(server.command)}
    try:
        print(f"[Caovan] ttft: {label}: {entry['server_command']}", flush=True)
        entry["server_ready_after_s"] = server.wait_ready(port, settings.ready_timeout_s)
        client_settings = ServerSettings(f"http://127.0.0.1:{port}", None, settings.ready_timeout_s, 600.0)
        with ServingClient(client_settings) as client:
            _, model = wait_for_model(client, client_settings, None, "bench ttft")
            entry["results"] = measure(client, model, settings, index)
    except Exception as exc:  # a request or the server failed: say which run, keep the log
        if isinstance(exc, E2EError):
            raise
        raise E2EError(f"{label}: {type(exc).__name__}: {exc}; server log {server.log_path}") from None
    finally:
        entry["server_returncode"] = server.stop()
    return entry


def summarise(runs: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    off, on = ({r["prompt_tokens"]: r["median_ttft_s"] for r in run["results"]} for run in runs)
    return [
        {"prompt_tokens": n, "ttft_off_s": off[n], "ttft_on_s": on[n], "speedup": off[n] / on[n] if on[n] else None}
        for n in off
    ]


def run_ttft(settings: TtftSettings, *, popen: Callable[..., Any] = subprocess.Popen) -> dict[str, Any]:
    """Both runs, one server each; the record, also written to ``<mode>/ttft.json``."""
    settings.mode_dir.mkdir(parents=True, exist_ok=True)
    port = settings.port or free_port()
    runs = [_run(settings, label, on, i, port, popen) for i, (label, on) in enumerate(RUNS)]
    record = {
        "schema": SCHEMA,
        "written_at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "settings": {**asdict(settings), "out_dir": str(settings.out_dir), "server_env": server_env(settings)},
        "gpu": gpu_name(),
        "versions": {
            "caovan": __version__,
            "vllm": distribution_version("vllm"),
            "torch": distribution_version("torch"),
            "python": sys.version.split()[0],
        },
        "runs": runs,
        "summary": summarise(runs),
    }
    text = json.dumps(record, indent=1, sort_keys=True) + "\n"
    write_text_atomic(settings.mode_dir / "ttft.json", text)
    return json.loads(text)
