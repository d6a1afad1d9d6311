"""vLLM's OpenAI-compatible wire format as ``caovan warmup`` and ``caovan benchmark`` use it: the completion request
body, the answer (:class:`Completion`), error bodies and the Server-Sent Events of a streamed completion.

Pure functions of text and JSON, no network: :mod:`caovan.serving.client` sends the requests and hands the answers
here, and the tests feed recorded answers straight in. The formats, and where vLLM 0.21.0 defines them, are listed in
:mod:`caovan.serving.client`'s docstring.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from caovan.serving.errors import RequestFailed


@dataclass(frozen=True)
class Completion:
    """One request's answer: tokens from ``usage``; times in seconds from sending the request.

    ``ttft_s`` (the first chunk that carries a choice) only for a streamed request.
    """

    prompt_tokens: int | None
    completion_tokens: int
    latency_s: float
    ttft_s: float | None = None


def fewer_tokens_than_asked(tokens: Iterable[int], asked: int) -> str | None:
    """A note when an answer generated fewer than the ``asked`` tokens: every request is sent with ``ignore_eos``
    and ``max_tokens``, so only a server that ignores ``ignore_eos`` stops early; ``None`` when none did."""
    if min(tokens, default=asked) < asked:
        return f"asked for {asked}: does the server ignore ignore_eos?"
    return None


def short_text(text: str, limit: int = 300) -> str:
    """``text`` on one line, cut to ``limit`` characters: a server's answer quoted in a message."""
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def describe_http_error(status: int, body: bytes | str) -> str:
    """``HTTP 404: The model `x` does not exist.``: the message of vLLM's error body, else the body itself."""
    return f"HTTP {status}: {error_message(body)}"


def error_message(body: bytes | str) -> str:
    """The message of an error body (vLLM's ``{"error": {"message": …}}``, the older top-level ``message``, or
    FastAPI's ``{"detail": …}``), else the body itself, shortened to one line."""
    text = body.decode("utf-8", "replace") if isinstance(body, bytes) else body
    message = None
    try:
        data = json.loads(text)
    except ValueError:
        data = None
    if isinstance(data, dict):
        error = data.get("error")
        if isinstance(error, dict) and isinstance(error.get("message"), str):
            message = error["message"]
        elif isinstance(error, str):
            message = error
        elif isinstance(data.get("message"), str):
            message = data["message"]
        elif isinstance(data.get("detail"), str):  # FastAPI's own answers, e.g. a route that does not exist
            message = data["detail"]
    if message is None:
        message = text.strip() or "(empty body)"
    return short_text(message)


def completion_body(model: str, prompt: str, max_tokens: int, *, stream: bool) -> dict[str, Any]:
    """Greedy, exactly ``max_tokens`` tokens (``ignore_eos``), so decode (and MTP drafting) really runs."""
    body: dict[str, Any] = {
        "model": model,
        "prompt": prompt,
        "max_tokens": max_tokens,
        "temperature": 0,
        "ignore_eos": True,
        "stream": stream,
    }
    if stream:
        body["stream_options"] = {"include_usage": True}
    return body


def iter_sse_data(lines: Iterable[str]) -> Iterator[str]:
    """The payloads of Server-Sent Events ``data:`` lines, up to (not including) ``[DONE]``.

    Blank lines, comments (``:``) and other fields (``event:``, ``id:``) are skipped. :class:`RequestFailed` if the
    stream ends without ``[DONE]``.
    """
    for raw in lines:
        line = raw.rstrip("\r\n")
        if not line.startswith("data:"):
            continue
        payload = line[len("data:") :].strip()
        if payload == "[DONE]":
            return
        yield payload
    raise RequestFailed("the stream ended without 'data: [DONE]'")


def read_completion_stream(lines: Iterable[str], started: float, clock: Callable[[], float]) -> Completion:
    """Time and count a streamed completion from its SSE lines (``started``: ``clock()`` when the request left)."""
    ttft = None
    usage = None
    for payload in iter_sse_data(lines):
        try:
            chunk = json.loads(payload)
        except ValueError:
            raise RequestFailed(f"malformed stream chunk: {short_text(payload, 120)!r}") from None
        if not isinstance(chunk, dict):
            raise RequestFailed(f"malformed stream chunk (not an object): {short_text(payload, 120)!r}")
        if "error" in chunk:
            raise RequestFailed(f"error in the stream: {error_message(payload)}")
        choices = chunk.get("choices")
        if ttft is None and isinstance(choices, list) and choices:
            ttft = clock() - started
        if isinstance(chunk.get("usage"), dict):
            usage = chunk["usage"]
    latency = clock() - started
    if usage is None:
        raise RequestFailed("the stream carried no usage (does the server honour stream_options.include_usage?)")
    tokens = completion_tokens(usage)
    if ttft is None:
        raise RequestFailed("the stream carried no choice (no token)")
    return Completion(int_or_none(usage.get("prompt_tokens")), tokens, latency, ttft)


def int_or_none(value: Any) -> int | None:
    """A JSON integer (not a bool) as itself, anything else as None."""
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def completion_tokens(usage: Any) -> int:
    """``usage.completion_tokens`` of an answer; :class:`RequestFailed` unless it is a positive integer."""
    tokens = int_or_none(usage.get("completion_tokens")) if isinstance(usage, dict) else None
    if tokens is None:
        raise RequestFailed(f"no usage.completion_tokens in the answer (usage: {short_text(json.dumps(usage), 120)})")
    if tokens < 1:
        raise RequestFailed(f"the server generated no token (usage.completion_tokens={tokens})")
    return tokens
