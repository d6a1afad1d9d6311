"""Kernel tier (CUDA GPU): the last token's state stored write-through (the launch entry's large-write path) gives
exactly what the streaming stores give, eagerly and through CUDA-graph replay.

With the write-through on, each token's state goes out through two predicated stores (streaming for the tokens
before the last, write-through for the last) instead of one store under a branch; a wrong mask would drop a
token's state or write a null slot. Both paths run on the same inputs, with padded rows and null slots, and must
agree bit for bit (a cache policy changes no value).
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
from caovan.kernels.gdn_spec_decode.launch_configs import config_for  # noqa: E402

CASES = [
    # the measured case (60 MiB of state: the sm90 entry turns the write-through on by itself)
    SpecDecodeCase("qwen3.6-27b-tp2", num_seqs=8, num_spec_tokens=4, accepted="sweep", ssm_dtype="float32"),
    SpecDecodeCase(
        "qwen3-next-80b-tp2", num_seqs=6, num_spec_tokens=3, null_seqs=1, padded_seqs=2, ssm_dtype="float16"
    ),
    SpecDecodeCase("qwen3.6-27b-tp2", num_seqs=3, num_spec_tokens=2, null_seqs=1, ssm_dtype="bfloat16"),
]


def _run(case, config, graph: bool):
    inputs = build_inputs(case, "cuda")
    args, kwargs = inputs.kernel_args()
    if not graph:
        spec.gdn_spec_decode(*args, launch_config=config, **kwargs)
    else:
        snapshot = inputs.clone()  # warm-up mutates the caches: restore them before the replay
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            spec.gdn_spec_decode(*args, launch_config=config, **kwargs)
        torch.cuda.current_stream().wait_stream(side)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            spec.gdn_spec_decode(*args, launch_config=config, **kwargs)
        inputs.copy_from(snapshot)
        g.replay()
    torch.cuda.synchronize()
    return inputs


@pytest.mark.parametrize("graph", [False, True], ids=["eager", "cuda-graph"])
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_write_through_and_streaming_stores_agree_bitwise(case, graph):
    spec._plans.clear()  # the plan checks below look at this test's plans only
    spec._direct.clear()
    base = config_for(torch.cuda.get_device_capability())
    written_through = _run(case, replace(base, write_through_last_min_state_write_bytes=0), graph)
    wt_plans = list(spec._plans.values())
    streamed = _run(case, replace(base, write_through_last_min_state_write_bytes=None), graph)
    for name in ("out", "conv_state", "ssm_state"):
        assert torch.equal(getattr(written_through, name), getattr(streamed, name)), f"{case.id}: {name} differs"
    assert wt_plans and all(p.write_through_last for p in wt_plans)
    assert not any(p.write_through_last for p in spec._plans.values() if p not in wt_plans)


def test_the_entry_turns_it_on_for_the_measured_case_only():
    """Through gdn_spec_decode's own plan (no forced threshold): on where the entry's volume says, off below it."""
    spec._plans.clear()
    spec._direct.clear()
    base = config_for(torch.cuda.get_device_capability())
    if base.write_through_last_min_state_write_bytes is None:
        pytest.skip(f"the {base.arch} launch entry never stores write-through (no threshold measured for it)")
    big, small = CASES[0], CASES[2]
    _run(big, base, graph=False)
    assert [p.write_through_last for p in spec._plans.values()] == [True]
    spec._plans.clear()
    _run(small, base, graph=False)
    assert [p.write_through_last for p in spec._plans.values()] == [False]
