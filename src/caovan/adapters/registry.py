"""Pick the adapter for the installed vLLM by probing every known family.

Adapters whose version hint matches are probed first, then the rest: a release nobody listed still lands
in the family whose hook points it has.  When none passes, the refusal says why, and — where the installed
vLLM shows the marks of a family caovan has no adapter for yet — which family it looks like.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass, field

from .base import GdnAdapter, ProbeReport, installed_vllm_version, version_in
from .gdn_linear_attn_v020 import GdnLinearAttnV020Adapter

ADAPTERS: tuple[type[GdnAdapter], ...] = (GdnLinearAttnV020Adapter,)

#: Module paths that identify GDN families caovan does not serve (yet); see vllm-gdn-families.md.
UNSERVED_FAMILY_MARKERS: tuple[tuple[str, str], ...] = (
    (
        "vllm.model_executor.layers.mamba.gdn.qwen_gdn_linear_attn",
        "QwenGatedDeltaNetAttention (vLLM >= 0.22 layout, families F8-F11)",
    ),
)


@dataclass(frozen=True)
class Selection:
    """The outcome of probing: the chosen adapter (or None) and every report, for diagnostics."""

    vllm_version: str | None
    adapter: GdnAdapter | None
    reason: str
    reports: tuple[ProbeReport, ...] = field(default_factory=tuple)

    @property
    def family_id(self) -> str | None:
        return self.adapter.family_id if self.adapter is not None else None


def _module_exists(dotted: str) -> bool:
    try:
        return importlib.util.find_spec(dotted) is not None
    except Exception:  # find_spec imports the parent packages: whatever their import raises, the marker is absent
        return False


def select_adapter(adapters: tuple[type[GdnAdapter], ...] = ADAPTERS) -> Selection:
    vllm_version = installed_vllm_version()
    if vllm_version is None:
        return Selection(None, None, "vLLM is not installed")
    instances = [cls() for cls in adapters]
    # Stable sort: hinted families first, declaration order otherwise.
    reports: list[ProbeReport] = []
    chosen: GdnAdapter | None = None
    for adapter in sorted(instances, key=lambda a: not version_in(vllm_version, a.version_hint)):
        report = adapter.probe(vllm_version)
        reports.append(report)
        if report.ok and chosen is None:
            chosen = adapter
            break
    if chosen is not None:
        # The version this selection ordered the families by, which its reports carry too.
        hint = "" if version_in(vllm_version, chosen.version_hint) else " (outside its version hint; chosen by probing)"
        return Selection(vllm_version, chosen, f"family={chosen.family_id}{hint}", tuple(reports))
    looks_like = [label for module, label in UNSERVED_FAMILY_MARKERS if _module_exists(module)]
    why = "; ".join(f"{r.family_id}: {r.reason}" for r in reports)
    if looks_like:
        why = f"this vLLM has {looks_like[0]}, which no caovan adapter serves yet; {why}"
    return Selection(vllm_version, None, f"no GDN family matches vLLM {vllm_version}: {why}", tuple(reports))


def probe_all(adapters: tuple[type[GdnAdapter], ...] = ADAPTERS) -> tuple[ProbeReport, ...]:
    """Every family's report (``caovan doctor`` shows them all, not just the first that passes)."""
    return tuple(cls().probe() for cls in adapters)
