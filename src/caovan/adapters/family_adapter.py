"""The adapter of a family record: its probe is ``probe_family``, its override ``override.install``."""

from __future__ import annotations

from typing import ClassVar

from .base import GdnAdapter, Prober
from .family import GdnFamily
from .family_probe import probe_family


class FamilyAdapter(GdnAdapter):
    """One subclass per family (``adapter_class``), so that selection and diagnostics see a class per family."""

    family: ClassVar[GdnFamily]

    def _probe(self, prober: Prober) -> None:
        probe_family(prober, self.family)

    def install(self) -> str:
        from . import override

        return override.install(self.family)

    def uninstall(self) -> bool:
        from . import override

        return override.uninstall(self.family)


def adapter_class(family: GdnFamily) -> type[FamilyAdapter]:
    return type(
        f"FamilyAdapter_{family.family_id.replace('-', '_')}",
        (FamilyAdapter,),
        {
            "family": family,
            "family_id": family.family_id,
            "version_hint": family.version_hint,
            "description": f"{family.label}: {family.gdn_class} in {family.gdn_module}",
        },
    )
