"""A load test of a running vLLM OpenAI server: many concurrent greedy streams, judged against a sequential run.

:func:`run_load_test` sends, with one ``httpx.AsyncClient``:

1. the load's requests (:func:`load_requests`: mixed prompt lengths and ``max_tokens``, temperature 0,
   ``ignore_eos``) one at a time: the sequential baseline;
2. the same requests all at once, and beside them a client that closes its stream after a few chunks (it is sent
   first, so that it is served while the others stream) and, once the first stream has a token, malformed
   requests that must each get a 4xx;
3. then one more request (the first again, which must equal its baseline), ``GET /health``, and a wait until
   vLLM's ``vllm:num_requests_running`` gauge is back to 0 (the closed stream was aborted, nothing is stuck).

It returns a :class:`LoadTestResult`: the judgement (:meth:`LoadTestResult.failures`, by
:mod:`helpers.http_load_checks`) and a JSON-able record (:meth:`LoadTestResult.to_dict`). The streams ask for
``return_token_ids`` (outputs compared by token id, not only text) and the top ``LOGPROBS`` logprobs (so a
difference shows whether a near tie flipped).
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import asdict, dataclass, field
from typing import Any

import httpx

from caovan.serving.benchmark import words
from caovan.serving.client import describe_exception
from caovan.serving.protocol import completion_body, error_message, short_text
from helpers.http_load_checks import (
    LoadRequest,
    StreamOutcome,
    describe_mismatch,
    malformed_problem,
    output_mismatch,
    stream_problems,
)

STREAMS = 64
#: Prompt lengths in words (each of the benchmark's words is one token of the serve tier's tokenizer) and output
#: lengths, cycled over the requests; 5 and 4 are coprime, so 20 different pairs.
PROMPT_WORDS = (3, 20, 90, 300, 900)
MAX_TOKENS = (8, 32, 64, 128)
LOGPROBS = 2
#: The disconnecting client reads this many chunks of a long answer, then closes its response.
DISCONNECT_AFTER_CHUNKS = 3
DISCONNECT_MAX_TOKENS = 512
DISCONNECT_PROMPT_WORDS = 20
REQUEST_TIMEOUT_S = 600.0
#: How long the server gets, after the load, to bring its running requests back to 0.
DRAIN_WAIT_S = 30.0
RUNNING_GAUGE = "vllm:num_requests_running"


def load_prompt(index: int, prompt_words: int) -> str:
    return f"[load {index}] " + " ".join(words(f"http-load/{index}", prompt_words))


def load_requests(
    streams: int = STREAMS, prompt_words: tuple[int, ...] = PROMPT_WORDS, max_tokens: tuple[int, ...] = MAX_TOKENS
) -> list[LoadRequest]:
    """The load: request ``i`` has ``prompt_words[i % 5]`` words and asks for ``max_tokens[i % 4]`` tokens."""
    requests = []
    for i in range(streams):
        n = prompt_words[i % len(prompt_words)]
        requests.append(LoadRequest(i, load_prompt(i, n), n, max_tokens[i % len(max_tokens)]))
    return requests


def request_body(model: str, request: LoadRequest) -> dict[str, Any]:
    body = completion_body(model, request.prompt, request.max_tokens, stream=True)
    body.update(logprobs=LOGPROBS, return_tokens_as_token_ids=True, return_token_ids=True)
    return body


def malformed_requests(model: str) -> list[tuple[str, dict[str, Any]]]:
    """``(name, httpx request arguments)`` of requests vLLM must refuse with a 4xx, not a 5xx or a dead engine."""
    valid = completion_body(model, "[malformed] the river", 8, stream=True)
    return [
        (
            "body is not JSON",
            {"content": b'{"model": "x", "prompt": ', "headers": {"Content-Type": "application/json"}},
        ),
        ("negative max_tokens", {"json": {**valid, "max_tokens": -1}}),
        ("temperature is a string", {"json": {**valid, "temperature": "hot"}}),
        ("model not served", {"json": {**valid, "model": "no-such-model"}}),
    ]


@dataclass
class _Progress:
    """Shared by the concurrent run's streams: how many are between their first token and their end."""

    streaming: int = 0
    first_token: asyncio.Event = field(default_factory=asyncio.Event)


