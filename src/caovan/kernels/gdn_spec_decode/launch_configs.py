"""Launch configurations of the GDN spec-decode kernels, as data, per GPU architecture.

The values live in ``launch_configs.json`` beside this file. ``sm75`` holds the values Turbo3 users know
from its logs (QK num_warps=2, num_stages=1; V/GDN num_warps=2, num_stages=1, BV=32), plus a V/GDN register cap
computed, not timed, for the RTX 2080 Ti (tests/kernels/test_sm75_gate.py). Other architectures
are measured on their hardware with ``caovan bench tune`` (the entry's note names the committed JSON); a GPU
without an entry uses the nearest lower architecture that has one.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..arch_entries import load_arch_entries, nearest_lower_entry


@dataclass(frozen=True)
class QKLaunchConfig:
    """Launch options of ``_caovan_sm75_prepare_qk_conv_spec_decode_kernel``."""

    num_warps: int
    num_stages: int


@dataclass(frozen=True)
class VGdnLaunchConfig:
    """Launch options of ``_caovan_sm75_fused_v_gdn_spec_decode_kernel``.

    BV is the number of value channels per program (the state slab is BV x K in registers); it
    is clamped to next_power_of_2(V) for small heads. It is the preferred block: a batch whose grid would
    need more than one wave of resident programs runs with a larger one (``occupancy.py``).
    """

    num_warps: int
    num_stages: int
    BV: int
    #: Cap on registers per thread (Triton's ``maxnreg``, ptxas' ``-maxrregcount``); None lets ptxas choose.
    #: The register count decides how many programs an SM holds at once, and ptxas' choice moves with the
    #: specialisation (on sm_75 the sm75 entry takes 162-168 registers up to MTP 3 and 197-204 at MTP 4).
    maxnreg: int | None = None
    #: At the entry's own BV only: the state slab's strides compiled in as constants (fewer registers: the
    #: offsets fold into the store instructions), and ``preferred_block_maxnreg`` in place of ``maxnreg``. A
    #: larger block taken by the one-wave rule runs without them: at BV 16 on an H200 the constant offsets made
    #: the kernel slower (docs/bench/kernel-design.md), and a cap sized for BV 8 spills there.
    preferred_block_constant_slab_offsets: bool = False
    preferred_block_maxnreg: int | None = None
    #: At this block only, where the architecture entry's ``row_split_on`` holds: the state slab's rows over
    #: ``row_split_lanes`` lanes instead of 32 (the kernel's ``ROW_LANES``; fewer shuffles per row reduction),
    #: with ``row_split_maxnreg`` in place of the other caps. Measured per GPU: faster only at some blocks and
    #: state dtypes (docs/bench/kernel-design.md). All three set, or none.
    row_split_block: int | None = None
    row_split_lanes: int | None = None
    row_split_maxnreg: int | None = None
    #: With the split: the row reductions as ``row_butterfly``'s transposed butterfly (inline PTX written for rows
    #: of 16 lanes, 8 per thread: ``row_split_block`` 16 and ``row_split_lanes`` 16). The entry still checks each
    #: compiled kernel's layout before it uses it (``row_butterfly.layout_problem``).
    row_split_butterfly: bool = False

    def splits_rows(self, bv: int, split_rows: bool) -> bool:
        """Whether a launch at ``bv`` splits the slab's rows, ``split_rows`` being the entry's ``row_split_on``."""
        return split_rows and bv == self.row_split_block

    def options_for(self, bv: int, split_rows: bool = False) -> tuple[int | None, bool]:
        """``(maxnreg, constant slab offsets)`` of a launch at value block ``bv``."""
        if self.splits_rows(bv, split_rows):
            return self.row_split_maxnreg, False
        if bv != self.BV:
            return self.maxnreg, False
        cap = self.preferred_block_maxnreg
        return (self.maxnreg if cap is None else cap), self.preferred_block_constant_slab_offsets

    def row_butterfly_for(self, bv: int, split_rows: bool = False) -> bool:
        """Whether a launch at value block ``bv`` reduces the split slab's rows with ``row_butterfly``."""
        return self.row_split_butterfly and self.splits_rows(bv, split_rows)

    def row_lanes_for(self, bv: int, split_rows: bool = False) -> int:
        """Lanes per row of the state slab (the kernel's ``ROW_LANES``) of a launch at value block ``bv``."""
        return self.row_split_lanes if self.splits_rows(bv, split_rows) else 32

    def at_block(self, bv: int, split_rows: bool = False) -> VGdnLaunchConfig:
        """The launch options at ``bv`` as a configuration of its own (the preferred-block or split options
        folded in; a split block keeps its split)."""
        maxnreg, constant_offsets = self.options_for(bv, split_rows)
        if self.splits_rows(bv, split_rows):
            return VGdnLaunchConfig(
                self.num_warps,
                self.num_stages,
                bv,
                maxnreg,
                False,
                None,
                bv,
                self.row_split_lanes,
                maxnreg,
                self.row_split_butterfly,
            )
        return VGdnLaunchConfig(self.num_warps, self.num_stages, bv, maxnreg, constant_offsets)


