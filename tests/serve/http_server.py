"""One ``caovan serve`` (vLLM's OpenAI server) for the serve tier's HTTP tests, and the user commands run against it.

:func:`start` launches ``caovan serve MODEL`` with the arguments a test gives, in its own process group, logging to
``work/server.log`` (:class:`caovan.serving.server_process.ServerProcess`); the caller stops it with
:meth:`Server.stop` (SIGINT to the group, as a user's Ctrl-C, then SIGKILL).  :func:`caovan` runs
``caovan COMMAND`` as the user would.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import serve_env

from caovan.serving.server_process import STOP_GRACE_S, ServerProcess, free_port

TAIL_LINES = 80


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
