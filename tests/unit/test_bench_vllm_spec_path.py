"""Tests of ``VllmSpecCore``, vLLM's spec-decode path behind our calling convention.

- CPU, no vLLM: the call is wired exactly as vLLM 0.21.0's ``_forward_core`` wires it (recorded with
  fake kernels), and ``check_inputs`` refuses what vLLM cannot express.
- Triton interpreter (marker ``interpreter``, needs vLLM): in a subprocess with TRITON_INTERPRET=1,
  vLLM's real kernels run at tiny shapes on the bench's inputs - null slots, CUDA-graph padding,
  mixed lengths, every accepted count, mixed batches, strided inputs, both conv layouts, "kv"
  state - and must match the test stand-in of the float64 reference; the installed vLLM's own
  ``rearrange_mixed_qkv`` and ``_forward_core`` source are checked against what we replay.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from types import SimpleNamespace

import pytest

torch = pytest.importorskip("torch", reason="VllmSpecCore works on torch tensors")

from caovan.bench.cases import SpecDecodeCase, build_inputs  # noqa: E402
from caovan.bench.vllm_spec_path import VllmSpecCore  # noqa: E402


class _Recorder:
    """Fake vLLM GDN module: records how the two kernels are called, returns shaped outputs."""

    __name__ = "fake_gdn_module"

    def __init__(self):
        self.calls = []

    def causal_conv1d_update(self, x, conv_state, weight, bias=None, activation=None, **kw):
        self.calls.append(("conv", (x, conv_state, weight, bias, activation), kw))
        return x

    def fused_sigmoid_gating_delta_rule_update(self, **kw):
        self.calls.append(("gdn", (), kw))
        v = kw["v"]
        return torch.full_like(v, 7.0), kw["initial_state"]


def test_call_is_wired_like_vllm_021_forward_core():
    rec = _Recorder()
    core = VllmSpecCore(module=rec)
    case = SpecDecodeCase("small", num_seqs=3, num_spec_tokens=2, padded_seqs=2, padded_tokens=1)
    x = build_inputs(case)
    args, kwargs = x.kernel_args()
    core(*args, **kwargs)
    (_, conv_args, conv_kw), (_, _, gdn_kw) = rec.calls
    n = case.num_seqs + case.padded_seqs
    assert conv_args[0] is args[0] and conv_args[4] == "silu"
    assert torch.equal(conv_kw["conv_state_indices"], x.state_indices[:, 0][:n])
    assert conv_kw["num_accepted_tokens"] is args[11]
    assert conv_kw["query_start_loc"] is args[9] and conv_kw["max_query_len"] == 3
    assert conv_kw["validate_data"] is False
    assert gdn_kw["inplace_final_state"] is True and gdn_kw["use_qk_l2norm_in_kernel"] is True
    assert gdn_kw["initial_state"] is args[8] and gdn_kw["ssm_state_indices"] is args[10]
    assert torch.equal(gdn_kw["cu_seqlens"], x.query_start_loc[: n + 1])
    h = case.head_config
    q, k, v = gdn_kw["q"], gdn_kw["k"], gdn_kw["v"]
    rows = x.plan.num_token_rows
    assert q.shape == k.shape == (1, rows, h.num_k_heads, h.head_k_dim)
    assert v.shape == (1, rows, h.num_v_heads, h.head_v_dim)
    assert q.is_contiguous() and k.is_contiguous() and v.is_contiguous()
    assert torch.equal(q.reshape(rows, -1), x.mixed_qkv[:, : h.key_dim])
    assert torch.equal(v.reshape(rows, -1), x.mixed_qkv[:, 2 * h.key_dim :])
    assert (args[12] == 7.0).all()  # core_attn_out[:num_actual_tokens] = o


def test_mixed_batch_gathers_and_scatters_spec_rows():
    rec = _Recorder()
    core = VllmSpecCore(module=rec)
    x = build_inputs(SpecDecodeCase("small", num_seqs=2, num_spec_tokens=1, mixed_batch_tokens=3))
    args, kwargs = x.kernel_args()
    core(*args, **kwargs)
    ti = kwargs["token_index"]
    conv_x = rec.calls[0][1][0]
    assert torch.equal(conv_x, x.mixed_qkv.index_select(0, ti))
    assert torch.equal(rec.calls[1][2]["a"], x.a.index_select(0, ti))
    out = args[12]
    others = [r for r in range(x.plan.num_token_rows) if r not in set(ti.tolist())]
    assert (out[ti] == 7.0).all() and torch.isnan(out[others]).all()


def test_families_before_029_hand_the_recurrent_kernel_the_whole_gating_inputs():
    # vLLM 0.20 - 0.27 select the spec rows of mixed_qkv only; a and b go to the kernel as they came.
    rec = _Recorder()
    core = VllmSpecCore(module=rec, gather_gating=False)
    x = build_inputs(SpecDecodeCase("small", num_seqs=2, num_spec_tokens=1, mixed_batch_tokens=3))
    args, kwargs = x.kernel_args()
    core(*args, **kwargs)
    assert torch.equal(rec.calls[0][1][0], x.mixed_qkv.index_select(0, kwargs["token_index"]))
    assert rec.calls[1][2]["a"] is args[1] and rec.calls[1][2]["b"] is args[2]


def test_check_inputs_refuses_what_vllm_cannot_do():
    core = VllmSpecCore(module=_Recorder())
    x = build_inputs(SpecDecodeCase("small", 1, 1, ssm_layout="kv"))
    args, kwargs = x.kernel_args()
    with pytest.raises(ValueError, match="ssm_layout='kv'"):
        core.check_inputs(*args, **kwargs)
    y = build_inputs(SpecDecodeCase("small", 1, 1))
    args, kwargs = y.kernel_args()
    core.check_inputs(*args, **kwargs)
    with pytest.raises(ValueError, match="null_slot_max=-1; this vLLM skips index <= 0 only"):
        core.check_inputs(*args, **{**kwargs, "null_slot_max": -1})
    # vLLM 0.19 and before: PAD_SLOT_ID (-1) is the null slot, block 0 a real one.
    VllmSpecCore(module=_Recorder(), null_slot_max=-1).check_inputs(*args, **{**kwargs, "null_slot_max": -1})
    args = list(args)
    args[8] = args[8].transpose(-1, -2)  # inner dims not contiguous
    with pytest.raises(ValueError, match="inner strides"):
        core.check_inputs(*args, **kwargs)


def test_module_without_the_kernels_is_refused():
    with pytest.raises(ImportError, match="has no causal_conv1d_update"):
        VllmSpecCore(module=SimpleNamespace(__name__="x", fused_sigmoid_gating_delta_rule_update=1))


# ----------------------------------------------------------------------------- Triton interpreter
_SCRIPT = textwrap.dedent(
    """
    import importlib.util, inspect, json, sys, types
    import torch
    from caovan.bench import accuracy
    from caovan.bench.cases import SpecDecodeCase, build_inputs
    from caovan.bench.vllm_spec_path import VllmSpecCore, load_vllm_gdn_module

    from caovan.kernels.gdn_spec_decode.naive import gdn_spec_decode_reference as reference

    mod = load_vllm_gdn_module()
    core = VllmSpecCore(mod)
    result = {"cases": {}}
    cases = [
        SpecDecodeCase("tiny", num_seqs=2, num_spec_tokens=1),
        SpecDecodeCase("tiny", num_seqs=4, num_spec_tokens=3, ssm_dtype="float16",
                       accepted="sweep", mixed_lengths=True, null_seqs=1, padded_seqs=2,
                       padded_tokens=2, null_write_slots=True),
        SpecDecodeCase("tiny", num_seqs=2, num_spec_tokens=2, mixed_batch_tokens=3,
                       strided_inputs=True, conv_bias=True, conv_layout="DS", ssm_layout="kv"),
    ]
    for case in cases:
        inputs = build_inputs(case)
        ref = accuracy.run_reference(reference, inputs)
        err = accuracy.measure_vllm(core, inputs, ref)
        result["cases"][case.id] = {
            "errors": err.as_dict(), "problems": accuracy.check_standalone(case, err)}

    # Our rearrange_mixed_qkv against the installed vLLM's own method.
    h = cases[0].head_config
    fake_self = types.SimpleNamespace(key_dim=h.key_dim, value_dim=h.value_dim, tp_size=1,
                                      head_k_dim=h.head_k_dim, head_v_dim=h.head_v_dim)
    x = torch.randn(5, h.conv_dim)
    theirs = mod.GatedDeltaNetAttention.rearrange_mixed_qkv(fake_self, x)
    ours = VllmSpecCore.rearrange_mixed_qkv(x, h.num_k_heads, h.head_k_dim, h.head_v_dim)
    result["rearrange_equal"] = all(
        a.shape == b.shape and a.stride() == b.stride() and torch.equal(a, b)
        for a, b in zip(theirs, ours))
    result["forward_core_source"] = inspect.getsource(mod.GatedDeltaNetAttention._forward_core)
    print("RESULT " + json.dumps(result))
    """
)

#: Fragments of vLLM 0.21.0's _forward_core spec branch that VllmSpecCore replays.
FORWARD_CORE_FRAGMENTS = (
    "mixed_qkv_spec = causal_conv1d_update(",
    "conv_state_indices=spec_state_indices_tensor[:, 0][",
    "num_accepted_tokens=num_accepted_tokens,",
    "query_start_loc=spec_query_start_loc,",
    "max_query_len=spec_state_indices_tensor.size(-1),",
    "query_spec, key_spec, value_spec = self.rearrange_mixed_qkv(mixed_qkv_spec)",
    "fused_sigmoid_gating_delta_rule_update(",
    "initial_state=ssm_state,",
    "inplace_final_state=True,",
    "ssm_state_indices=spec_state_indices_tensor,",
    "use_qk_l2norm_in_kernel=True,",
    "core_attn_out[:num_actual_tokens] = core_attn_out_spec.squeeze(0)",
)


@pytest.mark.interpreter
def test_vllm_kernels_under_interpreter_match_the_contract_semantics():
    if importlib.util.find_spec("vllm") is None:
        pytest.skip("vLLM is not installed: nothing to run under the interpreter")
    import numpy

    if tuple(int(p) for p in numpy.__version__.split(".")[:2]) >= (2, 4):
        pytest.skip(f"Triton's interpreter needs numpy < 2.4, found {numpy.__version__}")
    env = {**os.environ, "TRITON_INTERPRET": "1", "CUDA_VISIBLE_DEVICES": ""}
    src = str(Path(__file__).resolve().parents[2] / "src")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (src, env.get("PYTHONPATH")) if p)
    proc = subprocess.run(
        [sys.executable, "-c", _SCRIPT],
        env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, f"subprocess failed:\n{proc.stderr[-4000:]}"
    result = json.loads(lines[-1][len("RESULT ") :])
    for case_id, r in result["cases"].items():
        assert r["problems"] == [], f"{case_id}: vLLM vs contract reference: {r}"
        assert r["errors"]["out"] > 0  # fp16 rounding shows: the comparison is not vacuous
    assert result["rearrange_equal"]
    missing = [f for f in FORWARD_CORE_FRAGMENTS if f not in result["forward_core_source"]]
    assert not missing, f"installed vLLM's _forward_core no longer calls the spec path as replayed: {missing}"
