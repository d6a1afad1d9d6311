"""Feature detection by signature, in the style of vllm-spyre's ``has_argument``: what a vLLM function accepts
says which interface it has, never its version. Shared by the adapters' probes and the plugin's patches of vLLM."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable
from typing import Any


def has_argument(func: Callable[..., Any], name: str) -> bool:
    try:
        return name in inspect.signature(func).parameters
    except (TypeError, ValueError):
        return False


def has_leading_arguments(method: Callable[..., Any], names: Iterable[str]) -> bool:
    """Whether ``method`` (a function defined in a class, ``self`` first) takes ``names`` as its first positional
    parameters after ``self``, in this order: a parameter renamed or moved changes what a positional call means."""
    try:
        parameters = list(inspect.signature(method).parameters.values())
    except (TypeError, ValueError):
        return False
    positional = [p.name for p in parameters if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    names = list(names)
    return positional[1 : 1 + len(names)] == names
