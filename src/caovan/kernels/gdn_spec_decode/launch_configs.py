"""Launch configurations of the GDN spec-decode kernels, as data, per GPU architecture.

``sm75`` holds the values Turbo3 users know from its logs (QK num_warps=2, num_stages=1; V/GDN
num_warps=2, num_stages=1, BV=32). Other architectures are placeholders until measured on
their hardware; a GPU without an entry uses the nearest lower architecture that has one.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class QKLaunchConfig:
    """Launch options of ``_caovan_sm75_prepare_qk_conv_spec_decode_kernel``."""

    num_warps: int
    num_stages: int


@dataclass(frozen=True)
class VGdnLaunchConfig:
    """Launch options of ``_caovan_sm75_fused_v_gdn_spec_decode_kernel``.

    BV is the number of value channels per program (the state slab is BV x K in registers); it
    is clamped to next_power_of_2(V) for small heads.
    """

    num_warps: int
    num_stages: int
    BV: int


@dataclass(frozen=True)
class ArchLaunchConfig:
    arch: str  # "sm75"
    capability: tuple[int, int]
    qk: QKLaunchConfig
    v_gdn: VGdnLaunchConfig
    tuned: bool
    note: str


LAUNCH_CONFIGS: dict[str, ArchLaunchConfig] = {
    "sm75": ArchLaunchConfig(
        arch="sm75",
        capability=(7, 5),
        qk=QKLaunchConfig(num_warps=2, num_stages=1),
        v_gdn=VGdnLaunchConfig(num_warps=2, num_stages=1, BV=32),
        tuned=True,
        note="Turbo3 SM75 launch parameters (RTX 2080 Ti)",
    ),
    "sm90": ArchLaunchConfig(
        arch="sm90",
        capability=(9, 0),
        qk=QKLaunchConfig(num_warps=2, num_stages=1),
        v_gdn=VGdnLaunchConfig(num_warps=2, num_stages=1, BV=32),
        tuned=False,
        note="untuned: to be measured (copy of sm75)",
    ),
}

#: Every configuration the sm_75 gate must compile (one per architecture entry).
ALL_LAUNCH_CONFIGS: tuple[ArchLaunchConfig, ...] = tuple(LAUNCH_CONFIGS.values())


def _as_capability(capability: tuple[int, int] | int | str) -> tuple[int, int]:
    if isinstance(capability, str):
        digits = capability.lower().removeprefix("sm").lstrip("_")
        if not digits.isdigit() or len(digits) < 2:
            raise ValueError(f"capability: expected e.g. 'sm75' or (7, 5), got {capability!r}")
        return int(digits[:-1]), int(digits[-1])
    if isinstance(capability, int):
        return divmod(capability, 10)
    major, minor = capability
    return int(major), int(minor)


def config_for(capability: tuple[int, int] | int | str) -> ArchLaunchConfig:
    """Launch configuration for a GPU of the given compute capability ((7, 5), 75 or "sm75").

    Exact entry if there is one, else the nearest lower architecture that has one.
    """
    wanted = _as_capability(capability)
    candidates = [c for c in LAUNCH_CONFIGS.values() if c.capability <= wanted]
    if not candidates:
        known = ", ".join(sorted(LAUNCH_CONFIGS))
        raise ValueError(
            f"no launch configuration for sm{wanted[0]}{wanted[1]}: the kernels target sm75 and newer (known: {known})"
        )
    return max(candidates, key=lambda c: c.capability)
