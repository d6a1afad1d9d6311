"""Kernel tier (CUDA GPU): the cached direct launch gives what Triton's own dispatch gives.

After the first call of a layout, ``gdn_spec_decode`` calls the compiled kernels' launchers directly
(host overhead). These tests make the second call of a layout go through that path with new values and
check it against the float64 reference, and check that a misaligned pointer falls back to Triton.
"""

from __future__ import annotations

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

import caovan.kernels.gdn_spec_decode as spec  # noqa: E402
from caovan.bench import accuracy  # noqa: E402
from caovan.bench.cases import SpecDecodeCase, build_inputs  # noqa: E402
from caovan.kernels.gdn_spec_decode import launcher, plans  # noqa: E402
from caovan.kernels.gdn_spec_decode.naive import gdn_spec_decode_reference  # noqa: E402

CASES = [
    SpecDecodeCase("qwen3.6-27b-tp2", num_seqs=3, num_spec_tokens=3, accepted="sweep", ssm_dtype="float32"),
    SpecDecodeCase("small", num_seqs=4, num_spec_tokens=2, null_seqs=1, padded_seqs=1, ssm_dtype="float16"),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_second_call_uses_direct_launch_and_matches_reference(case):
    launcher.direct_launches.clear()  # a cache: the first call below refills it through Triton's own dispatch
    first = build_inputs(case, "cuda")
    accuracy.call(spec.gdn_spec_decode, first.clone())
    direct_before = len(launcher.direct_launches)
    assert direct_before == 1, "the first call of an aligned layout should cache its compiled launchers"

    second = build_inputs(case, "cuda", value_seed=case.seed + 7)
    ref = accuracy.run_reference(gdn_spec_decode_reference, second)
    report = accuracy.measure(spec.gdn_spec_decode, second, ref)
    problems = accuracy.check_standalone(case, report)
    assert not problems, f"{case.id} (direct launch): {problems}\n  {report}"
    assert len(launcher.direct_launches) == direct_before, "same layout, new values: no new compile expected"


def test_direct_and_triton_dispatch_agree_bitwise():
    case = CASES[0]
    inputs = build_inputs(case, "cuda")
    accuracy.call(spec.gdn_spec_decode, inputs.clone())  # compile + cache
    via_direct = inputs.clone()
    accuracy.call(spec.gdn_spec_decode, via_direct)
    saved = dict(launcher.direct_launches)
    launcher.direct_launches.clear()
    try:
        via_triton = inputs.clone()
        accuracy.call(spec.gdn_spec_decode, via_triton)
    finally:
        launcher.direct_launches.update(saved)
    torch.cuda.synchronize()
    for name in ("out", "conv_state", "ssm_state"):
        assert torch.equal(getattr(via_direct, name), getattr(via_triton, name)), name


def test_misaligned_pointer_takes_triton_dispatch():
    assert launcher.aligned_pointers((torch.empty(9, dtype=torch.float16, device="cuda")[1:],)) is None
    base = torch.empty(16, device="cuda")
    assert launcher.aligned_pointers((base, None)) == (base.data_ptr(), None)


def test_eager_calls_reuse_one_scratch_per_stream_and_graphs_get_their_own():
    """The q/k scratch is kept per plan and stream for eager calls; concurrent streams and captures get their own."""
    case = CASES[0]
    sources = [build_inputs(case, "cuda", value_seed=case.seed + i) for i in (0, 3)]
    refs = [accuracy.run_reference(gdn_spec_decode_reference, x) for x in sources]
    streams = [torch.cuda.Stream(), torch.cuda.Stream()]
    plans.cached.clear()
    launcher.direct_launches.clear()
    for _ in range(2):  # the second round goes through the cached direct launch
        runs = [x.clone() for x in sources]
        torch.cuda.synchronize()
        for run, stream in zip(runs, streams, strict=True):  # both in flight at once, same plan
            with torch.cuda.stream(stream):
                accuracy.call(spec.gdn_spec_decode, run)
        torch.cuda.synchronize()
        for run, ref in zip(runs, refs, strict=True):
            report = accuracy.compare(run, ref)
            assert not accuracy.check_standalone(case, report), report
    (plan,) = plans.cached.values()
    assert set(plan.scratch_by_stream) == {s.cuda_stream for s in streams}

    before = dict(plan.scratch_by_stream)
    args, kwargs = sources[0].clone().kernel_args()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=torch.cuda.Stream()):
        spec.gdn_spec_decode(*args, **kwargs)
    assert plan.scratch_by_stream == before, "a capture must neither take nor add an eager scratch"
    graph.replay()
    torch.cuda.synchronize()
