"""caovan's GDN prefill: a chunked gated-delta-rule prefill in two Triton launches (``entry.gdn_prefill``), beside
its float64 reference (``naive.gdn_prefill_reference``) and its launch configurations per GPU
(``launch_configs``). The design and its measurements: ``docs/prefill-design.md``."""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .entry import KERNEL_NAMES, gdn_prefill

__all__ = ["KERNEL_NAMES", "gdn_prefill"]

# Re-exported on first access, as in gdn_spec_decode: ``launch_configs`` must import without torch or Triton.
_EXPORTED_FROM = {"KERNEL_NAMES": "entry", "gdn_prefill": "entry"}


def __getattr__(name: str):
    module = _EXPORTED_FROM.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_EXPORTED_FROM})
