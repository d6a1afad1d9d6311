"""A ``caovan serve`` process started in its own process group, its output in a log file, stopped as a Ctrl-C.

``caovan bench e2e`` and the serve tier's HTTP tests both start vLLM's OpenAI server this way. The process group
matters: vLLM's engine core and its workers are children of the server, and SIGINT to the whole group is what
takes them down with it (a signal to the server's pid alone can leave a worker holding the GPU).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

#: Seconds vLLM gets to shut down after SIGINT (and the kernel after SIGKILL) before the next step.
STOP_GRACE_S = 60.0


def free_port() -> int:
    """A local TCP port that nothing listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class ServerProcess:
    """``command`` running in a new session (its own process group), stdout and stderr to ``log_path``."""

    def __init__(
        self,
        command: Sequence[str],
        log_path: Path,
        *,
        env: Mapping[str, str] | None = None,
        cwd: Path | None = None,
        popen: Callable[..., Any] = subprocess.Popen,
    ) -> None:
        self.command = list(command)
        self.log_path = log_path
        self._log = open(log_path, "w")  # noqa: SIM115  (closed in stop)
        self.proc = popen(
            self.command,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            env=None if env is None else dict(env),
            cwd=cwd,
            start_new_session=True,
        )

    def log(self) -> str:
        if not self._log.closed:
            self._log.flush()
        return self.log_path.read_text(errors="replace")

    def log_tail(self, lines: int) -> str:
        return "\n".join(self.log().splitlines()[-lines:])

    def stop(self, grace_s: float = STOP_GRACE_S) -> int | None:
        """SIGINT to the group (vLLM shuts its workers down), SIGKILL after ``grace_s``; the exit status."""
        if self.proc.poll() is None:
            for sig in (signal.SIGINT, signal.SIGKILL):
                try:
                    os.killpg(self.proc.pid, sig)
                except ProcessLookupError:
                    break
                try:
                    self.proc.wait(timeout=grace_s)
                    break
                except subprocess.TimeoutExpired:
                    continue
        self._log.close()
        return self.proc.poll()
