"""Interface adapters, one per family of vLLM releases (see registry.py for how one is chosen)."""

from .base import GdnAdapter, HookPoint, ProbeReport
from .registry import ADAPTERS, Selection, probe_all, select_adapter

__all__ = ["ADAPTERS", "GdnAdapter", "HookPoint", "ProbeReport", "Selection", "probe_all", "select_adapter"]
