"""Kernel tier (CUDA GPU): the V/GDN kernel as a programmatic dependent launch (sm_90+) gives exactly what
the plain, stream-ordered launch gives, eagerly and through CUDA-graph capture and replay.

With PDL the V/GDN kernel starts while the Q/K kernel still runs and waits (``gdc_wait``) only before it
reads the Q/K scratch; a missing or misplaced wait would read stale scratch, so the two launch modes are
compared bit for bit on cases with padded rows and null slots (the early exits must wait too).

The Q/K kernel is itself a programmatic dependent of the kernel before it: it must wait for that kernel
before reading anything, and release the V/GDN kernel (whose early loads read the SSM state) only after.
The chained case checks that: a copy kernel writes the call's input right before it, and a second call reads
the conv and SSM state the first one wrote.

Where a call writes much SSM state, half of the V/GDN programs also wait before loading their state (the
staggered start, from a launch-entry threshold); each case runs with it forced on and off, and both must
match the plain launch bit for bit.

Where a call writes most of L2 in state, the last token's state is stored write-through (another launch-entry
threshold): each token's state then goes out through two predicated stores (streaming before the last token,
write-through for it) instead of one store under a branch, and a wrong mask would drop a token's state or write a
null slot. Forced on and off on the same inputs, with padded rows and null slots, the two must agree bit for bit
(a cache policy changes no value).
"""

from __future__ import annotations

from dataclasses import replace

import pytest

torch = pytest.importorskip("torch", reason="kernel tier needs PyTorch")

pytestmark = [
    pytest.mark.kernel,
    pytest.mark.skipif(
        not torch.cuda.is_available(), reason="no CUDA GPU: the kernel tier runs Triton kernels on a GPU"
    ),
]

import caovan.kernels.gdn_spec_decode as spec  # noqa: E402
from caovan.bench.cases import SpecDecodeCase, build_inputs  # noqa: E402
from caovan.kernels.gdn_spec_decode import launcher, plans  # noqa: E402
from caovan.kernels.gdn_spec_decode.launch_configs import config_for, has_pdl  # noqa: E402

CASES = [
    SpecDecodeCase("qwen3.6-27b-tp2", num_seqs=8, num_spec_tokens=4, accepted="sweep", ssm_dtype="float32"),
    SpecDecodeCase(
        "qwen3-next-80b-tp2", num_seqs=6, num_spec_tokens=3, null_seqs=1, padded_seqs=2, ssm_dtype="float16"
    ),
    SpecDecodeCase("qwen3.6-27b-tp2", num_seqs=1, num_spec_tokens=3, accepted="sweep", ssm_dtype="float32"),
]


def _run(case, config, graph: bool, chained: bool = False):
    inputs = build_inputs(case, "cuda")
    args, kwargs = inputs.kernel_args()
    x = inputs.mixed_qkv
    x_src = x.clone()

    def call():
        if chained:
            x.fill_(float("nan"))  # what the call must not see: its input is written by the kernel just before
            x.copy_(x_src)
        spec.gdn_spec_decode(*args, launch_config=config, **kwargs)
        if chained:  # reads the conv window and the SSM state the first call wrote
            spec.gdn_spec_decode(*args, launch_config=config, **kwargs)

    if not graph:
        call()
    else:
        snapshot = inputs.clone()  # warm-up mutates the caches: restore them before the replay
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            call()
        torch.cuda.current_stream().wait_stream(side)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            call()
        inputs.copy_from(snapshot)
        g.replay()
    torch.cuda.synchronize()
    return inputs


