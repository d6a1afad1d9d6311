"""The HTTP client ``caovan warmup`` and ``caovan benchmark`` share: both talk to a running vLLM server.

One place for: the Bearer key, waiting for the server to become ready, picking the model, counting a prompt's tokens,
and one completion request (plain for warmup, streamed and timed for the benchmark). Requests go out from daemon
threads (:func:`run_concurrently`), so Ctrl-C ends a command at once instead of waiting for requests in flight.

It takes checked settings (:class:`ServerSettings`) and knows no command line: the options that fill them in are
:mod:`caovan.serving.args`. What it sends and reads back is :mod:`caovan.serving.protocol`, the failures it raises
:mod:`caovan.serving.errors`, and every URL it names goes through :mod:`caovan.serving.redaction`
(no ``user:password@``).

What this relies on in vLLM 0.21.0 (``vllm/entrypoints/…``):

- ``GET /health`` (``serve/instrumentator/health.py``): 200 with an empty body once the engine answers, 503 when it
  is dead. Not behind ``--api-key``: ``AuthenticationMiddleware`` (``openai/server_utils.py``) checks only paths
  that start with ``/v1``. A server without ``/health`` (404) is judged by ``/v1/models`` alone.
- ``GET /v1/models`` (``openai/models/api_router.py``): a ``ModelList`` (``openai/engine/protocol.py``),
  ``{"object": "list", "data": [{"id": NAME, "max_model_len": N, ...}, ...]}``; behind ``--api-key`` (401). The
  server answers HTTP only once the engine is up (``openai/api_server.py``: the socket is bound early but served by
  ``build_and_serve`` after the engine started), so a 404 there means ``--api-base`` names something else.
- ``GET /version`` (``serve/instrumentator/basic.py``): ``{"version": VLLM_VERSION}``; other OpenAI-compatible
  servers may lack it, which is tolerated (``None``).
- ``POST /v1/completions`` (``openai/completion/protocol.py``, ``openai/completion/serving.py``): ``ignore_eos``
  (a vLLM extension) and ``stream_options.include_usage``. Not streamed: ``{"choices": [...], "usage":
  {"prompt_tokens", "completion_tokens", ...}}``. Streamed: ``data: {chunk}`` lines separated by blank lines, one
  choice per chunk; chunks that carry no token yet are not sent (chunked prefill), so the first chunk with a choice
  marks the first token; with ``include_usage`` a last chunk whose ``choices`` is ``[]`` carries ``usage``; an
  error inside the stream comes as ``data: {"error": {...}}``; the stream ends with ``data: [DONE]``.
- ``POST /tokenize`` (``serve/tokenize/api_router.py``, ``protocol.py``, ``serving.py``): ``{"model", "prompt"}``
  gives ``{"count": N, "max_model_len": L, "tokens": [...]}``, special tokens added as ``/v1/completions`` adds them
  (both default ``add_special_tokens`` true), so ``count`` is what the prompt costs a completion. Not behind
  ``--api-key`` (not a ``/v1`` path). A completion fails (HTTP 400) when its prompt's tokens plus ``max_tokens``
  exceed ``max_model_len`` (``renderers/params.py``).
- Errors: ``ErrorResponse`` ``{"error": {"message", "type", "param", "code"}}`` (``openai/engine/protocol.py``);
  the older top-level ``{"object": "error", "message": ...}`` is read too, and FastAPI's ``{"detail": ...}`` (a route
  that does not exist).
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from caovan.serving.errors import ClientError, ModelNotServed, NotReady, RequestFailed, UsageError
from caovan.serving.protocol import (
    Completion,
    completion_body,
    completion_tokens,
    describe_http_error,
    int_or_none,
    read_completion_stream,
    short_text,
)
from caovan.serving.redaction import API_KEY_OPTION, without_userinfo

#: Environment variables an API key is taken from when --api-key is not given, first set one wins. VLLM_API_KEY is
#: what ``vllm serve`` itself reads for its key; OPENAI_API_KEY is what OpenAI clients read.
API_KEY_ENV = ("VLLM_API_KEY", "OPENAI_API_KEY")

#: Readiness polling: the first retry comes quickly (a server that is nearly up), later ones at most this far apart.
FIRST_POLL_DELAY_S = 0.05
MAX_POLL_DELAY_S = 1.0
#: No single readiness probe waits longer than this (a host that drops packets must not eat all of --wait-s).
PROBE_TIMEOUT_S = 5.0

#: What :meth:`ServingClient.wait_ready` asks, as messages and --wait-s's help name it.
READY_PROBES = "GET /health then GET /v1/models"


@dataclass(frozen=True)
class ServerSettings:
    """The server and how to talk to it, checked (from the command line: :func:`caovan.serving.args.server_settings`).

    ``api_base``: the server's root URL, userinfo kept (requests need it; messages use :attr:`shown_api_base`).
    """

    api_base: str
    api_key: str | None
    wait_s: float
    request_timeout_s: float
    #: Where ``api_key`` came from, as messages name it: ``--api-key``, ``$VLLM_API_KEY`` or ``$OPENAI_API_KEY``.
    api_key_source: str | None = None

    @property
    def shown_api_base(self) -> str:
        """``api_base`` as printed and recorded: without any ``user:password@``."""
        return without_userinfo(self.api_base)


# --- results ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Ready:
    """The server answered both probes: after ``seconds`` and ``attempts`` rounds, serving ``models``."""

    seconds: float
    attempts: int
    models: list[str]
    max_model_len: dict[str, int | None]


def resolve_model(served: list[str], requested: str | None, api_base: str) -> str:
    """The model to use: ``requested`` if served, else the only served one."""
    listed = ", ".join(served) if served else "none"
    if requested is not None:
        if requested in served:
            return requested
        raise ModelNotServed(f"model {requested!r} is not served by {api_base}; it serves: {listed}")
    if len(served) == 1:
        return served[0]
    raise UsageError(f"{api_base} serves {len(served)} models ({listed}): choose one with --model")


# --- the client --------------------------------------------------------------------------------------------------


class _NotYet(Exception):
    """A readiness probe that did not succeed (yet); its message is the 'last error'."""


def describe_exception(exc: BaseException, timeout_s: float | None = None) -> str:
    """A transport error as a short phrase: 'connection refused', 'no answer within 5 s', …"""
    import httpx

    text = str(exc) or type(exc).__name__
    if isinstance(exc, httpx.ConnectError):
        return "connection refused" if "refused" in text.lower() else f"cannot connect: {text}"
    if isinstance(exc, httpx.TimeoutException):
        return f"no answer within {timeout_s:g} s" if timeout_s is not None else f"timed out: {text}"
    if isinstance(exc, httpx.RemoteProtocolError):
        return f"the server broke the connection: {text}"
    return f"{type(exc).__name__}: {text}"


class ServingClient:
    """One vLLM server: readiness, models, version, completions. Usable from several threads at once
    (``httpx.Client`` "can be shared between threads", its docstring says)."""

    def __init__(self, settings: ServerSettings, *, max_connections: int = 16):
        import httpx

        self.api_base = settings.shown_api_base  # in messages; requests go to settings.api_base (userinfo kept)
        self._request_base = settings.api_base
        self.request_timeout_s = settings.request_timeout_s
        self._api_key_sent = bool(settings.api_key)
        self._api_key_source = settings.api_key_source
        headers = {"Authorization": f"Bearer {settings.api_key}"} if settings.api_key else {}
        self._http = httpx.Client(
            headers=headers,
            timeout=httpx.Timeout(settings.request_timeout_s, connect=min(settings.request_timeout_s, 30.0)),
            limits=httpx.Limits(max_connections=None, max_keepalive_connections=max(1, max_connections)),
        )

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> ServingClient:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def url(self, path: str) -> str:
        """The URL of ``path`` as messages show it (no ``user:password@``)."""
        return self.api_base + path

    def _request_url(self, path: str) -> str:
        return self._request_base + path

    # readiness -------------------------------------------------------------------------------------------------

    def wait_ready(
        self,
        wait_s: float,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> Ready:
        """Poll ``GET /health`` then ``GET /v1/models`` until both answer, for at most ``wait_s`` seconds.

        :class:`NotReady` naming what was tried and the last error; :class:`UsageError` at once for a 401/403 (a
        missing or wrong API key does not get better by waiting) and for a 404 from ``/v1/models`` (a wrong
        ``--api-base``: vLLM answers HTTP only once its engine is up, so that route is never missing while it
        starts).
        """
        start = clock()
        deadline = start + wait_s
        delay = FIRST_POLL_DELAY_S
        attempts = 0
        while True:
            attempts += 1
            timeout = max(0.1, min(PROBE_TIMEOUT_S, deadline - clock()))
            try:
                models = self._probe(timeout)
            except _NotYet as exc:
                last_error = str(exc)
            else:
                ready_after = clock() - start
                return Ready(ready_after, attempts, [m["id"] for m in models], _max_model_len(models))
            now = clock()
            if now >= deadline:
                raise NotReady(
                    f"server at {self.api_base} not ready after {now - start:.1f} s ({attempts} attempt(s) of "
                    f"{READY_PROBES}); last error: {last_error}"
                )
            sleep(min(delay, deadline - now))
            delay = min(delay * 2, MAX_POLL_DELAY_S)

    def _get(self, path: str, timeout: float):
        import httpx

        try:
            return self._http.get(self._request_url(path), timeout=timeout)
        except httpx.HTTPError as exc:
            raise _NotYet(f"GET {self.url(path)}: {describe_exception(exc, timeout)}") from None

    def _probe(self, timeout: float) -> list[dict[str, Any]]:
        health = self._get("/health", timeout)
        # 404: no /health there; 401/403: /health is not behind vLLM's --api-key, so --api-base points under /v1
        # (a route): either way /v1/models judges, and its answer (404, 401) ends the wait at once.
        if health.status_code not in (200, 401, 403, 404):
            raise _NotYet(f"GET {self.url('/health')}: {describe_http_error(health.status_code, health.content)}")
        models = self._get("/v1/models", timeout)
        if models.status_code in (401, 403):
            if not self._api_key_sent:
                hint = f"the server wants an API key: pass {API_KEY_OPTION} or set ${API_KEY_ENV[0]}"
            else:
                hint = "the server refused the API key"
                hint += f" (taken from {self._api_key_source})" if self._api_key_source else ""
            raise UsageError(
                f"GET {self.url('/v1/models')}: {describe_http_error(models.status_code, models.content)}: {hint}"
            )
        if models.status_code == 404:
            # vLLM answers HTTP only once its engine is up: a 404 here is a wrong URL, not a slow start
            root = "{0.scheme}://{0.netloc}".format(urlsplit(self.api_base))
            raise UsageError(
                f"GET {self.url('/v1/models')}: {describe_http_error(404, models.content)}: no vLLM OpenAI API there; "
                f"--api-base should be the server's root (e.g. {root}, or {root}/v1), not a route"
            )
        if models.status_code != 200:
            raise _NotYet(f"GET {self.url('/v1/models')}: {describe_http_error(models.status_code, models.content)}")
        try:
            data = models.json()["data"]
            cards = [card for card in data if isinstance(card["id"], str)]
        except (ValueError, KeyError, TypeError):
            raise _NotYet(
                f"GET {self.url('/v1/models')}: not a model list ({short_text(models.text, 120)!r})"
            ) from None
        if not cards:
            raise _NotYet(f"GET {self.url('/v1/models')}: no model listed")
        return cards

    def vllm_version(self) -> str | None:
        """vLLM's version from ``GET /version``; ``None`` when the server has no such route or it fails."""
        try:
            response = self._get("/version", min(PROBE_TIMEOUT_S, self.request_timeout_s))
            version = response.json().get("version") if response.status_code == 200 else None
        except (_NotYet, ValueError, AttributeError):
            return None
        return version if isinstance(version, str) else None

    def count_tokens(self, model: str, prompt: str) -> int:
        """How many tokens ``prompt`` is for ``model``, by vLLM's ``POST /tokenize``; :class:`RequestFailed` for
        any failure, a server without that route (404) among them."""
        import httpx

        url = self.url("/tokenize")
        try:
            response = self._http.post(self._request_url("/tokenize"), json={"model": model, "prompt": prompt})
        except httpx.HTTPError as exc:
            raise RequestFailed(f"POST {url}: {describe_exception(exc, self.request_timeout_s)}") from None
        if response.status_code != 200:
            raise RequestFailed(f"POST {url}: {describe_http_error(response.status_code, response.content)}")
        try:
            count = int_or_none(response.json().get("count"))
        except (ValueError, AttributeError):
            count = None
        if count is None:
            raise RequestFailed(f"POST {url}: no token count in the answer ({short_text(response.text, 120)!r})")
        return count

    # completions -----------------------------------------------------------------------------------------------

    def complete(
        self, model: str, prompt: str, max_tokens: int, *, clock: Callable[[], float] = time.perf_counter
    ) -> Completion:
        """One non-streamed completion; :class:`RequestFailed` unless HTTP 200, a ``choices`` list and
        ``usage.completion_tokens`` > 0."""
        import httpx

        url = self.url("/v1/completions")
        started = clock()
        try:
            response = self._http.post(
                self._request_url("/v1/completions"), json=completion_body(model, prompt, max_tokens, stream=False)
            )
        except httpx.HTTPError as exc:
            raise RequestFailed(f"POST {url}: {describe_exception(exc, self.request_timeout_s)}") from None
        latency = clock() - started
        if response.status_code != 200:
            raise RequestFailed(f"POST {url}: {describe_http_error(response.status_code, response.content)}")
        try:
            data = response.json()
        except ValueError:
            raise RequestFailed(f"POST {url}: the answer is not JSON ({short_text(response.text, 120)!r})") from None
        if not isinstance(data, dict) or not isinstance(data.get("choices"), list) or not data["choices"]:
            raise RequestFailed(f"POST {url}: the answer has no choices ({short_text(response.text, 120)!r})")
        try:
            tokens = completion_tokens(data.get("usage"))
        except RequestFailed as exc:
            raise RequestFailed(f"POST {url}: {exc}") from None
        return Completion(int_or_none(data["usage"].get("prompt_tokens")), tokens, latency)

    def stream_complete(
        self, model: str, prompt: str, max_tokens: int, *, clock: Callable[[], float] = time.perf_counter
    ) -> Completion:
        """One streamed completion, timed: time to the first chunk with a choice, time to ``[DONE]``, tokens from
        the usage chunk. :class:`RequestFailed` for any failure."""
        import httpx

        url = self.url("/v1/completions")
        started = clock()
        try:
            body = completion_body(model, prompt, max_tokens, stream=True)
            with self._http.stream("POST", self._request_url("/v1/completions"), json=body) as r:
                if r.status_code != 200:
                    r.read()
                    raise RequestFailed(f"POST {url}: {describe_http_error(r.status_code, r.content)}")
                return read_completion_stream(r.iter_lines(), started, clock)
        except httpx.HTTPError as exc:
            raise RequestFailed(f"POST {url}: {describe_exception(exc, self.request_timeout_s)}") from None
        except RequestFailed as exc:
            if str(exc).startswith("POST "):
                raise
            raise RequestFailed(f"POST {url}: {exc}") from None


