"""caovan.serving.client against a fake vLLM OpenAI server (fake_openai_server.py): readiness, requests, and the wire
format it reads (caovan.serving.protocol). The options that configure it: test_serving_args.py."""

from __future__ import annotations

import socket
import threading

import pytest

from caovan.serving import args as sa
from caovan.serving import client as sc
from caovan.serving import errors as se
from caovan.serving import protocol as sp


def _client(url: str, api_key: str | None = None, timeout: float = 5.0) -> sc.ServingClient:
    return sc.ServingClient(sc.ServerSettings(sa.normalize_api_base(url), api_key, 0.0, timeout))


def _refused_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # closed again: nothing listens there


class FakeClock:
    """A clock that only moves when the code sleeps (plus a fixed cost per reading, if asked)."""

    def __init__(self) -> None:
        self.now = 100.0
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


# --- model resolution --------------------------------------------------------------------------------------------


def test_resolve_model():
    assert sc.resolve_model(["m"], None, "http://h") == "m"
    assert sc.resolve_model(["a", "b"], "b", "http://h") == "b"
    with pytest.raises(se.UsageError) as several:
        sc.resolve_model(["a", "b"], None, "http://h")
    assert str(several.value) == "http://h serves 2 models (a, b): choose one with --model"
    with pytest.raises(se.ModelNotServed) as unknown:
        sc.resolve_model(["a", "b"], "c", "http://h")
    assert str(unknown.value) == "model 'c' is not served by http://h; it serves: a, b"
    assert unknown.value.exit_code == 1


# --- readiness ---------------------------------------------------------------------------------------------------


def test_wait_ready_when_up_lists_the_models(fake_openai):
    fake_openai.models = ["a", "b"]
    with _client(fake_openai.url + "/v1/") as client:
        ready = client.wait_ready(1.0)
    assert ready.models == ["a", "b"] and ready.attempts == 1
    assert ready.max_model_len == {"a": 4096, "b": 4096}
    assert [path for _, path, _ in fake_openai.requests] == ["/health", "/v1/models"]


def test_wait_ready_polls_until_health_and_models_answer(fake_openai):
    fake_openai.health_not_ready = 2
    fake_openai.models_not_ready = 1
    clock = FakeClock()
    with _client(fake_openai.url) as client:
        ready = client.wait_ready(30.0, clock=clock, sleep=clock.sleep)
    assert ready.attempts == 4 and ready.models == ["fake-model"]
    assert clock.sleeps == [0.05, 0.1, 0.2]  # backing off from FIRST_POLL_DELAY_S
    assert ready.seconds == pytest.approx(0.35)
    paths = [path for _, path, _ in fake_openai.requests]
    assert paths == ["/health", "/health", "/health", "/v1/models", "/health", "/v1/models"]


def test_wait_ready_times_out_naming_what_was_tried_and_the_last_error():
    port = _refused_port()
    with _client(f"http://127.0.0.1:{port}") as client:
        with pytest.raises(se.NotReady) as info:
            client.wait_ready(0.05)
    message = str(info.value)
    assert message.startswith(f"server at http://127.0.0.1:{port} not ready after ")
    assert "GET /health then GET /v1/models" in message
    assert message.endswith(f"last error: GET http://127.0.0.1:{port}/health: connection refused")
    assert info.value.exit_code == 2


def test_wait_ready_last_error_is_the_servers_answer(fake_openai):
    fake_openai.models_not_ready = 1000
    clock = FakeClock()
    with _client(fake_openai.url) as client, pytest.raises(se.NotReady) as info:
        client.wait_ready(2.0, clock=clock, sleep=clock.sleep)
    assert str(info.value).endswith(f"last error: GET {fake_openai.url}/v1/models: HTTP 503: starting")
    assert sum(clock.sleeps) == pytest.approx(2.0)  # the whole budget, never more
    assert max(clock.sleeps) <= sc.MAX_POLL_DELAY_S


def test_wait_ready_zero_tries_once():
    clock = FakeClock()
    with _client(f"http://127.0.0.1:{_refused_port()}") as client, pytest.raises(se.NotReady, match="1 attempt"):
        client.wait_ready(0.0, clock=clock, sleep=clock.sleep)
    assert clock.sleeps == []


