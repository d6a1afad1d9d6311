"""Reading a JSON file with one clear error naming the file (and line) for every way it can be wrong."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any


def read_json(path: Path, error: Callable[[str], Exception], *, shown: str | None = None) -> Any:
    """The parsed content of ``path``; ``error(message)`` is raised for an unreadable, non-UTF-8 or malformed file.

    ``shown`` is how the message names the file (default: the path as given).
    """
    shown = shown or str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise error(f"{shown}: cannot read: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise error(f"{shown}: not UTF-8 text (bad byte at offset {exc.start})") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        # Some of json's messages end in "at" and leave the place to str(exc) ("Invalid control character at").
        problem = f"{exc.msg} line {exc.lineno} column {exc.colno}" if exc.msg.endswith(" at") else exc.msg
        raise error(f"{shown}:{exc.lineno}:{exc.colno}: malformed JSON: {problem}") from None