#: Programmatic dependent launch (``griddepcontrol``) exists from sm_90 (Hopper) on.
PDL_MIN_CAPABILITY = (9, 0)


def has_pdl(capability: tuple[int, int]) -> bool:
    """Whether a GPU of this compute capability has programmatic dependent launch."""
    return tuple(capability) >= PDL_MIN_CAPABILITY


@dataclass(frozen=True)
class ArchLaunchConfig:
    arch: str  # "sm75"
    capability: tuple[int, int]
    qk: QKLaunchConfig
    v_gdn: VGdnLaunchConfig
    tuned: bool
    note: str
    #: Programmatic dependent launches (sm_90+ only; ignored on older GPUs and under the interpreter): the V/GDN
    #: kernel is a dependent of the Q/K kernel, so its state load and V conv overlap the Q/K kernel, and the Q/K
    #: kernel a dependent of whatever kernel ran before it, so its launch overlaps that kernel's tail
    #: (docs/bench/kernel-design.md).
    pdl: bool = False
    #: Staggered V/GDN start (PDL launches only; see the V/GDN kernel): on for calls that write at least this many
    #: bytes of SSM state, where the programs compete for DRAM; None: never. Measured per GPU, like the rest.
    stagger_min_state_write_bytes: int | None = None
    #: Last token's SSM state stored write-through instead of streaming (see the V/GDN kernel): on for calls that
    #: write at least this many bytes of SSM state, most of the GPU's L2; None: never. Measured per GPU.
    write_through_last_min_state_write_bytes: int | None = None
    #: The V/GDN slab's rows split over fewer lanes (``v_gdn.row_split_*``) for calls that write at least this
    #: many bytes of fp32 SSM state; None: never. Measured per GPU; a 16-bit state was slower with the split.
    row_split_min_state_write_bytes: int | None = None

    def pdl_on(self, capability: tuple[int, int]) -> bool:
        """Whether launches on a GPU of this compute capability use programmatic dependent launch."""
        return self.pdl and has_pdl(capability)

    def stagger_on(self, state_write_bytes: int) -> bool:
        """Whether a PDL launch writing this many bytes of SSM state starts half of its V/GDN programs late."""
        return _reaches(state_write_bytes, self.stagger_min_state_write_bytes)

    def write_through_last_on(self, state_write_bytes: int) -> bool:
        """Whether a launch writing this many bytes of SSM state stores its last token's state write-through."""
        return _reaches(state_write_bytes, self.write_through_last_min_state_write_bytes)

    def row_split_on(self, state_write_bytes: int, state_element_bytes: int) -> bool:
        """Whether a launch writing this many bytes of SSM state, of this element size, may split the slab's rows
        (at ``v_gdn.row_split_block`` only: ``VGdnLaunchConfig.splits_rows``)."""
        return state_element_bytes == 4 and _reaches(state_write_bytes, self.row_split_min_state_write_bytes)


def _reaches(state_write_bytes: int, threshold: int | None) -> bool:
    """Whether a call's state-write volume reaches an entry's threshold (None: never)."""
    return threshold is not None and state_write_bytes >= threshold


#: The data file: one entry per architecture. ``caovan bench tune --json`` measures candidates on a GPU and
#: ``tools/apply-tuned-launch-config.py`` writes the winner here, naming the JSON it came from in ``note``.
DATA_FILE = Path(__file__).with_name("launch_configs.json")


