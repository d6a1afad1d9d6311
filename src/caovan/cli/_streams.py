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


def same_destination(first: Any, second: Any) -> bool:
    """Whether two streams end in the same place: one terminal, or one file or pipe (``2>&1``). False when either
    has no file descriptor to ask (a closed stream, a test's capture)."""
    try:
        a, b = os.fstat(first.fileno()), os.fstat(second.fileno())
    except (AttributeError, OSError, ValueError):  # io.UnsupportedOperation is an OSError and a ValueError
        return False
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)


def report_failure(prog: str, message: str, verdict: str) -> None:
    """A failure of a command that ends with a verdict line for a gate (``[Caovan] warmup=FAIL reason=...``), said
    once where the user reads it.

    The verdict, which carries the message, always goes to stdout: the gate reads it there, whatever stderr is.
    ``PROG: error: message`` goes to stderr only when stderr ends elsewhere (stdout sent to a file or a gate): on
    one terminal, or with ``2>&1``, it would print the same message twice.  PROG is the name the user typed
    (``caovan-sm75-warmup`` or ``caovan warmup``).
    """
    if not same_destination(sys.stdout, sys.stderr):
        print(f"{prog}: error: {message}", file=sys.stderr, flush=True)
    print(verdict, flush=True)
