"""Judging a load test of a vLLM OpenAI server (:mod:`helpers.http_load` runs it): what one streamed completion
must show to count as complete, and where a concurrent run's greedy outputs differ from a sequential run's.

Pure functions of what the streams carried, no network, so the unit tests feed them outcomes directly.

A complete stream, as vLLM 0.21.0 sends one for a request with ``ignore_eos``, ``stream_options.include_usage``
and ``return_token_ids`` (``vllm/entrypoints/openai/completion/serving.py``): HTTP 200; chunks whose one choice
carries the text and ``token_ids`` of one or more new tokens (several at a time under speculative decoding); the
last of them, and only it, with ``finish_reason`` ``"length"`` (the request ran to ``max_tokens``); then a chunk
with ``"choices": []`` and ``usage``; then ``data: [DONE]``. No ``{"error": ...}`` event anywhere.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

#: The finish reason of a request sent with ``ignore_eos`` that ran to its ``max_tokens``.
FINISHED_BY_LENGTH = "length"


@dataclass(frozen=True)
class LoadRequest:
    """One request of the load: its position in the load, its prompt (``prompt_words`` words) and output length."""

    index: int
    prompt: str
    prompt_words: int
    max_tokens: int


@dataclass
class StreamOutcome:
    """What one streamed completion carried (filled in as its chunks arrive)."""

    index: int
    status: int | None = None  # None: no HTTP answer at all (see transport_error)
    transport_error: str | None = None
    error_body: str | None = None  # the message of a non-200 answer
    error_events: list[str] = field(default_factory=list)  # ``data: {"error": ...}`` inside the stream
    unreadable_chunks: list[str] = field(default_factory=list)
    done: bool = False  # ``data: [DONE]`` arrived
    choice_chunks: int = 0
    finish_reason: str | None = None
    #: Choice chunks that came after the one with a finish_reason (0 in a well-formed stream).
    chunks_after_finish: int = 0
    text: str = ""
    token_ids: list[int] | None = None  # None: no chunk carried ``token_ids``
    #: Per generated token, its run's best tokens as ``[token id, logprob]``, best first (``logprobs`` requests).
    top_logprobs: list[list[list[Any]]] = field(default_factory=list)
    usage: dict[str, Any] | None = None
    ttft_s: float | None = None
    latency_s: float | None = None
    closed_early: bool = False  # the client closed the stream itself (the disconnect test)
    others_streaming: int | None = None  # … when the load's other streams mid-answer at that moment numbered this

    @property
    def completion_tokens(self) -> int | None:
        tokens = (self.usage or {}).get("completion_tokens")
        return tokens if isinstance(tokens, int) and not isinstance(tokens, bool) else None

    def summary(self) -> dict[str, Any]:
        """The outcome as the result JSON keeps it (without the per-token logprobs)."""
        return {
            "index": self.index,
            "status": self.status,
            "finish_reason": self.finish_reason,
            "choice_chunks": self.choice_chunks,
            "completion_tokens": self.completion_tokens,
            "prompt_tokens": (self.usage or {}).get("prompt_tokens"),
            "ttft_s": self.ttft_s,
            "latency_s": self.latency_s,
            "token_ids": self.token_ids,
            "text": self.text,
        }


def stream_problems(outcome: StreamOutcome, request: LoadRequest) -> list[str]:
    """Why ``outcome`` is not a complete, error-free stream of ``request``; empty when it is."""
    name = f"stream {request.index}"
    if outcome.transport_error is not None:
        return [f"{name}: {outcome.transport_error}"]
    if outcome.status != 200:
        return [f"{name}: HTTP {outcome.status}: {outcome.error_body}"]
    found = [f"{name}: error event in the stream: {message}" for message in outcome.error_events]
    found += [f"{name}: unreadable chunk: {chunk}" for chunk in outcome.unreadable_chunks]
    if not outcome.done:
        found.append(f"{name}: the stream ended without 'data: [DONE]'")
    if outcome.finish_reason is None:
        found.append(f"{name}: no chunk carried a finish_reason (the final chunk is missing)")
    elif outcome.finish_reason != FINISHED_BY_LENGTH:
        found.append(f"{name}: finish_reason {outcome.finish_reason!r}, expected {FINISHED_BY_LENGTH!r} (ignore_eos)")
    if outcome.chunks_after_finish:
        found.append(f"{name}: {outcome.chunks_after_finish} choice chunk(s) after the one with the finish_reason")
    tokens = outcome.completion_tokens
    if tokens is None:
        found.append(f"{name}: no usage chunk with completion_tokens")
    elif tokens != request.max_tokens:
        found.append(f"{name}: usage.completion_tokens={tokens}, but max_tokens={request.max_tokens} (ignore_eos)")
    if outcome.token_ids is None:
        found.append(f"{name}: no chunk carried token_ids (return_token_ids)")
    elif tokens is not None and len(outcome.token_ids) != tokens:
        found.append(f"{name}: {len(outcome.token_ids)} token ids streamed, usage.completion_tokens={tokens}")
    return found


def _gap(top: list[list[Any]] | None) -> float | None:
    """The logprob margin of the best token over the second best at one position (None: fewer than two)."""
    if not top or len(top) < 2:
        return None
    return float(top[0][1]) - float(top[1][1])


def _at(values: list[Any], position: int) -> Any:
    return values[position] if position < len(values) else None


def output_mismatch(baseline: StreamOutcome, concurrent: StreamOutcome) -> dict[str, Any] | None:
    """Where ``concurrent``'s greedy output differs from ``baseline``'s (token ids, then text); None when equal.

    At the first differing token it keeps both runs' best tokens and their margins: a margin of rounding size says
    the two runs' logits differ by rounding and a near tie flipped; a large one says they computed different things.
    """
    base_ids, ids = baseline.token_ids or [], concurrent.token_ids or []
    if base_ids == ids and baseline.text == concurrent.text:
        return None
    position = next((i for i, (a, b) in enumerate(zip(base_ids, ids, strict=False)) if a != b), None)
    if position is None and len(base_ids) != len(ids):
        position = min(len(base_ids), len(ids))
    mismatch: dict[str, Any] = {
        "index": baseline.index,
        "first_token_difference": position,  # None: same token ids, different text
        "baseline_tokens": len(base_ids),
        "concurrent_tokens": len(ids),
    }
    if position is not None:
        base_top, top = _at(baseline.top_logprobs, position), _at(concurrent.top_logprobs, position)
        mismatch.update(
            baseline_token=_at(base_ids, position),
            concurrent_token=_at(ids, position),
            baseline_top=base_top,
            concurrent_top=top,
            baseline_margin=_gap(base_top),
            concurrent_margin=_gap(top),
        )
    else:
        mismatch.update(baseline_text=baseline.text, concurrent_text=concurrent.text)
    return mismatch


def describe_mismatch(mismatch: dict[str, Any]) -> str:
    index, position = mismatch["index"], mismatch["first_token_difference"]
    if position is None:
        return f"stream {index}: same token ids, different text"
    return (
        f"stream {index}: greedy output differs from the sequential run's at token {position}: "
        f"{mismatch['concurrent_token']} (concurrent) vs {mismatch['baseline_token']} (sequential); best-token "
        f"margins {mismatch['concurrent_margin']} / {mismatch['baseline_margin']} nats"
    )


def malformed_problem(name: str, status: int | None, message: str) -> str | None:
    """Why the answer to a malformed request is not a 4xx (None when it is)."""
    if status is not None and 400 <= status < 500:
        return None
    return (
        f"malformed request {name!r}: expected a 4xx answer, got {status if status is not None else 'none'}: {message}"
    )
