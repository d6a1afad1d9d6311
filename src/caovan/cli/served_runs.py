"""What ``bench e2e`` and ``bench ttft`` both read from their command lines: a list of distinct counts, the vLLM keys
and the serve arguments their servers share (each run sets caovan's own keys)."""

from __future__ import annotations

import json
import shlex
from typing import Any


def distinct_counts(option: str, text: str) -> tuple[int, ...] | str:
    """``"1,4,8"`` as ``(1, 4, 8)``: distinct whole numbers >= 1, or what is wrong with them."""
    try:
        counts = tuple(int(item) for item in text.split(","))
    except ValueError:
        return f"{option} {text!r}: expected numbers separated by commas"
    if not counts or min(counts) < 1 or len(set(counts)) != len(counts):
        return f"{option} {text!r}: expected distinct numbers >= 1"
    return counts


def shared_server_options(additional_config: str, serve_args: str) -> tuple[dict[str, Any], tuple[str, ...]] | str:
    """``(additional_config keys, serve arguments)`` for every run, or what is wrong with them."""
    try:
        extra = json.loads(additional_config)
    except json.JSONDecodeError as exc:
        return f"--additional-config: not valid JSON ({exc.msg})"
    if not isinstance(extra, dict) or any(key.startswith("caovan") for key in extra):
        return "--additional-config: a JSON object without caovan's keys (each run sets its own switch)"
    try:
        return extra, tuple(shlex.split(serve_args))
    except ValueError as exc:
        return f"--serve-args: {exc}"
