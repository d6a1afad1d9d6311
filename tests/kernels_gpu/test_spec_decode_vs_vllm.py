"""Kernel tier (CUDA GPU): caovan's spec-decode kernels vs float64 reference vs vLLM's kernels.

Every case runs three implementations on copies of one random input set laid out like vLLM's caches
(caovan.bench.cases.build_inputs): ours (``gdn_spec_decode``), the float64 reference
(``gdn_spec_decode_reference`` on an exact float64 upcast), and vLLM's spec path exactly as vLLM
0.21.0's ``_forward_core`` calls it (caovan.bench.vllm_spec_path.VllmSpecCore).

Rule (caovan.bench.accuracy.check_against_vllm): our max abs error vs float64 is at most vLLM's max
abs error vs float64 plus FLOOR_ULPS (2) units in the last place of the stored dtype at the largest
reference magnitude, for the outputs of real sequences and for the whole SSM cache; the whole conv
cache must be exact (it only moves values). Also: rows of null-slot sequences are zero, nothing is
written into the cache pages' padding, and vLLM's own error is within the stand-alone tolerance (if
not, the reference or the case builder disagrees with vLLM and the comparison would be meaningless).
"""

from __future__ import annotations

import functools

import pytest

torch = pytest.importorskip("torch", reason="kernel tier needs PyTorch")

# A marker-level skip (not a module-level one): a module skipped at collection shows up as a skipped
# test in every tier's report, whatever marker the tier selects.
pytestmark = [
    pytest.mark.kernel,
    pytest.mark.skipif(
        not torch.cuda.is_available(), reason="no CUDA GPU: the kernel tier runs Triton kernels on a GPU"
    ),
]

from caovan.bench import accuracy  # noqa: E402
from caovan.bench.cases import (  # noqa: E402
    KERNEL_EDGE_CASES,
    KERNEL_TEST_GRID,
    SpecDecodeCase,
    build_inputs,
    busy_server_case,
    expand_grid,
)
from caovan.kernels.gdn_spec_decode import gdn_spec_decode  # noqa: E402
from caovan.kernels.gdn_spec_decode.launch_configs import LAUNCH_CONFIGS, config_for  # noqa: E402
from caovan.kernels.gdn_spec_decode.naive import gdn_spec_decode_reference  # noqa: E402

DEVICE = "cuda"
GRID_CASES = expand_grid(KERNEL_TEST_GRID)


@pytest.fixture(scope="session")
def vllm_core():
    from caovan.bench.vllm_spec_path import VllmSpecCore

    try:
        return VllmSpecCore()
    except ImportError as exc:
        # The kernel tier always runs with the row's vLLM installed: a broken vLLM is a failure here.
        pytest.fail(f"vLLM's GDN kernels are not importable, nothing to compare against: {exc}")


def _check_vs_vllm(case: SpecDecodeCase, vllm_core, kernel=gdn_spec_decode) -> None:
    inputs = build_inputs(case, DEVICE)
    ref = accuracy.run_reference(gdn_spec_decode_reference, inputs)
    ours = accuracy.measure(kernel, inputs, ref)
    theirs = accuracy.measure_vllm(vllm_core, inputs, ref)
    sanity = accuracy.check_standalone(case, theirs)
    assert not sanity, f"{case.id}: vLLM's own error is off - reference/builder disagree with vLLM: {sanity}"
    problems = accuracy.check_against_vllm(case, ours, theirs)
    assert not problems, f"{case.id}: {problems}\n  ours: {ours}\n  vLLM: {theirs}"


@pytest.mark.parametrize("case", GRID_CASES, ids=lambda c: c.id)
def test_grid_matches_reference_at_least_as_well_as_vllm(case, vllm_core):
    _check_vs_vllm(case, vllm_core)


@pytest.mark.parametrize("case", KERNEL_EDGE_CASES, ids=lambda c: c.id)
def test_edge_cases_match_reference_at_least_as_well_as_vllm(case, vllm_core):
    _check_vs_vllm(case, vllm_core)


def _entries_not_chosen_here() -> list[str]:
    """The launch-configuration entries this GPU does not pick for itself (all of them without a GPU)."""
    if not torch.cuda.is_available():
        return sorted(LAUNCH_CONFIGS)
    own = config_for(torch.cuda.get_device_capability()).arch
    return sorted(arch for arch in LAUNCH_CONFIGS if arch != own)


# The tests above run the entry this GPU picks (sm90 on an H200). The others run here too, on the same rule:
# the sm75 entry is what an RTX 2080 Ti runs (and every GPU from sm_75 up to the next entry: A100, RTX 3090,
# RTX 4090), and it would otherwise only ever meet the interpreter at tiny shapes and the sm_75 compile gate.
# Any entry runs on any GPU from sm_75 on (programmatic dependent launch is only used where the GPU has it),
# so on a 2080 Ti runner this checks the sm90 entry's kernels in turn. Model-shape grid plus every edge case.
OTHER_ENTRIES = _entries_not_chosen_here()
ENTRY_CASES = [c for c in GRID_CASES if c.head != "small"] + KERNEL_EDGE_CASES