@pytest.mark.skipif(
    torch.cuda.is_available() and not has_pdl(torch.cuda.get_device_capability()),
    reason="programmatic dependent launch needs sm_90+; older GPUs always launch plainly",
)
@pytest.mark.parametrize("chained", [False, True], ids=["one-call", "chained"])
@pytest.mark.parametrize("graph", [False, True], ids=["eager", "cuda-graph"])
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
@pytest.mark.parametrize("stagger_from", [0, None], ids=["staggered", "not-staggered"])
def test_pdl_and_plain_launch_agree_bitwise(case, graph, chained, stagger_from):
    plans.cached.clear()  # the plan checks below look at this test's plans only
    launcher.direct_launches.clear()
    base = config_for(torch.cuda.get_device_capability())
    with_pdl = _run(case, replace(base, pdl=True, stagger_min_state_write_bytes=stagger_from), graph, chained)
    plain = _run(case, replace(base, pdl=False, stagger_min_state_write_bytes=None), graph, chained)
    for name in ("out", "conv_state", "ssm_state"):
        assert torch.equal(getattr(with_pdl, name), getattr(plain, name)), f"{case.id}: {name} differs"
    # and the PDL plans really asked for it (and for the staggered start when it was forced on)
    pdl_plans = [p for p in plans.cached.values() if p.pdl]
    assert pdl_plans
    assert all(p.stagger == (stagger_from is not None) for p in pdl_plans)


@pytest.mark.parametrize("graph", [False, True], ids=["eager", "cuda-graph"])
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_write_through_and_streaming_stores_agree_bitwise(case, graph):
    plans.cached.clear()  # the plan checks below look at this test's plans only
    launcher.direct_launches.clear()
    base = config_for(torch.cuda.get_device_capability())
    written_through = _run(case, replace(base, write_through_last_min_state_write_bytes=0), graph)
    through_plans = list(plans.cached.values())
    plans.cached.clear()
    streamed = _run(case, replace(base, write_through_last_min_state_write_bytes=None), graph)
    for name in ("out", "conv_state", "ssm_state"):
        assert torch.equal(getattr(written_through, name), getattr(streamed, name)), f"{case.id}: {name} differs"
    assert through_plans and all(p.write_through_last for p in through_plans)
    assert plans.cached and not any(p.write_through_last for p in plans.cached.values())


def test_the_entry_writes_through_from_its_state_volume():
    """Through gdn_spec_decode's own plan, no threshold forced: on at 60 MiB of state writes, off at one sequence."""
    base = config_for(torch.cuda.get_device_capability())
    if base.write_through_last_min_state_write_bytes is None:
        pytest.skip(f"the {base.arch} launch entry never stores write-through (no threshold measured for it)")
    big, small = CASES[0], CASES[2]  # 27B, fp32 state: 8 sequences x 5 tokens (60 MiB), 1 sequence x 4 tokens
    for case, expected in ((big, True), (small, False)):
        plans.cached.clear()
        _run(case, base, graph=False)
        assert [p.write_through_last for p in plans.cached.values()] == [expected], case.id


def test_the_entry_splits_rows_from_its_state_volume():
    """Through gdn_spec_decode's own plan: the slab's rows over fewer lanes at the entry's split block for a call
    writing much fp32 state (27B, 8 sequences x 5 tokens: BV 16 by the one-wave rule), not for one sequence; the
    split kernel's result within the stand-alone tolerance of the float64 reference (and, in
    test_spec_decode_vs_vllm, within vLLM's error: that grid has the same case)."""
    from caovan.bench import accuracy
    from caovan.kernels.gdn_spec_decode.naive import gdn_spec_decode_reference

    base = config_for(torch.cuda.get_device_capability())
    if base.row_split_min_state_write_bytes is None:
        pytest.skip(f"the {base.arch} launch entry never splits the slab's rows (no threshold measured for it)")
    v = base.v_gdn
    big, small = CASES[0], CASES[2]
    plans.cached.clear()
    inputs = build_inputs(big, "cuda")
    ref = accuracy.run_reference(gdn_spec_decode_reference, inputs)
    report = accuracy.measure(spec.gdn_spec_decode, inputs, ref)
    made = list(plans.cached.values())
    assert [(p.v_block, p.row_lanes, p.v_maxnreg) for p in made] == [
        (v.row_split_block, v.row_split_lanes, v.row_split_maxnreg)
    ]
    assert not accuracy.check_standalone(big, report), report
    plans.cached.clear()
    _run(small, base, graph=False)
    assert [p.row_lanes for p in plans.cached.values()] == [32]
