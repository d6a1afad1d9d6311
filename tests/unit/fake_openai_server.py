"""A fake vLLM OpenAI-compatible server in a thread, for unit tests of caovan's HTTP clients (warmup, benchmark).

It answers the routes caovan's client uses the way vLLM 0.21.0 does (see caovan.serving.client's docstring):
/health (empty 200), /v1/models (ModelList), /version ({"version": ...}), /metrics (Prometheus text), /tokenize
(``{"count", "max_model_len", "tokens"}``; a token is a word here, as in the completions' usage), /v1/completions
(plain, or streamed as ``data: {chunk}`` + blank line, a last usage chunk with ``"choices": []``, then
``data: [DONE]``), errors as ``{"error": {"message", "type", "param", "code"}}``, routes it lacks as FastAPI's 404
``{"detail": "Not Found"}``. A completion's tokens are a function of its prompt (greedy: the same prompt gives the
same tokens), their ids sent with ``return_token_ids`` and their top logprobs with ``logprobs``; a body that is not
JSON, a ``max_tokens`` below 1 or a ``temperature`` that is not a number gets vLLM's 400; a client that goes away
mid-stream is counted (``disconnects``).
Knobs make it fail.

Also a process of its own, standing in for ``vllm serve`` (``python fake_openai_server.py PORT [PROFILE_DIR]``): it
serves until SIGINT or SIGTERM and then exits 0, as vLLM's server does; with PROFILE_DIR, /start_profile and
/stop_profile answer and the second writes a small trace there.
"""

from __future__ import annotations

import gzip
import json
import os
import threading
import time
import zlib
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path


class _Server(ThreadingHTTPServer):
    request_queue_size = 256  # the default 5 would make a burst of concurrent streams wait on SYN retries


def generated_token_ids(prompt: str, count: int) -> list[int]:
    """The ids of the ``count`` tokens the fake generates for ``prompt``: a function of the prompt, as greedy is."""
    seed = zlib.crc32(prompt.encode())
    return [1 + (seed + 7919 * i) % 997 for i in range(count)]


def token_text(token_id: int) -> str:
    return f" w{token_id}"


