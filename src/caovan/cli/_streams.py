"""A command's stdout: its own report the only thing on it (``doctor --json`` must parse as JSON), and a failed
write to it told apart from the command's other I/O errors."""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from typing import Any, TextIO


@contextlib.contextmanager
def stdout_to_stderr() -> Iterator[None]:
    """Send everything written to stdout inside the block to stderr, at the Python level and on fd 1.

    vLLM's logging handler holds the ``sys.stdout`` object it found on import and writes to it whatever
    ``sys.stdout`` is later, and C extensions write to fd 1 directly: swapping ``sys.stdout`` alone misses
    both, so fd 1 itself points at stderr until the block ends.
    """
    original = sys.stdout
    if original is not None:  # None when started with stdout closed (>&-): nothing to keep apart
        original.flush()  # what was printed before the block stays on stdout
    try:
        saved = os.dup(1)
        os.dup2(2, 1)
    except OSError:  # no fd 1 or 2 (a closed or embedded stream): the Python-level swap still applies
        saved = None
    try:
        with contextlib.redirect_stdout(sys.stderr):
            yield
    finally:
        with contextlib.suppress(Exception):
            original.flush()  # lines still buffered in the stdout object belong on stderr too
        if saved is not None:
            os.dup2(saved, 1)
            os.close(saved)


class StdoutWriteError(Exception):
    """Writing the command's stdout failed (a full disk, an I/O error). Not an OSError: a command's own
    ``except OSError`` around a file it reads or writes must not take it for that file's error."""

    def __init__(self, error: OSError):
        super().__init__(error.strerror or str(error))
        self.error = error


@contextlib.contextmanager
def _as_stdout_error() -> Iterator[None]:
    try:
        yield
    except BrokenPipeError:
        raise
    except OSError as exc:
        raise StdoutWriteError(exc) from exc


class GuardedStdout:
    """``stream`` whose write and flush errors are :class:`StdoutWriteError`; a closed pipe stays
    ``BrokenPipeError`` (the reader left: ``| head``), everything else is the stream's own."""

    def __init__(self, stream: TextIO):
        self._stream = stream

    def write(self, text: str) -> int:
        with _as_stdout_error():
            return self._stream.write(text)

    def flush(self) -> None:
        with _as_stdout_error():
            self._stream.flush()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)
