"""Re-exports on first access, for the kernel packages' ``__init__``: importing any submodule runs the package's
``__init__`` first, and some submodules (envelopes, launch configurations) must import without torch or Triton."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from importlib import import_module
from typing import Any


def lazy_exports(
    package: str, namespace: dict[str, Any], exported_from: Mapping[str, str]
) -> tuple[Callable, Callable]:
    """``(__getattr__, __dir__)`` for ``package``: name ``n`` comes from submodule ``exported_from[n]`` when first
    read, then stays in ``namespace`` (the package's globals)."""

    def __getattr__(name: str) -> Any:
        module = exported_from.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(import_module(f".{module}", package), name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted({*namespace, *exported_from})

    return __getattr__, __dir__
