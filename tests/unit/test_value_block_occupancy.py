"""The one-wave rule for the V/GDN kernel's value block (caovan.kernels.gdn_spec_decode.occupancy)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from caovan.kernels.gdn_spec_decode.occupancy import (
    SMLimits,
    choose_value_block,
    resident_programs_per_sm,
    value_block_candidates,
)

# torch.cuda.get_device_properties() of an H200 (the fields SMLimits reads).
H200 = SimpleNamespace(
    major=9,
    minor=0,
    multi_processor_count=132,
    regs_per_multiprocessor=65536,
    max_threads_per_multi_processor=2048,
    shared_memory_per_multiprocessor=233472,
)


def test_limits_of_a_device():
    limits = SMLimits.of_device(H200)
    assert (limits.multiprocessors, limits.registers_per_sm, limits.max_blocks_per_sm) == (132, 65536, 32)
    turing = SMLimits.of_device(SimpleNamespace(**{**vars(H200), "major": 7, "minor": 5}))
    assert turing.max_blocks_per_sm == 16
    # An unlisted minor version takes its family's smallest limit; an unknown family the smallest of all.
    assert SMLimits.of_device(SimpleNamespace(**{**vars(H200), "major": 8, "minor": 8})).max_blocks_per_sm == 16
    assert SMLimits.of_device(SimpleNamespace(**{**vars(H200), "major": 11, "minor": 0})).max_blocks_per_sm == 16


@pytest.mark.parametrize(
    "registers,num_warps,shared,expected",
    [
        (119, 1, 32, 17),  # sm90 V/GDN kernel at BV=8 (ptxas -v): 3808 registers per warp, 3840 allocated
        (128, 1, 32, 16),
        (168, 1, 64, 12),  # BV=16: 5376 registers per warp, 12 warps in 65536
        (169, 1, 64, 11),  # one more register crosses an allocation unit
        (80, 1, 16, 25),
        (40, 1, 0, 32),  # the resident-block limit binds
        (128, 2, 0, 8),  # two warps per program
        (32, 1, 100_000, 2),  # shared memory binds
    ],
)
def test_resident_programs_per_sm(registers, num_warps, shared, expected):
    assert resident_programs_per_sm(registers, num_warps, shared, SMLimits.of_device(H200)) == expected


def test_candidates_stop_at_the_head_and_the_register_budget():
    assert value_block_candidates(8, 128, 1, 128) == [8, 16]  # 32 x 128 values over 32 threads would be 128 each
    assert value_block_candidates(32, 128, 2, 128) == [32]  # Turbo3's SM75 entry: already 64 values per thread
    assert value_block_candidates(8, 32, 1, 32) == [8, 16, 32]  # small heads: up to the head size
    assert value_block_candidates(16, 128, 1, 16) == [16]


def _choose(candidates, programs, resident_by_bv):
    asked = []

    def resident(bv):
        asked.append(bv)
        return resident_by_bv[bv]

    return choose_value_block(candidates, lambda bv: programs * 128 // bv, resident), asked


def test_keeps_the_preferred_block_when_its_grid_fits_in_one_wave():
    # Qwen3-Next-80B TP=2 (16 value heads), 8 sequences: 2048 programs at BV=8, 16 x 132 = 2112 resident.
    assert _choose([8, 16], 8 * 16, {8: 2112, 16: 1584}) == (8, [8])


def test_switches_to_a_larger_block_when_the_preferred_needs_two_waves():
    # Qwen3.6-27B TP=2 (24 value heads), 8 sequences: 3072 programs at BV=8 (2112 resident: 1.45 waves),
    # 1536 at BV=16 (12 x 132 = 1584 resident: one wave).
    assert _choose([8, 16], 8 * 24, {8: 2112, 16: 1584}) == (16, [8, 16])


def test_no_candidate_fits_fewest_waves_first_then_the_preferred():
    assert _choose([8, 16], 16 * 24, {8: 2112, 16: 1584}) == (16, [8, 16])  # 3 waves at BV=8, 2 at BV=16
    assert _choose([8, 16], 16 * 24, {8: 2112, 16: 1000}) == (8, [8, 16])  # 3 waves at BV=8, 4 at BV=16
    assert _choose([8, 16], 8 * 24, {8: 0, 16: 0}) == (8, [8, 16])  # nothing can be resident: keep the preferred