def _top(entry: Any) -> list[list[Any]]:
    """One position's ``top_logprobs`` (``{"token_id:N": logprob}``) as ``[[N, logprob], ...]``, best first."""
    if not isinstance(entry, dict):
        return []
    pairs = []
    for name, logprob in entry.items():
        token: Any = name
        if isinstance(name, str) and name.startswith("token_id:") and name[9:].lstrip("-").isdigit():
            token = int(name[9:])
        pairs.append([token, logprob])
    return sorted(pairs, key=lambda pair: -float(pair[1]))


def _read_chunk(outcome: StreamOutcome, payload: str, started: float) -> None:
    try:
        chunk = json.loads(payload)
    except ValueError:
        chunk = None
    if not isinstance(chunk, dict):
        outcome.unreadable_chunks.append(short_text(payload, 120))
        return
    if "error" in chunk:
        outcome.error_events.append(error_message(payload))
        return
    if isinstance(chunk.get("usage"), dict):
        outcome.usage = chunk["usage"]
    for choice in chunk.get("choices") or []:
        if outcome.finish_reason is not None:
            outcome.chunks_after_finish += 1
        outcome.choice_chunks += 1
        if outcome.ttft_s is None:
            outcome.ttft_s = time.perf_counter() - started
        outcome.text += choice.get("text") or ""
        if isinstance(choice.get("token_ids"), list):
            outcome.token_ids = (outcome.token_ids or []) + choice["token_ids"]
        if isinstance(choice.get("logprobs"), dict):
            outcome.top_logprobs += [_top(entry) for entry in choice["logprobs"].get("top_logprobs") or []]
        if choice.get("finish_reason") is not None:
            outcome.finish_reason = choice["finish_reason"]


async def stream_completion(
    client: httpx.AsyncClient,
    url: str,
    body: dict[str, Any],
    index: int,
    *,
    progress: _Progress | None = None,
    close_after_chunks: int | None = None,
) -> StreamOutcome:
    """One streamed completion, read to ``[DONE]``, or closed by this client after ``close_after_chunks`` chunks
    (then ``others_streaming`` says how many of the load's streams were mid-answer at that moment)."""
    outcome = StreamOutcome(index)
    counted = progress is not None and close_after_chunks is None
    started = time.perf_counter()
    try:
        async with client.stream("POST", url, json=body) as response:
            outcome.status = response.status_code
            if response.status_code != 200:
                outcome.error_body = error_message(await response.aread())
                return outcome
            async for line in response.aiter_lines():
                if not line.startswith("data:"):
                    continue
                payload = line[len("data:") :].strip()
                if payload == "[DONE]":
                    outcome.done = True
                    break
                had_token = outcome.choice_chunks > 0
                _read_chunk(outcome, payload, started)
                if counted and not had_token and outcome.choice_chunks:
                    progress.streaming += 1
                    progress.first_token.set()
                if close_after_chunks is not None and outcome.choice_chunks >= close_after_chunks:
                    outcome.closed_early = True
                    outcome.others_streaming = progress.streaming if progress is not None else None
                    break  # leaving the block closes the response: the connection goes away mid-answer
    except httpx.HTTPError as exc:
        outcome.transport_error = describe_exception(exc, REQUEST_TIMEOUT_S)
    finally:
        outcome.latency_s = time.perf_counter() - started
        if counted and outcome.choice_chunks:
            progress.streaming -= 1
    return outcome


async def _send_malformed(client: httpx.AsyncClient, url: str, model: str, progress: _Progress) -> list[dict]:
    try:
        await asyncio.wait_for(progress.first_token.wait(), REQUEST_TIMEOUT_S)
    except asyncio.TimeoutError:  # TimeoutError's alias from Python 3.11 on
        pass  # no stream got a token: sent anyway, and the streams' own failures say why
    answers = []
    for name, arguments in malformed_requests(model):
        answer: dict[str, Any] = {"name": name, "others_streaming": progress.streaming}
        try:
            response = await client.post(url, **arguments)
            answer.update(status=response.status_code, message=error_message(response.content))
        except httpx.HTTPError as exc:
            answer.update(status=None, message=describe_exception(exc, REQUEST_TIMEOUT_S))
        answers.append(answer)
    return answers