def wait_for_model(
    client: ServingClient, settings: ServerSettings, requested: str | None, command: str
) -> tuple[Ready, str]:
    """Say what ``caovan COMMAND`` waits for, wait for the server (:meth:`ServingClient.wait_ready`) and pick the
    model (:func:`resolve_model`): what both commands do first."""
    # flushed: the wait can last minutes, and a piped stdout would hold the line back until then
    print(
        f"[Caovan] {command}: waiting up to {settings.wait_s:g} s for {settings.shown_api_base} ({READY_PROBES})",
        flush=True,
    )
    ready = client.wait_ready(settings.wait_s)
    return ready, resolve_model(ready.models, requested, settings.shown_api_base)


def _max_model_len(cards: list[dict[str, Any]]) -> dict[str, int | None]:
    return {card["id"]: int_or_none(card.get("max_model_len")) for card in cards}


# --- concurrency -----------------------------------------------------------------------------------------------


def run_concurrently(task: Callable[[int], Any], count: int, concurrency: int) -> list[Any]:
    """``[task(0), …, task(count - 1)]`` with at most ``concurrency`` running at once; a :class:`ClientError` a
    task raises takes its place in the list, any other exception is raised here.

    Daemon threads rather than a ThreadPoolExecutor: the executor's threads are joined at exit, so Ctrl-C would
    wait for every request in flight (minutes of generation); daemon threads end with the command.
    """
    results: list[Any] = [None] * count
    pending: queue.SimpleQueue[int] = queue.SimpleQueue()
    for index in range(count):
        pending.put(index)

    def worker() -> None:
        while True:
            try:
                index = pending.get_nowait()
            except queue.Empty:
                return
            try:
                results[index] = task(index)
            except BaseException as exc:  # handed to the caller below
                results[index] = exc

    threads = [
        threading.Thread(target=worker, name=f"caovan-request-{n}", daemon=True)
        for n in range(max(1, min(concurrency, count)))
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()  # interruptible: Ctrl-C raises KeyboardInterrupt here
    for result in results:
        if isinstance(result, BaseException) and not isinstance(result, ClientError):
            raise result
    return results