def test_a_wrong_api_base_path_fails_at_once_and_says_what_it_should_be(fake_openai):
    clock = FakeClock()
    with _client(fake_openai.url + "/v1/completions") as client, pytest.raises(se.UsageError) as info:
        client.wait_ready(600.0, clock=clock, sleep=clock.sleep)
    assert str(info.value) == (
        f"GET {fake_openai.url}/v1/completions/v1/models: HTTP 404: Not Found: no vLLM OpenAI API there; --api-base "
        f"should be the server's root (e.g. {fake_openai.url}, or {fake_openai.url}/v1), not a route"
    )
    assert clock.sleeps == []  # a route that is not there will not appear by waiting
    assert [path for _, path, _ in fake_openai.requests] == ["/v1/completions/health", "/v1/completions/v1/models"]


@pytest.mark.parametrize("key", [None, "sekrit"])
def test_a_wrong_route_on_a_server_with_an_api_key_is_not_polled(fake_openai, key):
    # /health under /v1 is behind the key (401): the wait must still end at once, on /v1/models' answer.
    fake_openai.api_key = "sekrit"
    clock = FakeClock()
    settings = sc.ServerSettings(fake_openai.url + "/v1/completions", key, 600.0, 5.0)
    with sc.ServingClient(settings) as client, pytest.raises(se.UsageError) as info:
        client.wait_ready(600.0, clock=clock, sleep=clock.sleep)
    assert clock.sleeps == []
    assert ("no vLLM OpenAI API there" if key else "the server wants an API key") in str(info.value)


def test_wait_for_model_says_what_it_waits_for_then_waits_and_picks_the_model(fake_openai, capsys):
    fake_openai.models = ["a", "b"]
    settings = sc.ServerSettings(fake_openai.url, None, 2.5, 5.0)
    with sc.ServingClient(settings) as client:
        ready, model = sc.wait_for_model(client, settings, "b", "benchmark")
        assert (ready.models, model) == (["a", "b"], "b")
        assert capsys.readouterr().out == (
            f"[Caovan] benchmark: waiting up to 2.5 s for {fake_openai.url} (GET /health then GET /v1/models)\n"
        )
        with pytest.raises(se.UsageError, match="serves 2 models"):
            sc.wait_for_model(client, settings, None, "warmup")
    assert capsys.readouterr().out.startswith("[Caovan] warmup: waiting up to 2.5 s for ")


def test_a_server_without_health_is_judged_by_its_model_list(fake_openai):
    fake_openai.health_status = 404
    with _client(fake_openai.url) as client:
        assert client.wait_ready(1.0).models == ["fake-model"]


def test_a_missing_api_key_fails_at_once_and_a_given_one_is_sent(fake_openai):
    fake_openai.api_key = "sekrit"
    clock = FakeClock()
    with _client(fake_openai.url) as client, pytest.raises(se.UsageError) as info:
        client.wait_ready(600.0, clock=clock, sleep=clock.sleep)
    assert str(info.value) == (
        f"GET {fake_openai.url}/v1/models: HTTP 401: Unauthorized: the server wants an API key: pass --api-key or set "
        "$VLLM_API_KEY"
    )
    assert clock.sleeps == []  # no waiting for a key that will not come
    with _client(fake_openai.url, api_key="sekrit") as client:
        assert client.wait_ready(1.0).models == ["fake-model"]
        assert client.complete("fake-model", "hi", 3).completion_tokens == 3
    assert fake_openai.headers[-1]["Authorization"] == "Bearer sekrit"


@pytest.mark.parametrize("source", ["--api-key", "$VLLM_API_KEY", "$OPENAI_API_KEY", None])
def test_a_refused_api_key_is_not_called_missing_and_where_it_came_from_is_named(fake_openai, source):
    fake_openai.api_key = "right"
    settings = sc.ServerSettings(fake_openai.url, "wrong", 0.0, 5.0, source)
    with sc.ServingClient(settings) as client, pytest.raises(se.UsageError) as info:
        client.wait_ready(600.0)
    where = f" (taken from {source})" if source else ""
    assert (
        str(info.value)
        == f"GET {fake_openai.url}/v1/models: HTTP 401: Unauthorized: the server refused the API key{where}"
    )


def test_vllm_version(fake_openai):
    with _client(fake_openai.url) as client:
        assert client.vllm_version() == "0.21.0"
        fake_openai.version = None
        assert client.vllm_version() is None


def test_count_tokens_asks_vllms_tokenize_route(fake_openai):
    with _client(fake_openai.url + "/v1") as client:
        assert client.count_tokens("fake-model", "one two three") == 3
        assert fake_openai.requests[-1] == ("POST", "/tokenize", {"model": "fake-model", "prompt": "one two three"})
        fake_openai.tokenize = False  # a server without the route
        with pytest.raises(se.RequestFailed) as info:
            client.count_tokens("fake-model", "p")
    assert str(info.value) == f"POST {fake_openai.url}/tokenize: HTTP 404: Not Found"


