"""The row butterfly's PTX (``row_butterfly``) on simulated lanes, and the check of the layout it assumes.

The PTX cannot run under the Triton interpreter; ``simulate`` executes it on 32 simulated lanes, so these tests
check its arithmetic without a GPU. The layout check runs on kernels compiled ahead of time for sm_90 (the entry
that uses it) and sm_75 (the gate compiles every configuration there): it fails once a Triton lays the slab
out otherwise, and so does the entry's use of the butterfly (it falls back to Triton's reductions)."""

from __future__ import annotations

import random

import pytest

from caovan.kernels.gdn_spec_decode import row_butterfly


def _partials(seed: int) -> list[list[float]]:
    rng = random.Random(seed)
    return [[rng.uniform(-1, 1) for _ in range(8)] for _ in range(32)]


def _row_total(partials, lane: int, row: int) -> float:
    # lane = rl + 2 * kt: a row's 16 lanes share lane bit 0 (RL)
    return sum(partials[(lane & 1) + 2 * kt][row] for kt in range(16))


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_broadcast_gives_every_lane_its_rows_totals(seed):
    partials = _partials(seed)
    out = row_butterfly.simulate(row_butterfly.ptx(broadcast=True), partials)
    for lane in range(32):
        for row in range(8):
            assert out[lane][row] == pytest.approx(_row_total(partials, lane, row), abs=1e-12)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_own_gives_every_lane_the_total_of_the_row_the_kernel_stores_from_it(seed):
    partials = _partials(seed)
    out = row_butterfly.simulate(row_butterfly.ptx(broadcast=False), partials)
    stored = {}
    for lane in range(32):
        row = row_butterfly.own_row(lane)
        assert out[lane] == [pytest.approx(_row_total(partials, lane, row), abs=1e-12)] * 8
        # The kernel's store: lane (rl, kt) with kt even stores row rl * 8 + own_row (its own_v / own_mask).
        kt = lane >> 1
        if kt % 2 == 0:
            assert (lane & 1, row) not in stored
            stored[(lane & 1, row)] = lane
            assert row == ((kt >> 3) & 1) * 4 + ((kt >> 2) & 1) * 2 + ((kt >> 1) & 1)
    assert len(stored) == 16  # every row of the block once
    assert all(row_butterfly.row_lane(lane, row_butterfly.own_row(lane)) >> 2 == lane >> 2 for lane in range(32))


def test_a_token_step_takes_24_shuffles_and_the_marker_is_there():
    text = row_butterfly.ptx(broadcast=True)
    assert text.count("shfl.sync") == 16 and row_butterfly.ptx(broadcast=False).count("shfl.sync") == 8
    assert row_butterfly.MARKER in text  # what layout_problem finds the butterflies by


def test_simulate_refuses_what_it_does_not_know():
    with pytest.raises(ValueError, match=r"instruction 'mul.f32' is not one ptx\(\) writes"):
        row_butterfly.simulate("mul.f32 $0, $8, $9;", _partials(0))


_GOOD_PARENT = (
    "#blocked1 = #ttg.blocked<{sizePerThread = [1, 1, 1, 1, 1, 4], threadsPerWarp = [2, 16, 1, 1, 1, 1], "
    "warpsPerCTA = [1, 1, 1, 1, 1, 1], order = [5, 0, 1, 2, 3, 4]}>"
)


def _ttgir(parent: str = _GOOD_PARENT, shape: str = "2x16x1x8", pack: int = 8, parent_name: str = "#blocked1"):
    op = (
        f'    %p = tt.elementwise_inline_asm "{row_butterfly.MARKER}\\0A{{...}}" {{constraints = "=f,f", '
        f"packed_element = {pack} : i32, pure = true}} %partial : tensor<{shape}xf32, #ttg.slice<{{dim = 4, "
        f"parent = #ttg.slice<{{dim = 5, parent = {parent_name}}}>}}>> -> tensor<{shape}xf32>"
    )
    return f"{parent}\nmodule {{\n{op}\n}}\n"


def test_layout_check_accepts_the_layout_the_ptx_is_written_for():
    assert row_butterfly.layout_problem(_ttgir()) is None


@pytest.mark.parametrize(
    ("ttgir", "message"),
    [
        (_ttgir(_GOOD_PARENT.replace("order = [5, 0, 1", "order = [5, 1, 0")), "RL .* before KT"),
        (_ttgir(_GOOD_PARENT.replace("[2, 16, 1", "[16, 2, 1")), "expected threadsPerWarp"),
        (_ttgir(_GOOD_PARENT.replace("[1, 1, 1, 1, 1, 4]", "[1, 1, 1, 2, 1, 4]")), "one element per thread"),
        (_ttgir(shape="2x16x1x4"), "partials 2x16x1x4 packed by 8"),
        (_ttgir(pack=4), "packed by 4"),
        (_ttgir().replace("dim = 4, parent = #ttg.slice<{dim = 5", "dim = 3, parent = #ttg.slice<{dim = 5"), "0 with"),
        ("module {}", "0 butterflies"),
    ],
)
def test_layout_check_names_what_differs(ttgir, message):
    problem = row_butterfly.layout_problem(ttgir)
    assert problem is not None
    assert __import__("re").search(message, problem), problem


@pytest.mark.parametrize("capability", [(9, 0), (7, 5)])
def test_triton_lays_the_split_slab_out_as_the_ptx_assumes(capability):
    pytest.importorskip("triton", reason="triton is not installed: nothing to compile")
    from caovan.kernels.gdn_spec_decode import aot

    configs = [c for c in aot.runtime_launch_configs() if c.v_gdn.row_butterfly_for(c.v_gdn.BV, True)]
    assert [c.arch for c in configs] == ["sm90"]
    combo = next(c for c in aot.SUPPORTED_DTYPE_COMBOS if c.ssm_state == "float32")
    infos = aot.compile_spec_decode_kernels(configs[0], combo, shape=aot.ModelShape(t_max=5), capability=capability)
    v_gdn = infos[1]
    assert v_gdn.kernel == "_caovan_sm75_fused_v_gdn_spec_decode_kernel"
    assert v_gdn.butterfly_layout_problem is None
