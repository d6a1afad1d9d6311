"""One ``caovan serve`` (vLLM's OpenAI server) for the serve tier's HTTP tests, and the user commands run against it.

:func:`start` launches ``caovan serve MODEL`` with the arguments a test gives, in its own process group, logging to
``work/server.log`` (:class:`caovan.serving.server_process.ServerProcess`); the caller stops it with
:meth:`Server.stop` (SIGINT to the group, as a user's Ctrl-C, then SIGKILL).  :func:`caovan` runs
``caovan COMMAND`` as the user would.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest
import serve_env

from caovan.serving.client import ServerSettings, ServingClient
from caovan.serving.errors import NotReady
from caovan.serving.server_process import STOP_GRACE_S, ServerProcess, free_port

TAIL_LINES = 80
#: Each readiness wait is this short, so that a server that died while starting fails the test at once.
READY_POLL_S = 15.0


def caovan(*args: str, env: dict[str, str], timeout: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "caovan", *args], env=env, capture_output=True, text=True, timeout=timeout
    )


class Server(ServerProcess):
    def __init__(self, command: list[str], log_path: Path, work: Path, api_base: str, model: str) -> None:
        super().__init__(command, log_path, env=serve_env.engine_env(work), cwd=work)
        self.api_base, self.model = api_base, model

    def tail(self) -> str:
        return self.log_tail(TAIL_LINES)

    def describe(self, done: subprocess.CompletedProcess[str] | None = None) -> str:
        ran = f"rc={done.returncode}\nstdout:\n{done.stdout[-3000:]}\nstderr:\n{done.stderr[-3000:]}\n" if done else ""
        alive = "running" if self.proc.poll() is None else f"exited rc={self.proc.returncode}"
        return f"{ran}--- server ({alive}), last {TAIL_LINES} log lines ---\n{self.tail()}"

    def stop(self, grace_s: float = STOP_GRACE_S) -> int | None:
        returncode = super().stop(grace_s)
        print(f"[http-serve] server ended rc={returncode}; log {self.log_path}", flush=True)
        return returncode


def start(work: Path, model: Path, serve_args: list[str]) -> Server:
    """``caovan serve MODEL`` on a free local port with ``serve_args``; not waited for (warmup and benchmark wait)."""
    port = free_port()
    command = [sys.executable, "-m", "caovan", "serve", str(model), "--host", "127.0.0.1", "--port", str(port)]
    command += serve_args
    print(f"[http-serve] {' '.join(command)}", flush=True)
    return Server(command, work / "server.log", work, f"http://127.0.0.1:{port}", str(model))


def wait_until_ready(server: Server, wait_s: float) -> list[str]:
    """Wait for the server's models endpoint, at most ``wait_s``; the test fails as soon as the server has exited
    (a dead engine is never waited for to the end). Returns the models it serves."""
    deadline = time.monotonic() + wait_s
    settings = ServerSettings(server.api_base, None, wait_s, 60.0)
    with ServingClient(settings) as client:
        while True:
            try:
                ready = client.wait_ready(min(READY_POLL_S, max(1.0, deadline - time.monotonic())))
            except NotReady as exc:
                if server.proc.poll() is not None or time.monotonic() >= deadline:
                    pytest.fail(f"the server did not become ready: {exc}\n{server.describe()}")
                continue
            print(f"[http-serve] server ready, serving {ready.models}", flush=True)
            return list(ready.models)
