"""Keep a command's own report the only thing on stdout (``doctor --json`` must parse as JSON)."""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator


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
