"""Launch configurations of the GDN prefill kernels, as data, per GPU architecture (``launch_configs.json``).

``wy`` launches ``_caovan_gdn_prefill_wy_kernel`` (one program per chunk and value head); ``state`` launches
``_caovan_gdn_prefill_state_kernel``, whose ``BV`` is the number of value channels per program (its state is
K x BV fp32 in registers, as slabs of ``key_slice`` keys). ``chunked`` (optional): from ``from_tokens`` tokens in a
call on, the chunked path's three kernels (``chunked_kernels.py``) in place of the fused state kernel; a null
``from_tokens`` keeps the path for ``path_forced`` only (measured slower, ``docs/prefill-design.md``). ``fp32_dots``:
the dots take fp32 operands (sm_75, where Triton lowers them to FMA anyway) rather than the activation dtype on
tensor cores. ``key_slice``/``value_slice``: the widest run of keys / value channels one dot reduces over or
produces (32 on sm_75, where wider ones spill). A GPU without an entry uses the nearest lower architecture that has
one.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from ..arch_entries import load_arch_entries, nearest_lower_entry

DATA_FILE = Path(__file__).with_name("launch_configs.json")
#: Tokens per chunk: the WY kernel builds its ``(I + A)^-1`` from two 16 x 16 blocks.
CHUNK = 32
#: The most key slabs the state kernel holds (``key_slice`` x 4 >= K).
MAX_KEY_SLABS = 4


@dataclass(frozen=True)
class KernelLaunch:
    num_warps: int
    num_stages: int


@dataclass(frozen=True)
class StateLaunch(KernelLaunch):
    BV: int


@dataclass(frozen=True)
class ChunkedLaunch:
    """The chunked path (``chunked_kernels.py``), taken from ``from_tokens`` tokens in a call on (None: only where
    ``path_forced`` asks for it)."""

    from_tokens: int | None
    merge: KernelLaunch
    state: StateLaunch
    output: StateLaunch


@dataclass(frozen=True)
class PrefillLaunchConfig:
    arch: str
    capability: tuple[int, int]
    wy: KernelLaunch
    state: StateLaunch
    note: str
    fp32_dots: bool = False
    key_slice: int = 32
    value_slice: int = 32
    chunked: ChunkedLaunch | None = None


def _positive_power_of_two(value: object, where: str) -> int:
    if type(value) is not int or value < 1 or value & (value - 1):
        raise ValueError(f"{where}: expected a power of two, got {value!r}")
    return value


def _kernel_launch(launch: dict, where: str) -> KernelLaunch:
    _positive_power_of_two(launch["num_warps"], f"{where}.num_warps")
    if type(launch["num_stages"]) is not int or launch["num_stages"] < 1:
        raise ValueError(f"{where}.num_stages: expected a positive integer, got {launch['num_stages']!r}")
    return KernelLaunch(launch["num_warps"], launch["num_stages"])


def _state_launch(launch: dict, where: str) -> StateLaunch:
    kernel = _kernel_launch(launch, where)
    bv = _positive_power_of_two(launch["BV"], f"{where}.BV")
    if bv < 16:
        raise ValueError(f"{where}.BV: the dots need at least 16 value channels, got {bv}")
    return StateLaunch(kernel.num_warps, kernel.num_stages, bv)


def _chunked_launch(chunked: dict | None) -> ChunkedLaunch | None:
    if chunked is None:
        return None
    from_tokens = chunked["from_tokens"]
    if from_tokens is not None and (type(from_tokens) is not int or from_tokens < 1):
        raise ValueError(f"chunked.from_tokens: expected a positive integer or null, got {from_tokens!r}")
    return ChunkedLaunch(
        from_tokens,
        _kernel_launch(chunked["merge"], "chunked.merge"),
        _state_launch(chunked["state"], "chunked.state"),
        _state_launch(chunked["output"], "chunked.output"),
    )


def _slice_width(entry: dict, name: str, what: str) -> int:
    width = _positive_power_of_two(entry.get(name, 32), name)
    if width < 16:
        raise ValueError(f"{name}: the dots need at least 16 {what} per slice, got {width}")
    return width


def load_entry(arch: str, entry: dict) -> PrefillLaunchConfig:
    major, minor = entry["capability"]
    wy = _kernel_launch(entry["wy"], "wy")
    state = _state_launch(entry["state"], "state")
    key_slice = _slice_width(entry, "key_slice", "keys")
    value_slice = _slice_width(entry, "value_slice", "value channels")
    if type(entry.get("fp32_dots", False)) is not bool:
        raise ValueError(f"fp32_dots: expected true or false, got {entry['fp32_dots']!r}")
    return PrefillLaunchConfig(
        arch=arch,
        capability=(int(major), int(minor)),
        wy=wy,
        state=state,
        note=str(entry.get("note", "")),
        fp32_dots=entry.get("fp32_dots", False),
        key_slice=key_slice,
        value_slice=value_slice,
        chunked=_chunked_launch(entry.get("chunked")),
    )


LAUNCH_CONFIGS: dict[str, PrefillLaunchConfig] = load_arch_entries(DATA_FILE, load_entry)
ALL_LAUNCH_CONFIGS: tuple[PrefillLaunchConfig, ...] = tuple(LAUNCH_CONFIGS.values())


def config_for(capability: tuple[int, int]) -> PrefillLaunchConfig:
    """The entry of this compute capability, else of the nearest lower architecture that has one."""
    wanted = (int(capability[0]), int(capability[1]))
    return nearest_lower_entry(ALL_LAUNCH_CONFIGS, wanted, "prefill launch configuration")


#: ``path_forced``'s choices: the entry's own rule (``auto``), or one path whatever the length.
PATHS = ("auto", "fused", "chunked")


def path_forced(config: PrefillLaunchConfig, path: str) -> PrefillLaunchConfig:
    """``config`` taking ``path`` at every length (tests and ``caovan bench prefill --path``), with the entry's own
    launch options."""
    if path == "auto":
        return config
    if path == "fused":
        return replace(config, chunked=None)
    if path != "chunked":
        raise ValueError(f"path: expected one of {', '.join(PATHS)}, got {path!r}")
    if config.chunked is None:
        raise ValueError(f"path: the {config.arch} launch entry has no chunked path")
    return replace(config, chunked=replace(config.chunked, from_tokens=1))


def block_v_of(bv: int, V: int) -> int:
    """The value block a kernel runs with: the entry's ``BV``, at most ``V`` rounded up to a power of two."""
    return min(bv, 1 << max(V - 1, 0).bit_length())