# --- completions ---------------------------------------------------------------------------------------------------


def test_complete_sends_a_greedy_ignore_eos_request(fake_openai):
    with _client(fake_openai.url) as client:
        result = client.complete("fake-model", "one two three", 5)
    assert (result.completion_tokens, result.prompt_tokens, result.ttft_s) == (5, 3, None)
    assert result.latency_s > 0
    (body,) = fake_openai.completion_bodies()
    assert body == {
        "model": "fake-model", "prompt": "one two three", "max_tokens": 5, "temperature": 0, "ignore_eos": True,
        "stream": False,
    }  # fmt: skip


def test_complete_failures_say_what_came_back(fake_openai):
    fake_openai.fail_requests = {0}
    fake_openai.malformed_requests = {1}
    with _client(fake_openai.url) as client:
        with pytest.raises(se.RequestFailed) as failed:
            client.complete("fake-model", "p", 4)
        with pytest.raises(se.RequestFailed) as malformed:
            client.complete("fake-model", "p", 4)
        with pytest.raises(se.RequestFailed) as unknown:
            client.complete("nope", "p", 4)
    url = f"{fake_openai.url}/v1/completions"
    assert str(failed.value) == f"POST {url}: HTTP 500: fake failure of request 0"
    assert str(malformed.value) == f"POST {url}: the answer is not JSON ('<html>not json</html>')"
    assert str(unknown.value) == f"POST {url}: HTTP 404: The model `nope` does not exist."


def test_complete_on_a_closed_port_is_a_failed_request():
    with _client(f"http://127.0.0.1:{_refused_port()}") as client, pytest.raises(se.RequestFailed) as info:
        client.complete("m", "p", 1)
    assert str(info.value).endswith("/v1/completions: connection refused")


def test_stream_complete_counts_tokens_from_the_usage_chunk(fake_openai):
    with _client(fake_openai.url) as client:
        result = client.stream_complete("fake-model", "a b c d", 6)
    assert (result.completion_tokens, result.prompt_tokens) == (6, 4)
    assert 0 < result.ttft_s <= result.latency_s
    (body,) = fake_openai.completion_bodies()
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}
    assert body["ignore_eos"] is True and body["temperature"] == 0


def test_stream_complete_failures(fake_openai):
    fake_openai.stream_error_requests = {0}
    fake_openai.fail_requests = {1}
    with _client(fake_openai.url) as client:
        with pytest.raises(se.RequestFailed, match="error in the stream: fake engine error$"):
            client.stream_complete("fake-model", "p", 4)
        with pytest.raises(se.RequestFailed, match="HTTP 500: fake failure of request 1$"):
            client.stream_complete("fake-model", "p", 4)
        fake_openai.no_usage = True
        with pytest.raises(se.RequestFailed, match="no usage"):
            client.stream_complete("fake-model", "p", 4)


# vLLM 0.21.0's own stream for a 3-token completion with include_usage (completion/serving.py), as sent.
VLLM_STREAM = (
    'data: {"id":"cmpl-x","object":"text_completion","created":1,"model":"m",'
    '"choices":[{"index":0,"text":" The","logprobs":null,"finish_reason":null,"stop_reason":null}]}\n'
    "\n"
    'data: {"id":"cmpl-x","object":"text_completion","created":1,"model":"m",'
    '"choices":[{"index":0,"text":" cat","logprobs":null,"finish_reason":null,"stop_reason":null}]}\n'
    "\n"
    'data: {"id":"cmpl-x","object":"text_completion","created":1,"model":"m",'
    '"choices":[{"index":0,"text":" sat","logprobs":null,"finish_reason":"length","stop_reason":null}]}\n'
    "\n"
    'data: {"id":"cmpl-x","object":"text_completion","created":1,"model":"m","choices":[],'
    '"usage":{"prompt_tokens":7,"total_tokens":10,"completion_tokens":3}}\n'
    "\n"
    "data: [DONE]\n"
    "\n"
)


def _ticking(step: float):
    """A clock that moves ``step`` per reading: 0, step, 2*step, …"""
    readings = iter(range(1000))
    return lambda: next(readings) * step


def test_read_completion_stream_on_vllms_format():
    clock = _ticking(0.5)
    started = clock()  # 0.0
    result = sp.read_completion_stream(VLLM_STREAM.splitlines(), started, clock)
    # the clock is read at the first chunk with a choice (0.5) and at [DONE] (1.0)
    assert result == sp.Completion(prompt_tokens=7, completion_tokens=3, latency_s=1.0, ttft_s=0.5)