class FakeOpenAI:
    def __init__(self, port: int = 0) -> None:
        self.models: list[str] = ["fake-model"]
        self.max_model_len: int | None = 4096  # None: the model cards carry no max_model_len
        self.tokenize = True  # False: no /tokenize route (404)
        self.version: str | None = "0.21.0"  # None: no /version route (404)
        self.health_not_ready = 0  # /health answers 503 this many times first
        self.models_not_ready = 0  # /v1/models answers 503 this many times first
        self.health_status = 200  # 404: a server without /health
        self.api_key: str | None = None  # required as Bearer on /v1 paths, as vLLM's --api-key does
        self.fail_requests: set[int] = set()  # completion request numbers (0-based, arrival order) answered 500
        self.malformed_requests: set[int] = set()  # … answered 200 with a body that is not JSON
        self.stream_error_requests: set[int] = set()  # … streamed 200, then an error chunk
        self.no_usage = False  # streamed answers without the usage chunk
        self.tokens_cap: int | None = None  # generate at most this many tokens (a server ignoring ignore_eos)
        self.stream_delay_s = 0.0  # a streamed answer waits this long before its first chunk
        self.stream_chunk_delay_s = 0.0  # … and this long before each token chunk
        self.drop_finish_requests: set[int] = set()  # … streamed without the chunk that carries finish_reason
        #: A completion that arrives while more than this many are in flight (itself included) gets a different
        #: second token: a server whose greedy output depends on the batch.
        self.diverge_above_in_flight: int | None = None
        self.malformed_status = 400  # the answer to a malformed completion body (vLLM's is 400)
        self.dead_after_malformed = False  # after a malformed body every completion answers 503, as a dead engine
        self.disconnect_breaks_others = False  # a client leaving mid-stream ends every other stream with an error
        self.disconnects = 0  # streams whose client went away before [DONE]
        self.in_flight_peaks: list[int] = []  # per completion request (arrival order): completions in flight then
        #: Where /stop_profile writes a small torch-profiler trace (vLLM's --profiler-config folder); None: the
        #: profile routes are missing (404), as without --profiler-config.
        self.profile_dir: Path | None = None
        #: /metrics' Prometheus text (None: no such route); vLLM's spec-decode counters, 10 drafts, 3 accepted.
        self.metrics: str | None = (
            "# TYPE vllm:spec_decode_num_drafts counter\n"
            'vllm:spec_decode_num_drafts_total{engine="0",model_name="fake-model"} 10.0\n'
            'vllm:spec_decode_num_drafts_created{engine="0",model_name="fake-model"} 1.7e+09\n'
            'vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="fake-model"} 30.0\n'
            'vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="fake-model"} 3.0\n'
            'vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",position="0"} 3.0\n'
        )
        self.requests: list[tuple[str, str, dict | None]] = []  # (method, path, JSON body) of every request
        self.headers: list[dict[str, str]] = []
        self._lock = threading.Lock()
        self._completions = 0
        self._in_flight = 0
        self._dead = False
        self._server = _Server(("127.0.0.1", port), self._handler())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True)

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> FakeOpenAI:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def write_trace(self) -> Path:
        """A worker trace as vLLM's torch profiler writes it: two model steps, kernels of three categories.

        Like vLLM's runner, the step ranges are there only when ``VLLM_CUSTOM_SCOPES_FOR_PROFILING=1``.
        """
        kernels = [("_caovan_sm75_fused_v_gdn_spec_decode_kernel", 30), ("flash_fwd_splitkv_kernel", 50),
                   ("nvjet_tst_128x64_64x4_1x2_h_bz_coopA_TNT", 120)]  # fmt: skip
        events = []
        if os.environ.get("VLLM_CUSTOM_SCOPES_FOR_PROFILING") == "1":
            events = [{"ph": "X", "cat": "user_annotation", "name": "gpu_model_runner: forward", "dur": 400}] * 2
        events += [{"ph": "X", "cat": "kernel", "name": name, "dur": dur} for name, dur in kernels * 2]
        self.profile_dir.mkdir(parents=True, exist_ok=True)
        path = self.profile_dir / f"fake-worker.{time.time_ns()}.pt.trace.json.gz"
        path.write_bytes(gzip.compress(json.dumps({"traceEvents": events}).encode()))
        return path

    def completion_bodies(self) -> list[dict]:
        return [body for method, path, body in self.requests if path == "/v1/completions"]

    def _handler(self):
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):  # quiet
                pass

            def _send(self, status: int, body: bytes, content_type: str = "application/json") -> None:
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def _json(self, status: int, data) -> None:
                self._send(status, json.dumps(data).encode())

            def _error(self, status: int, message: str) -> None:
                self._json(status, {"error": {"message": message, "type": "Error", "param": None, "code": status}})

            def _record(self, body) -> None:
                with fake._lock:
                    fake.requests.append((self.command, self.path, body))
                    fake.headers.append(dict(self.headers))

            def _authorised(self) -> bool:
                if fake.api_key is None or not self.path.startswith("/v1"):
                    return True
                if self.headers.get("Authorization") == f"Bearer {fake.api_key}":
                    return True
                self._json(401, {"error": "Unauthorized"})
                return False

            def do_GET(self):
                self._record(None)
                if not self._authorised():
                    return
                if self.path == "/health":
                    with fake._lock:
                        not_ready = fake.health_not_ready > 0
                        fake.health_not_ready -= not_ready
                    if not_ready:
                        self._send(503, b"")
                    elif fake.health_status == 404:
                        self._json(404, {"detail": "Not Found"})
                    else:
                        self._send(fake.health_status, b"")
                elif self.path == "/v1/models":
                    with fake._lock:
                        not_ready = fake.models_not_ready > 0
                        fake.models_not_ready -= not_ready
                    if not_ready:
                        self._error(503, "starting")
                        return
                    cards = [{"id": m, "object": "model", "owned_by": "vllm"} for m in fake.models]
                    if fake.max_model_len is not None:
                        for card in cards:
                            card["max_model_len"] = fake.max_model_len
                    self._json(200, {"object": "list", "data": cards})
                elif self.path == "/metrics" and fake.metrics is not None:
                    self._send(200, fake.metrics.encode())
                elif self.path == "/version" and fake.version is not None:
                    self._json(200, {"version": fake.version})
                else:
                    self._json(404, {"detail": "Not Found"})

            def do_POST(self):
                length = int(self.headers.get("Content-Length", "0"))
                raw = self.rfile.read(length)
                try:
                    body = json.loads(raw)
                except ValueError:
                    body = None
                self._record(body)
                if not self._authorised():
                    return
                if self.path in ("/start_profile", "/stop_profile") and fake.profile_dir is not None:
                    if self.path == "/stop_profile":
                        fake.write_trace()
                    self._send(200, b"")
                    return
                if self.path == "/tokenize" and fake.tokenize and isinstance(body, dict):
                    self._tokenize(body)
                    return
                if self.path == "/v1/completions" and (body is None or isinstance(body, dict)):
                    problem = "JSON decode error: the body is not JSON" if body is None else _invalid(body)
                    if problem is not None:
                        fake._dead = fake._dead or fake.dead_after_malformed
                        self._error(fake.malformed_status, problem)
                        return
                if self.path != "/v1/completions" or not isinstance(body, dict):
                    self._json(404, {"detail": "Not Found"})
                    return
                if fake._dead:
                    self._error(503, "the engine is dead")
                    return
                with fake._lock:
                    number = fake._completions
                    fake._completions += 1
                    fake._in_flight += 1
                    fake.in_flight_peaks.append(fake._in_flight)
                    diverge = (
                        fake.diverge_above_in_flight is not None and fake._in_flight > fake.diverge_above_in_flight
                    )
                    disconnects_seen = fake.disconnects
                self._in_flight = True
                try:
                    self._complete(body, number, diverge, disconnects_seen)
                except (BrokenPipeError, ConnectionResetError):
                    with fake._lock:
                        fake.disconnects += 1
                    self.close_connection = True
                finally:
                    self._leave_flight()

            def _leave_flight(self) -> None:
                # Called before the stream's last line too: a client that sends its next request on [DONE] must
                # not find this one still counted while its handler thread is unwinding.
                with fake._lock:
                    if self._in_flight:
                        self._in_flight = False
                        fake._in_flight -= 1

            def _tokenize(self, body: dict) -> None:
                if body.get("model") not in fake.models:
                    self._error(404, f"The model `{body.get('model')}` does not exist.")
                    return
                count = len(str(body["prompt"]).split())
                self._json(200, {"count": count, "max_model_len": fake.max_model_len, "tokens": list(range(count))})

            def _complete(self, body: dict, number: int, diverge: bool, disconnects_seen: int) -> None:
                if body.get("model") not in fake.models:
                    self._error(404, f"The model `{body.get('model')}` does not exist.")
                    return
                if number in fake.fail_requests:
                    self._error(500, f"fake failure of request {number}")
                    return
                if number in fake.malformed_requests:
                    self._send(200, b"<html>not json</html>", "text/html")
                    return
                tokens = int(body["max_tokens"])
                if fake.tokens_cap is not None:
                    tokens = min(tokens, fake.tokens_cap)
                prompt_tokens = len(str(body["prompt"]).split())
                usage = {"prompt_tokens": prompt_tokens, "total_tokens": prompt_tokens + tokens}
                usage["completion_tokens"] = tokens
                ids = generated_token_ids(str(body["prompt"]), tokens)
                if diverge and len(ids) > 1:
                    ids[1] += 1
                if not body.get("stream"):
                    text = "".join(token_text(i) for i in ids)
                    choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": "length"}
                    self._json(
                        200,
                        {
                            "id": "cmpl-1",
                            "object": "text_completion",
                            "model": body["model"],
                            "choices": [choice],
                            "usage": usage,
                        },
                    )
                    return
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.end_headers()  # no Content-Length: the stream ends when the connection closes
                self.close_connection = True
                if fake.stream_delay_s:
                    time.sleep(fake.stream_delay_s)

                def data(payload) -> None:
                    text = payload if isinstance(payload, str) else json.dumps(payload)
                    self.wfile.write(f"data: {text}\n\n".encode())
                    self.wfile.flush()

                for i in range(tokens):
                    if fake.stream_chunk_delay_s:
                        time.sleep(fake.stream_chunk_delay_s)
                    broken = fake.disconnect_breaks_others and fake.disconnects > disconnects_seen
                    if (number in fake.stream_error_requests and i == 1) or broken:
                        data(
                            {
                                "error": {
                                    "message": "fake engine error",
                                    "type": "InternalServerError",
                                    "param": None,
                                    "code": 500,
                                }
                            }
                        )
                        self._leave_flight()
                        data("[DONE]")
                        return
                    finish = "length" if i == tokens - 1 else None
                    if finish and number in fake.drop_finish_requests:
                        break
                    choice = {"index": 0, "text": token_text(ids[i]), "logprobs": None, "finish_reason": finish}
                    if body.get("return_token_ids"):
                        choice["token_ids"] = [ids[i]]
                    if body.get("logprobs"):
                        choice["logprobs"] = _logprobs(ids[i], int(body["logprobs"]), body)
                    data({"id": "cmpl-1", "object": "text_completion", "model": body["model"], "choices": [choice]})
                if not fake.no_usage and body.get("stream_options", {}).get("include_usage"):
                    data(
                        {
                            "id": "cmpl-1",
                            "object": "text_completion",
                            "model": body["model"],
                            "choices": [],
                            "usage": usage,
                        }
                    )
                self._leave_flight()
                data("[DONE]")

        return Handler