@pytest.mark.parametrize("case", ENTRY_CASES, ids=lambda c: c.id)
@pytest.mark.parametrize("arch", OTHER_ENTRIES)
def test_other_launch_config_entries_match_reference_at_least_as_well_as_vllm(arch, case, vllm_core):
    _check_vs_vllm(case, vllm_core, _kernel_with_entry(arch))


MIXED_CASES = [c for c in KERNEL_EDGE_CASES if c.mixed_batch_tokens][:2]


@pytest.mark.parametrize("case", MIXED_CASES, ids=lambda c: c.id)
def test_mixed_batch_writes_only_spec_rows_and_leaves_inputs_alone(case):
    inputs = build_inputs(case, DEVICE)
    before = inputs.clone()
    mine = inputs.clone()
    accuracy.call(gdn_spec_decode, mine)
    spec_rows = set(inputs.plan.token_index)
    other = torch.tensor([r for r in range(inputs.plan.num_token_rows) if r not in spec_rows], device=DEVICE)
    assert other.numel() > 0
    assert torch.isnan(mine.out.index_select(0, other)).all(), "rows of non-spec tokens were written"
    for name in ("mixed_qkv", "a", "b"):
        assert torch.equal(getattr(mine, name), getattr(before, name)), f"input {name} was modified"


EMPTY_CASES = [
    SpecDecodeCase("qwen3.6-27b-tp2", num_seqs=0, num_spec_tokens=3),
    SpecDecodeCase("qwen3.6-27b-tp2", num_seqs=0, num_spec_tokens=3, padded_seqs=4, padded_tokens=5),
]


@pytest.mark.parametrize("case", EMPTY_CASES, ids=lambda c: c.id)
def test_empty_batch_is_a_no_op(case):
    inputs = build_inputs(case, DEVICE)
    mine = inputs.clone()
    accuracy.call(gdn_spec_decode, mine)
    torch.cuda.synchronize()
    assert torch.equal(mine.backing["cache"], inputs.backing["cache"]), "caches changed on an empty batch"


GRAPH_CASES = [
    SpecDecodeCase("small", num_seqs=4, num_spec_tokens=2, ssm_dtype="float16"),
    busy_server_case(num_seqs=5, num_spec_tokens=3),
    SpecDecodeCase("qwen3.6-27b-tp2", num_seqs=4, num_spec_tokens=3, mixed_batch_tokens=6),
]


def _assert_same(a, b, what: str) -> None:
    torch.testing.assert_close(a, b, rtol=0, atol=0, equal_nan=True, msg=lambda m: f"{what}: {m}")


def _kernel_with_entry(arch: str | None):
    """``gdn_spec_decode`` with this GPU's own launch configuration (None) or the named entry's."""
    if arch is None:
        return gdn_spec_decode
    return functools.partial(gdn_spec_decode, launch_config=LAUNCH_CONFIGS[arch])


@pytest.mark.parametrize("case", GRAPH_CASES, ids=lambda c: c.id)
@pytest.mark.parametrize("arch", [None, *OTHER_ENTRIES], ids=lambda a: a or "own-entry")
def test_cuda_graph_replay_equals_eager(arch, case):
    kernel = _kernel_with_entry(arch)
    inputs = build_inputs(case, DEVICE)
    eager = inputs.clone()
    accuracy.call(kernel, eager)

    # Warm up (compile) on a throw-away copy with identical strides, on a side stream as torch
    # advises,
    # then capture on the graph's own copy and restore its values before replaying.
    warm = inputs.clone()
    graphed = inputs.clone()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        accuracy.call(kernel, warm)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    args, kwargs = graphed.kernel_args()
    with torch.cuda.graph(graph):
        kernel(*args, **kwargs)
    graphed.copy_from(inputs)
    graph.replay()
    torch.cuda.synchronize()
    for name in ("out", "conv_state", "ssm_state"):
        _assert_same(getattr(graphed, name), getattr(eager, name), name)

    # vLLM replays one graph with new values in the same buffers every step, metadata included
    # (num_accepted_tokens changes every step): same plan, new random values, rotated accepted
    # counts.
    other = build_inputs(case, DEVICE, value_seed=case.seed + 1)
    t_max = case.max_query_len
    other.num_accepted_tokens.copy_(other.num_accepted_tokens % t_max + 1)
    eager2 = other.clone()
    accuracy.call(kernel, eager2)
    graphed.copy_from(other)
    graph.replay()
    torch.cuda.synchronize()
    for name in ("out", "conv_state", "ssm_state"):
        _assert_same(getattr(graphed, name), getattr(eager2, name), f"{name} (second replay)")