def test_ttft_is_the_first_chunk_that_carries_a_choice():
    # a clock that is the number of lines read so far: the time each chunk arrived is its line number
    lines = [
        'data: {"choices":[],"usage":null}',  # e.g. a role-only or usage-only chunk first: no token yet
        "",
        *VLLM_STREAM.splitlines(),
    ]
    read = [0]

    def arriving():
        for line in lines:
            read[0] += 1
            yield line

    result = sp.read_completion_stream(arriving(), 0.0, lambda: float(read[0]))
    assert (result.ttft_s, result.latency_s) == (3.0, float(len(lines) - 1))  # [DONE] is the last line but one


def test_read_completion_stream_rejects_broken_streams():
    lines = VLLM_STREAM.splitlines()
    with pytest.raises(se.RequestFailed, match=r"ended without 'data: \[DONE\]'"):
        sp.read_completion_stream(lines[:-2], 0.0, _ticking(1))
    with pytest.raises(se.RequestFailed, match="malformed stream chunk: '{not json'"):
        sp.read_completion_stream(["data: {not json", "data: [DONE]"], 0.0, _ticking(1))
    usage_zero = ['data: {"choices":[{"text":""}]}', 'data: {"choices":[],"usage":{"completion_tokens":0}}']
    with pytest.raises(se.RequestFailed, match="generated no token"):
        sp.read_completion_stream([*usage_zero, "data: [DONE]"], 0.0, _ticking(1))


def test_sse_skips_comments_blank_lines_and_other_fields():
    lines = [": keep-alive", "", "event: message", "id: 3", "data:{}", "data: [DONE]", "data: after"]
    assert list(sp.iter_sse_data(lines)) == ["{}"]


def test_describe_http_error_reads_vllms_older_and_fastapis_error_bodies():
    assert sp.describe_http_error(400, b'{"error": {"message": "too long", "code": 400}}') == "HTTP 400: too long"
    assert sp.describe_http_error(400, b'{"object": "error", "message": "old style"}') == "HTTP 400: old style"
    assert sp.describe_http_error(404, b'{"detail": "Not Found"}') == "HTTP 404: Not Found"  # FastAPI's own
    assert sp.describe_http_error(502, b"Bad\n gateway") == "HTTP 502: Bad gateway"
    assert sp.describe_http_error(500, b"") == "HTTP 500: (empty body)"


# --- concurrency -----------------------------------------------------------------------------------------------------


def test_run_concurrently_keeps_order_caps_concurrency_and_collects_failures():
    lock = threading.Lock()
    running = [0]
    peak = [0]
    gate = threading.Barrier(3, timeout=2)  # the first three must all be in flight together

    def task(index: int):
        with lock:
            running[0] += 1
            peak[0] = max(peak[0], running[0])
        if index < 3:
            gate.wait()
        with lock:
            running[0] -= 1
        if index == 4:
            raise se.RequestFailed("request 4 failed")
        return index * 10

    results = sc.run_concurrently(task, 7, 3)
    assert results[:4] == [0, 10, 20, 30] and results[5:] == [50, 60]
    assert isinstance(results[4], se.RequestFailed) and str(results[4]) == "request 4 failed"
    assert peak[0] == 3


def test_run_concurrently_raises_what_is_not_a_client_error():
    def task(index: int):
        if index == 1:
            raise ZeroDivisionError("a bug")
        return index

    with pytest.raises(ZeroDivisionError, match="a bug"):
        sc.run_concurrently(task, 3, 2)


def test_messages_never_show_url_userinfo():
    with pytest.raises(se.UsageError) as info:
        sa.normalize_api_base("ftp://user:secret@host")
    assert "secret" not in str(info.value) and "ftp://host" in str(info.value)
    settings = sc.ServerSettings(sa.normalize_api_base("http://user:secret@127.0.0.1:9/v1"), None, 0.0, 1.0)
    assert settings.api_base == "http://user:secret@127.0.0.1:9" and settings.shown_api_base == "http://127.0.0.1:9"
    with sc.ServingClient(settings) as client, pytest.raises(se.NotReady) as info:
        client.wait_ready(0)
    assert "secret" not in str(info.value) and "GET http://127.0.0.1:9/health" in str(info.value)


def test_fewer_tokens_than_asked():
    assert sp.fewer_tokens_than_asked([5, 5], 5) is None and sp.fewer_tokens_than_asked([], 5) is None
    assert sp.fewer_tokens_than_asked([5, 3], 5) == "asked for 5: does the server ignore ignore_eos?"
