"""Pick the adapter for the installed vLLM by probing every known family.

Adapters whose version hint matches are probed first, then the rest: a release nobody listed still lands
in the family whose hook points it has.  When none passes, the refusal names the closest family (the one with the
most hook points found) and each of its hook points that moved.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from .base import GdnAdapter, ProbeReport, installed_vllm_version, version_in
from .families import FAMILIES
from .family import GdnFamily
from .family_adapter import adapter_class

if TYPE_CHECKING:
    from ..plugin.uniform_decode_guard import FullGraphSafety

ADAPTERS: tuple[type[GdnAdapter], ...] = tuple(adapter_class(family) for family in FAMILIES)
#: How many moved hook points a refusal names before it says how many more there are.
MOVED_SHOWN = 6


@dataclass(frozen=True)
class Selection:
    """The outcome of probing: the chosen adapter (or None) and every report, for diagnostics."""

    vllm_version: str | None
    adapter: GdnAdapter | None
    reason: str
    reports: tuple[ProbeReport, ...] = field(default_factory=tuple)
    #: The family the release lands in when caovan recognises it but does not serve it (``GdnFamily.refusal``).
    refused: GdnFamily | None = None

    @property
    def family_id(self) -> str | None:
        return self.adapter.family_id if self.adapter is not None else None


def closest(reports: tuple[ProbeReport, ...] | list[ProbeReport]) -> str | None:
    """The family with the most hook points found, and each of its hook points that moved; None if none probed."""
    probed = [r for r in reports if r.hook_points]
    if not probed:
        return None
    best = max(probed, key=lambda r: sum(h.found for h in r.hook_points))  # first of equals: the hinted order
    moved = [h for h in best.hook_points if not h.found]
    shown = "; ".join(f"{h.name} ({h.detail})" for h in moved[:MOVED_SHOWN])
    more = f"; +{len(moved) - MOVED_SHOWN} more" if len(moved) > MOVED_SHOWN else ""
    found = f"{len(best.hook_points) - len(moved)} of {len(best.hook_points)} hook points found"
    return f"closest family {best.family_id} ({found}); moved: {shown}{more}"


def refusal_message(vllm_version: str | None, family: GdnFamily) -> str:
    """Why caovan leaves a release of a recognised, unserved family to vLLM: start-up, doctor and the table say it
    in these words."""
    return f"vLLM {vllm_version} is {family.label} {family.family_id}; caovan does not serve it: {family.refusal}"


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
    refused = getattr(chosen, "family", None)
    if refused is not None and refused.refusal is not None:
        why = refusal_message(vllm_version, refused)
        return Selection(vllm_version, None, why, tuple(reports), refused=refused)
    if chosen is not None:
        # The version this selection ordered the families by, which its reports carry too.
        hint = "" if version_in(vllm_version, chosen.version_hint) else " (outside its version hint; chosen by probing)"
        return Selection(vllm_version, chosen, f"family={chosen.family_id}{hint}", tuple(reports))
    why = closest(reports) or "no family probed"
    return Selection(vllm_version, None, f"no GDN family matches vLLM {vllm_version}: {why}", tuple(reports))


def probe_all(adapters: tuple[type[GdnAdapter], ...] = ADAPTERS) -> tuple[ProbeReport, ...]:
    """Every family's report (``caovan doctor`` shows them all, not just the first that passes)."""
    return tuple(cls().probe() for cls in adapters)


def recognised_family() -> tuple[GdnFamily, str | None]:
    """The record of the family the installed vLLM lands in, served or not, and why caovan does not serve it (None:
    it does); RuntimeError when it lands in none."""
    selection = select_adapter()
    if selection.refused is not None:
        return selection.refused, selection.reason
    family = getattr(selection.adapter, "family", None)
    if family is None:
        raise RuntimeError(f"caovan cannot serve this vLLM: {selection.reason}")
    return family, None


def installed_full_graph_safety(pipeline_parallel_size: int = 1) -> FullGraphSafety:
    """``plugin.uniform_decode_guard.full_graph_safety`` for the family the installed vLLM lands in (served or not;
    none: the runner's answer alone), for doctor, serve's advice and the sm75 tier."""
    from ..plugin.uniform_decode_guard import full_graph_safety

    try:
        family: GdnFamily | None = recognised_family()[0]
    except Exception:  # lands in no family: caovan stays inert and the runner's answer is the whole answer
        family = None
    return full_graph_safety(family, pipeline_parallel_size)


def installed_family() -> GdnFamily:
    """The record of the family the installed vLLM lands in, for the test rig, the bench baseline and the serve
    runner (which build and time vLLM's own layer the way that family lays it out); RuntimeError when none does
    or caovan does not serve it."""
    family, refusal = recognised_family()
    if refusal is not None:
        raise RuntimeError(f"caovan cannot serve this vLLM: {refusal}")
    return family
