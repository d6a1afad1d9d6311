"""Which value block (BV) the V/GDN kernel runs with for one batch: the grid should fit in one wave.

The V/GDN kernel runs one program per (BV value rows, sequence, value head); each program walks its tokens
serially with its state slab in registers, so all programs take about the same time and a grid that needs
1.2 waves of resident programs takes about twice as long as one that fits in one. The launch configuration's
BV is the preferred block (the fastest one measured at the tuning shapes); when its grid would need more
than one wave on this GPU, larger blocks (fewer, fatter programs) are tried and the first that fits in one
wave is used. Measured on an H200 (docs/bench/kernel-design.md): Qwen3.6-27B at TP=2 with 8 sequences runs 3072
programs at BV=8 (17 resident per SM at 115 registers: 1.4 waves) and 1536 at BV=16 (12 per SM at 167 registers:
one wave), 5-21 % faster at BV=16; Qwen3-Next-80B at 8 sequences (2048 programs) already fits at BV=8, and BV=16
is up to 17 % slower there.

Residency is computed the way the CUDA occupancy calculator does it, from the compiled kernel's register
count (allocated per warp in units of 256), its shared memory and the SM's limits.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

#: A program holds BV x K state values in registers over 32 * num_warps threads; larger blocks than this
#: many values per thread spill on every architecture the kernels target (255 registers per thread).
MAX_STATE_VALUES_PER_THREAD = 64

#: Resident blocks per SM by compute capability (CUDA C Programming Guide, "Technical Specifications per
#: Compute Capability"); a capability not listed uses the smallest limit of the family it belongs to.
_MAX_BLOCKS_PER_SM = {(7, 5): 16, (8, 0): 32, (8, 6): 16, (8, 7): 16, (8, 9): 24, (9, 0): 32, (10, 0): 32, (12, 0): 32}
_REGISTER_ALLOCATION_UNIT = 256  # registers, per warp


@dataclass(frozen=True)
class SMLimits:
    multiprocessors: int
    registers_per_sm: int
    max_threads_per_sm: int
    shared_bytes_per_sm: int
    max_blocks_per_sm: int

    @classmethod
    def of_device(cls, props) -> SMLimits:
        """From ``torch.cuda.get_device_properties(device)``."""
        capability = (props.major, props.minor)
        same_major = [v for (major, _), v in _MAX_BLOCKS_PER_SM.items() if major == props.major]
        max_blocks = _MAX_BLOCKS_PER_SM.get(capability, min(same_major) if same_major else 16)
        return cls(
            multiprocessors=props.multi_processor_count,
            registers_per_sm=props.regs_per_multiprocessor,
            max_threads_per_sm=props.max_threads_per_multi_processor,
            shared_bytes_per_sm=props.shared_memory_per_multiprocessor,
            max_blocks_per_sm=max_blocks,
        )


#: The GPU the sm75 entry is for, GeForce RTX 2080 Ti: TU102 with 68 SMs enabled; per SM the compute capability
#: 7.5 limits (CUDA C Programming Guide): 64 K registers, 1024 threads, 64 KiB shared memory, 16 blocks. No such
#: GPU is at hand: the sm_75 gate computes its residency from the kernels' sm_75 compile with these limits.
RTX_2080_TI = SMLimits(
    multiprocessors=68,
    registers_per_sm=65536,
    max_threads_per_sm=1024,
    shared_bytes_per_sm=65536,
    max_blocks_per_sm=_MAX_BLOCKS_PER_SM[(7, 5)],
)


def resident_programs_per_sm(registers: int, num_warps: int, shared_bytes: int, limits: SMLimits) -> int:
    """Programs (thread blocks) of one kernel resident at once on one SM."""
    unit = _REGISTER_ALLOCATION_UNIT
    registers_per_warp = -(-max(registers, 1) * 32 // unit) * unit
    by_registers = (limits.registers_per_sm // registers_per_warp) // num_warps
    by_threads = limits.max_threads_per_sm // (32 * num_warps)
    by_shared = limits.shared_bytes_per_sm // shared_bytes if shared_bytes > 0 else limits.max_blocks_per_sm
    return max(0, min(by_registers, by_threads, by_shared, limits.max_blocks_per_sm))


def value_block_candidates(preferred: int, block_k: int, num_warps: int, block_v_max: int) -> list[int]:
    """The preferred BV, then each doubling that still fits the head and the per-thread register budget."""
    candidates = [preferred]
    bv = preferred * 2
    while bv <= block_v_max and bv * block_k <= MAX_STATE_VALUES_PER_THREAD * 32 * num_warps:
        candidates.append(bv)
        bv *= 2
    return candidates


def choose_value_block(
    candidates: Sequence[int],
    num_programs: Callable[[int], int],
    resident_programs: Callable[[int], int],
) -> int:
    """The first candidate whose grid fits in one wave; else the one needing the fewest waves (first on a tie).

    ``resident_programs(bv)`` is the number resident on the whole GPU (per SM times SMs); it is only asked
    for as far as needed, since each candidate costs a compilation.
    """
    best, best_waves = candidates[0], None
    for bv in candidates:
        resident = resident_programs(bv)
        waves = -(-num_programs(bv) // resident) if resident > 0 else float("inf")
        if waves <= 1:
            return bv
        if best_waves is None or waves < best_waves:
            best, best_waves = bv, waves
    return best
