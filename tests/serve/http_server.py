"""One ``caovan serve`` (vLLM's OpenAI server) for the serve tier's HTTP tests, and the user commands run against it.

:func:`start` launches ``caovan serve MODEL`` with the arguments a test gives, in its own process group, logging to
``work/server.log``; the caller stops it with :meth:`Server.stop` (SIGINT to the group, as a user's Ctrl-C, then
SIGKILL).  :func:`caovan` runs ``caovan COMMAND`` as the user would.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import serve_env

from caovan.bench.e2e import free_port

TAIL_LINES = 80


def caovan(*args: str, env: dict[str, str], timeout: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "caovan", *args], env=env, capture_output=True, text=True, timeout=timeout
    )


class Server:
    def __init__(self, proc: subprocess.Popen, log_path: Path, api_base: str, model: str) -> None:
        self.proc, self.log_path, self.api_base, self.model = proc, log_path, api_base, model

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def tail(self) -> str:
        return "\n".join(self.log().splitlines()[-TAIL_LINES:])

    def describe(self, done: subprocess.CompletedProcess[str] | None = None) -> str:
        ran = f"rc={done.returncode}\nstdout:\n{done.stdout[-3000:]}\nstderr:\n{done.stderr[-3000:]}\n" if done else ""
        alive = "running" if self.proc.poll() is None else f"exited rc={self.proc.returncode}"
        return f"{ran}--- server ({alive}), last {TAIL_LINES} log lines ---\n{self.tail()}"

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGINT)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        print(f"[http-serve] server ended rc={self.proc.returncode}; log {self.log_path}", flush=True)


def start(work: Path, model: Path, serve_args: list[str]) -> Server:
    """``caovan serve MODEL`` on a free local port with ``serve_args``; not waited for (warmup and benchmark wait)."""
    port = free_port()
    log_path = work / "server.log"
    command = [sys.executable, "-m", "caovan", "serve", str(model), "--host", "127.0.0.1", "--port", str(port)]
    command += serve_args
    print(f"[http-serve] {' '.join(command)}", flush=True)
    with open(log_path, "w") as log:
        proc = subprocess.Popen(
            command,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=serve_env.engine_env(work),
            cwd=work,
            start_new_session=True,  # its own process group: the engine core it starts stops with it
        )
    return Server(proc, log_path, f"http://127.0.0.1:{port}", str(model))
