"""caovan's GDN prefill: a chunked gated-delta-rule prefill in two Triton launches (``entry.gdn_prefill``), beside
its float64 reference (``naive.gdn_prefill_reference``) and its launch configurations per GPU
(``launch_configs``). The design and its measurements: ``docs/prefill-design.md``."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..lazy_exports import lazy_exports

if TYPE_CHECKING:
    from .entry import KERNEL_NAMES, gdn_prefill

__all__ = ["KERNEL_NAMES", "gdn_prefill"]

# Re-exported on first access, not at import: ``envelope`` and ``launch_configs`` must import without torch or Triton.
__getattr__, __dir__ = lazy_exports(__name__, globals(), {"KERNEL_NAMES": "entry", "gdn_prefill": "entry"})