def _invalid(body: dict) -> str | None:
    """vLLM's complaint about a completion body (its pydantic and SamplingParams checks), None when it takes it."""
    max_tokens = body.get("max_tokens", 16)
    if not isinstance(max_tokens, int) or isinstance(max_tokens, bool):
        return f"max_tokens: Input should be a valid integer, got {max_tokens!r}"
    if max_tokens < 1:
        return f"max_tokens must be at least 1, got {max_tokens}."
    temperature = body.get("temperature")
    if temperature is not None and (not isinstance(temperature, (int, float)) or isinstance(temperature, bool)):
        return f"temperature: Input should be a valid number, got {temperature!r}"
    return None


def _logprobs(token_id: int, count: int, body: dict) -> dict:
    """One token's ``logprobs`` as vLLM streams them: its top ``count`` tokens, the generated one first."""
    as_ids = bool(body.get("return_tokens_as_token_ids"))
    names = [f"token_id:{t}" if as_ids else token_text(t) for t in range(token_id, token_id + count)]
    return {
        "text_offset": [0],
        "token_logprobs": [-0.5],
        "tokens": names[:1],
        "top_logprobs": [{name: -0.5 - rank for rank, name in enumerate(names)}],
    }


def main(port: int, profile_dir: str | None = None) -> int:
    import signal

    fake = FakeOpenAI(port)
    fake.profile_dir = Path(profile_dir) if profile_dir else None
    fake.start()
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    print(f"fake vLLM server on {fake.url}", flush=True)
    stop.wait()
    fake.stop()
    return 0


if __name__ == "__main__":
    import sys

    raise SystemExit(main(int(sys.argv[1]), *sys.argv[2:3]))
