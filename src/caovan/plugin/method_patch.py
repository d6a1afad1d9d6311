"""Wrap a method of one of vLLM's classes in place, once, and put it back: what caovan's patches of upstream
behaviour share (each module documents its own why / how / upstream code / remove when)."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

#: The attribute a caovan wrapper keeps the method it wraps in.
WRAPPED = "_caovan_wrapped"


def unwrapped(method: Any) -> Any:
    """The method as vLLM defined it: the one a caovan wrapper keeps, or ``method`` itself (None stays None)."""
    return getattr(method, WRAPPED, method)


def wrap_once(cls: type, name: str, wrap: Callable[[Any], Any]) -> None:
    """Put ``wrap(method)`` in place of ``cls.<name>`` unless caovan's wrapper is already there."""
    current = cls.__dict__[name]
    if getattr(current, WRAPPED, None) is None:
        setattr(cls, name, wrap(current))


def restore(module_name: str, class_name: str, name: str) -> bool:
    """Put the method back; True when caovan's wrapper was in place. Imports nothing: a module never imported was
    never patched."""
    cls = getattr(sys.modules.get(module_name), class_name, None)
    current = cls.__dict__.get(name) if isinstance(cls, type) else None
    original = getattr(current, WRAPPED, None)
    if original is None:
        return False
    setattr(cls, name, original)
    return True