def load_entry(arch: str, entry: dict) -> ArchLaunchConfig:
    """One architecture's entry of the data file, checked; KeyError, TypeError or ValueError says what is wrong."""
    config = ArchLaunchConfig(
        arch=arch,
        capability=tuple(entry["capability"]),
        qk=QKLaunchConfig(**entry["qk"]),
        v_gdn=VGdnLaunchConfig(**entry["v_gdn"]),
        tuned=bool(entry["tuned"]),
        note=str(entry["note"]),
        pdl=bool(entry.get("pdl", False)),
        stagger_min_state_write_bytes=entry.get("stagger_min_state_write_bytes"),
        write_through_last_min_state_write_bytes=entry.get("write_through_last_min_state_write_bytes"),
        row_split_min_state_write_bytes=entry.get("row_split_min_state_write_bytes"),
    )
    for key in ("maxnreg", "preferred_block_maxnreg", "row_split_maxnreg"):
        maxnreg = getattr(config.v_gdn, key)
        if maxnreg is not None and (type(maxnreg) is not int or not 16 <= maxnreg <= 255):
            raise ValueError(f"v_gdn.{key}: expected registers per thread from 16 to 255 or null, got {maxnreg!r}")
    if type(config.v_gdn.preferred_block_constant_slab_offsets) is not bool:
        raise ValueError(
            "v_gdn.preferred_block_constant_slab_offsets: expected true or false, "
            f"got {config.v_gdn.preferred_block_constant_slab_offsets!r}"
        )
    _check_row_split(config)
    for key in (
        "stagger_min_state_write_bytes",
        "write_through_last_min_state_write_bytes",
        "row_split_min_state_write_bytes",
    ):
        threshold = getattr(config, key)
        if threshold is not None and (type(threshold) is not int or threshold < 0):
            raise ValueError(f"{key}: expected a byte count >= 0 or null, got {threshold!r}")
    threshold = config.stagger_min_state_write_bytes
    if threshold is not None and not config.pdl:
        raise ValueError("stagger_min_state_write_bytes: the staggered start needs pdl (it waits for the Q/K kernel)")
    if config.pdl and not has_pdl(config.capability):
        raise ValueError(f"pdl: programmatic dependent launch needs sm90 or newer, not {arch}")
    return config


def _check_row_split(config: ArchLaunchConfig) -> None:
    v = config.v_gdn
    split = (v.row_split_block, v.row_split_lanes, v.row_split_maxnreg)
    if all(value is None for value in split) and config.row_split_min_state_write_bytes is None:
        if v.row_split_butterfly is not False:
            raise ValueError("v_gdn.row_split_butterfly: needs the row split (v_gdn.row_split_* set)")
        return
    if any(value is None for value in split) or config.row_split_min_state_write_bytes is None:
        raise ValueError(
            "row split: expected v_gdn.row_split_block, v_gdn.row_split_lanes, v_gdn.row_split_maxnreg and "
            "row_split_min_state_write_bytes all set or all null"
        )
    block, lanes = v.row_split_block, v.row_split_lanes
    if type(block) is not int or block < 1 or block & (block - 1):
        raise ValueError(f"v_gdn.row_split_block: expected a power of two, got {block!r}")
    if type(lanes) is not int or lanes not in (2, 4, 8, 16):
        raise ValueError(f"v_gdn.row_split_lanes: expected 2, 4, 8 or 16 lanes per row (32 is no split), got {lanes!r}")
    if block * lanes < 32:
        raise ValueError(
            f"v_gdn.row_split_block: {block} rows of {lanes} lanes do not fill a warp (need >= {32 // lanes})"
        )
    if v.num_warps != 1:
        raise ValueError(f"v_gdn.row_split_*: the split tile is laid out for one warp, not num_warps={v.num_warps}")
    if type(v.row_split_butterfly) is not bool:
        raise ValueError(f"v_gdn.row_split_butterfly: expected true or false, got {v.row_split_butterfly!r}")
    if v.row_split_butterfly and (block, lanes) != (16, 16):
        raise ValueError(
            "v_gdn.row_split_butterfly: its PTX is written for rows of 16 lanes, 8 per thread "
            f"(row_split_block 16, row_split_lanes 16), not row_split_block {block}, row_split_lanes {lanes}"
        )


def _load(path: Path) -> dict[str, ArchLaunchConfig]:
    """The entries of a launch-configuration file (``DATA_FILE``; tests hand it others)."""
    return load_arch_entries(path, load_entry)


LAUNCH_CONFIGS: dict[str, ArchLaunchConfig] = _load(DATA_FILE)

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
    return nearest_lower_entry(LAUNCH_CONFIGS.values(), _as_capability(capability), "launch configuration")