def takes_chunked_path(config: PrefillLaunchConfig, total_tokens: int) -> bool:
    chunked = config.chunked
    return chunked is not None and chunked.from_tokens is not None and total_tokens >= chunked.from_tokens


def launch_grids(
    config: PrefillLaunchConfig, total_tokens: int, num_seqs: int, num_v_heads: int, head_v_dim: int
) -> dict[str, tuple[int, ...]]:
    """The grid of each kernel ``entry.gdn_prefill`` launches for a call, by kernel name, in launch order. Chunks
    (pairs) are numbered per sequence from ``cu_seqlens[i] // size + i`` (``_chunk_of_slot``): ``T / size +
    num_seqs`` slots cover every sequence's."""
    T, HV, V = total_tokens, num_v_heads, head_v_dim
    chunk_slots = -(-T // CHUNK) + num_seqs
    grids = {"_caovan_gdn_prefill_wy_kernel": (chunk_slots, HV)}
    if not takes_chunked_path(config, T):
        grids["_caovan_gdn_prefill_state_kernel"] = (-(-V // block_v_of(config.state.BV, V)), HV, num_seqs)
        return grids
    chunked = config.chunked
    grids["_caovan_gdn_prefill_merge_kernel"] = (-(-T // (2 * CHUNK)) + num_seqs, HV)
    grids["_caovan_gdn_prefill_chunk_state_kernel"] = (-(-V // block_v_of(chunked.state.BV, V)), HV, num_seqs)
    grids["_caovan_gdn_prefill_output_kernel"] = (chunk_slots, HV, -(-V // block_v_of(chunked.output.BV, V)))
    return grids