async def _status(client: httpx.AsyncClient, url: str) -> int | None:
    try:
        return (await client.get(url)).status_code
    except httpx.HTTPError:
        return None


def running_requests(metrics_text: str) -> float | None:
    """The sum of vLLM's ``vllm:num_requests_running`` gauge over its label sets (None: the gauge is not there)."""
    values = [
        float(line.rsplit(maxsplit=1)[-1])
        for line in metrics_text.splitlines()
        if line.startswith(RUNNING_GAUGE + "{") or line.startswith(RUNNING_GAUGE + " ")
    ]
    return sum(values) if values else None


async def _drained(client: httpx.AsyncClient, url: str, wait_s: float) -> float | None:
    """vLLM's running requests once they reach 0, or as last read after ``wait_s``; None without the gauge."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            response = await client.get(url)
            running = running_requests(response.text) if response.status_code == 200 else None
        except httpx.HTTPError:
            running = None
        if running is None or running == 0 or time.monotonic() >= deadline:
            return running
        await asyncio.sleep(0.5)


@dataclass
class LoadTestResult:
    settings: dict[str, Any]
    requests: list[LoadRequest]
    sequential: list[StreamOutcome]
    concurrent: list[StreamOutcome]
    disconnect: StreamOutcome
    malformed: list[dict[str, Any]]
    after: StreamOutcome
    health_status: int | None
    running_after: float | None
    timings: dict[str, float]

    def mismatches(self) -> list[dict[str, Any]]:
        """Greedy differences between the runs, for the requests both runs completed."""
        found = []
        for request, base, run in zip(self.requests, self.sequential, self.concurrent, strict=True):
            if stream_problems(base, request) or stream_problems(run, request):
                continue
            mismatch = output_mismatch(base, run)
            if mismatch is not None:
                found.append(mismatch)
        return found

    def _stream_problems(self, outcomes: list[StreamOutcome]) -> list[str]:
        return [p for r, o in zip(self.requests, outcomes, strict=True) for p in stream_problems(o, r)]

    def failures(self) -> list[str]:
        """Every way the server failed the load test; empty when it passed."""
        found = [f"sequential run: {p}" for p in self._stream_problems(self.sequential)]
        found += [f"concurrent run: {p}" for p in self._stream_problems(self.concurrent)]
        found += [describe_mismatch(m) for m in self.mismatches()]
        found += _disconnect_problems(self.disconnect)
        found += [p for a in self.malformed if (p := malformed_problem(a["name"], a["status"], a["message"]))]
        first = self.requests[0]
        found += [f"request after the load: {p}" for p in stream_problems(self.after, first)]
        if not stream_problems(self.after, first) and output_mismatch(self.sequential[0], self.after):
            found.append("request after the load: its greedy output differs from the same request's earlier one")
        if self.health_status != 200:
            found.append(f"GET /health after the load answered {self.health_status}, expected 200")
        if self.running_after:
            found.append(
                f"{RUNNING_GAUGE} is {self.running_after:g} {self.settings['drain_wait_s']:g} s after the load "
                "(a request left running: the closed stream not aborted?)"
            )
        return found

    def to_dict(self) -> dict[str, Any]:
        def complete(outcomes: list[StreamOutcome]) -> int:
            return sum(not stream_problems(o, r) for r, o in zip(self.requests, outcomes, strict=True))

        failures = self.failures()
        return {
            "passed": not failures,
            "failures": failures,
            "settings": self.settings,
            "counts": {
                "streams": len(self.requests),
                "sequential_complete": complete(self.sequential),
                "concurrent_complete": complete(self.concurrent),
                "concurrent_errors": len(self.requests) - complete(self.concurrent),
                "mismatches": len(self.mismatches()),
                "malformed_answered_4xx": sum(
                    malformed_problem(a["name"], a["status"], a["message"]) is None for a in self.malformed
                ),
            },
            "timings": self.timings,
            "mismatches": self.mismatches(),
            "disconnect": {
                "chunks_read": self.disconnect.choice_chunks,
                "closed_mid_stream": self.disconnect.closed_early and self.disconnect.finish_reason is None,
                "others_streaming_at_close": self.disconnect.others_streaming,
                "status": self.disconnect.status,
                "error": self.disconnect.transport_error or self.disconnect.error_body,
            },
            "malformed": self.malformed,
            "after": self.after.summary(),
            "health_status": self.health_status,
            "requests_running_after": self.running_after,
            "streams": [
                {
                    "request": {k: v for k, v in asdict(r).items() if k != "prompt"},
                    "sequential": b.summary(),
                    "concurrent": c.summary(),
                }
                for r, b, c in zip(self.requests, self.sequential, self.concurrent, strict=True)
            ],  # fmt: skip
        }


def _disconnect_problems(outcome: StreamOutcome) -> list[str]:
    if outcome.transport_error or outcome.status != 200:
        return [f"disconnecting client: {outcome.transport_error or f'HTTP {outcome.status}: {outcome.error_body}'}"]
    if not outcome.closed_early or outcome.finish_reason is not None:
        return [
            f"disconnecting client: its stream ended ({outcome.choice_chunks} chunks, finish_reason "
            f"{outcome.finish_reason!r}) before the client closed it: nothing was disconnected mid-stream"
        ]
    if not outcome.others_streaming:
        return ["disconnecting client: no other stream was mid-answer when it closed: the disconnect tested nothing"]
    return []


async def _run(api_base: str, model: str, requests: list[LoadRequest], settings: dict[str, Any]) -> LoadTestResult:
    url = api_base + "/v1/completions"
    limits = httpx.Limits(max_connections=len(requests) + 16, max_keepalive_connections=len(requests) + 16)
    timeout = httpx.Timeout(settings["request_timeout_s"], connect=30.0)
    async with httpx.AsyncClient(timeout=timeout, limits=limits) as client:
        started = time.perf_counter()
        sequential = [await stream_completion(client, url, request_body(model, r), r.index) for r in requests]
        sequential_s = time.perf_counter() - started

        progress = _Progress()
        leaving = LoadRequest(
            len(requests),
            load_prompt(len(requests), settings["disconnect_prompt_words"]),
            settings["disconnect_prompt_words"],
            settings["disconnect_max_tokens"],
        )
        # the disconnecting stream is created first, so the server admits it before the load fills its batch
        disconnecting = stream_completion(
            client,
            url,
            request_body(model, leaving),
            leaving.index,
            progress=progress,
            close_after_chunks=settings["disconnect_after_chunks"],
        )
        streams = [stream_completion(client, url, request_body(model, r), r.index, progress=progress) for r in requests]
        started = time.perf_counter()
        disconnect, malformed, *concurrent = await asyncio.gather(
            disconnecting, _send_malformed(client, url, model, progress), *streams
        )
        concurrent_s = time.perf_counter() - started

        after = await stream_completion(client, url, request_body(model, requests[0]), requests[0].index)
        health = await _status(client, api_base + "/health")
        running = await _drained(client, api_base + "/metrics", settings["drain_wait_s"])
    timings = {"sequential_s": sequential_s, "concurrent_s": concurrent_s}
    return LoadTestResult(
        settings, requests, sequential, concurrent, disconnect, malformed, after, health, running, timings
    )


def run_load_test(
    api_base: str,
    model: str,
    requests: list[LoadRequest] | None = None,
    *,
    disconnect_after_chunks: int = DISCONNECT_AFTER_CHUNKS,
    disconnect_max_tokens: int = DISCONNECT_MAX_TOKENS,
    disconnect_prompt_words: int = DISCONNECT_PROMPT_WORDS,
    request_timeout_s: float = REQUEST_TIMEOUT_S,
    drain_wait_s: float = DRAIN_WAIT_S,
) -> LoadTestResult:
    """The load test against the server at ``api_base`` (its root URL) serving ``model``."""
    requests = load_requests() if requests is None else requests
    settings = {
        "api_base": api_base,
        "model": model,
        "streams": len(requests),
        "logprobs": LOGPROBS,
        "disconnect_after_chunks": disconnect_after_chunks,
        "disconnect_max_tokens": disconnect_max_tokens,
        "disconnect_prompt_words": disconnect_prompt_words,
        "request_timeout_s": request_timeout_s,
        "drain_wait_s": drain_wait_s,
    }
    return asyncio.run(_run(api_base.rstrip("/"), model, requests, settings))
