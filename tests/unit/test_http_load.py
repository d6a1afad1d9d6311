"""The serve tier's load test (helpers.http_load, judged by helpers.http_load_checks) against the fake vLLM server:
a healthy server passes, and each way a server can fail it (a stream without its final chunk, greedy output that
depends on the batch, a disconnect that breaks other streams, a 5xx or a dead engine after a malformed request, a
request left running) is reported."""

from __future__ import annotations

import json
import time

import pytest
from helpers import http_load
from helpers.http_load_checks import LoadRequest, StreamOutcome, output_mismatch, stream_problems

#: Small enough for a unit test: six streams of 8 to 24 tokens, 5 ms apart, so a stream lasts 40 - 120 ms and the
#: disconnecting client (3 chunks) closes while the others are mid-answer.
REQUESTS = http_load.load_requests(6, prompt_words=(2, 5, 9), max_tokens=(8, 16, 24))
CHUNK_DELAY_S = 0.005


@pytest.fixture
def fake(fake_openai):
    fake_openai.stream_chunk_delay_s = CHUNK_DELAY_S
    return fake_openai


def _run(fake, **options) -> http_load.LoadTestResult:
    options = {"disconnect_max_tokens": 400, "request_timeout_s": 30.0, "drain_wait_s": 0.3, **options}
    return http_load.run_load_test(fake.url, "fake-model", REQUESTS, **options)


def _wait_for_disconnect(fake, timeout_s: float = 5.0) -> int:
    deadline = time.monotonic() + timeout_s
    while fake.disconnects == 0 and time.monotonic() < deadline:
        time.sleep(0.01)
    return fake.disconnects


def test_a_healthy_server_passes_and_the_record_is_json(fake):
    result = _run(fake)
    assert result.failures() == []
    record = json.loads(json.dumps(result.to_dict()))
    assert record["passed"] is True
    assert record["counts"] == {
        "streams": 6,
        "sequential_complete": 6,
        "concurrent_complete": 6,
        "concurrent_errors": 0,
        "mismatches": 0,
        "malformed_answered_4xx": 4,
    }
    assert [a["status"] for a in record["malformed"]] == [400, 400, 400, 404]
    assert record["disconnect"]["closed_mid_stream"] and record["disconnect"]["others_streaming_at_close"] > 0
    assert [s["concurrent"]["completion_tokens"] for s in record["streams"]] == [8, 16, 24, 8, 16, 24]
    assert record["requests_running_after"] is None  # the fake's /metrics has no such gauge
    # the load really ran at once, and the server saw the client go away
    assert max(fake.in_flight_peaks) >= 4
    assert _wait_for_disconnect(fake) == 1


def test_the_load_is_greedy_token_ids_with_logprobs_and_mixed_lengths():
    bodies = [http_load.request_body("m", r) for r in http_load.load_requests()]
    assert len(bodies) == 64
    assert {b["temperature"] for b in bodies} == {0} and all(b["stream"] and b["ignore_eos"] for b in bodies)
    assert all(b["return_token_ids"] and b["logprobs"] == 2 for b in bodies)
    assert {len(b["prompt"].split()) - 2 for b in bodies} == set(http_load.PROMPT_WORDS)
    assert {b["max_tokens"] for b in bodies} == set(http_load.MAX_TOKENS)
    assert len({b["prompt"] for b in bodies}) == 64


def test_a_stream_without_its_final_chunk_fails(fake):
    fake.drop_finish_requests = {2}  # the sequential run's third request
    failures = _run(fake).failures()
    assert "sequential run: stream 2: no chunk carried a finish_reason (the final chunk is missing)" in failures
    assert any(
        f.startswith("sequential run: stream 2: 23 token ids streamed, usage.completion_tokens=24") for f in failures
    )


def test_fewer_tokens_than_asked_fails(fake):
    fake.tokens_cap = 5
    failures = _run(fake).failures()
    assert "concurrent run: stream 1: usage.completion_tokens=5, but max_tokens=16 (ignore_eos)" in failures


def test_greedy_output_that_depends_on_the_batch_is_a_mismatch(fake):
    fake.diverge_above_in_flight = 1  # alone (the sequential run) a request gets its tokens, beside others not
    result = _run(fake)
    mismatches = result.mismatches()
    assert mismatches, result.failures()
    assert {m["first_token_difference"] for m in mismatches} == {1}
    assert mismatches[0]["baseline_margin"] == 1.0  # the fake's top-2 logprobs are 1 nat apart
    assert any("greedy output differs from the sequential run's at token 1" in f for f in result.failures())


def test_a_disconnect_that_breaks_the_other_streams_fails(fake):
    fake.disconnect_breaks_others = True
    fake.stream_chunk_delay_s = 0.02  # the others must still be streaming when the fake notices the close
    failures = _run(fake).failures()
    assert any(f.startswith("concurrent run: stream") and "error event in the stream" in f for f in failures), failures


def test_a_disconnect_after_the_stream_ended_tests_nothing_and_fails(fake):
    failures = _run(fake, disconnect_max_tokens=2).failures()
    assert any("before the client closed it: nothing was disconnected mid-stream" in f for f in failures), failures


def test_a_malformed_request_answered_with_a_server_error_fails(fake):
    fake.malformed_status = 500
    failures = _run(fake).failures()
    assert any(
        f.startswith("malformed request 'negative max_tokens': expected a 4xx answer, got 500") for f in failures
    )


def test_an_engine_dead_after_a_malformed_request_fails(fake):
    fake.dead_after_malformed = True
    failures = _run(fake).failures()
    assert "request after the load: stream 0: HTTP 503: the engine is dead" in failures


def test_a_request_left_running_fails(fake):
    fake.metrics = 'vllm:num_requests_running{engine="0",model_name="fake-model"} 1.0\n'
    result = _run(fake)
    assert result.running_after == 1.0
    assert any("vllm:num_requests_running is 1" in f for f in result.failures())


def test_running_requests_sums_the_gauge_over_its_label_sets():
    text = (
        "# TYPE vllm:num_requests_running gauge\n"
        'vllm:num_requests_running{engine="0"} 2.0\n'
        'vllm:num_requests_running{engine="1"} 1.0\n'
        'vllm:num_requests_running_other{engine="0"} 7.0\n'
    )
    assert http_load.running_requests(text) == 3.0
    assert http_load.running_requests("vllm:num_requests_waiting 0.0\n") is None


def test_a_mismatch_in_text_alone_is_reported():
    base = StreamOutcome(0, token_ids=[1, 2], text=" a b")
    assert output_mismatch(base, StreamOutcome(0, token_ids=[1, 2], text=" a b")) is None
    mismatch = output_mismatch(base, StreamOutcome(0, token_ids=[1, 2], text=" a c"))
    assert mismatch["first_token_difference"] is None and mismatch["concurrent_text"] == " a c"
    shorter = output_mismatch(base, StreamOutcome(0, token_ids=[1], text=" a"))
    assert shorter["first_token_difference"] == 1 and shorter["concurrent_token"] is None


def test_chunks_after_the_finish_and_a_missing_done_are_problems():
    request = LoadRequest(3, "p", 1, 2)
    outcome = StreamOutcome(3, status=200, finish_reason="length", chunks_after_finish=1, token_ids=[4, 5])
    outcome.usage = {"completion_tokens": 2}
    assert stream_problems(outcome, request) == [
        "stream 3: the stream ended without 'data: [DONE]'",
        "stream 3: 1 choice chunk(s) after the one with the finish_reason",
    ]
