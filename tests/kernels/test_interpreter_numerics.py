"""GDN spec-decode kernels vs the float64 oracle under the Triton interpreter (CPU, tiny shapes), and the entry's
input validation.

All scenarios run in one child process started with TRITON_INTERPRET=1 (``gdn_interpreter_cases.py``; why a child:
``helpers/interpreter_child.py``), which writes a JSON result per scenario; each scenario is one test here. The
validation tests run in-process: they fail before any launch. The comparison with the installed vLLM's own kernels
is the matrix's numerics tier (``tests/numerics/``).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from helpers.interpreter_child import load_cases_module, run_interpreter_child

pytestmark = pytest.mark.interpreter

_CASES_FILE = Path(__file__).resolve().with_name("gdn_interpreter_cases.py")


cases = load_cases_module(_CASES_FILE, "caovan_gdn_interpreter_cases")


@pytest.fixture(scope="module")
def interpreter_results(tmp_path_factory):
    return run_interpreter_child(_CASES_FILE, tmp_path_factory.mktemp("gdn_interpreter") / "results.json")


def _result(interpreter_results, scenario_id):
    results, rc, log = interpreter_results
    if scenario_id not in results:
        pytest.fail(f"interpreter child (rc={rc}) produced no result for {scenario_id}:\n{log}")
    return results[scenario_id]


@pytest.mark.parametrize("scenario_id", cases.SCENARIO_IDS)
def test_kernels_match_fp64_oracle(interpreter_results, scenario_id):
    res = _result(interpreter_results, scenario_id)
    assert res["ok"], f"{scenario_id}: {res['detail']} (errors {res.get('errors')})"


# ------------------------------------------------------------------------------------------
# Input validation: one ValueError naming the tensor and the expectation, before any launch.
# ------------------------------------------------------------------------------------------


def _valid_inputs():
    return cases.make_inputs(cases.SCENARIOS[0])


def _set(name, value):
    def mutate(inp):
        if name in inp["tensors"]:
            inp["tensors"][name] = value(inp["tensors"][name]) if callable(value) else value
        else:
            inp["kwargs"][name] = value

    return mutate


_BAD_INPUTS = [
    ("mixed_qkv_dtype", _set("mixed_qkv", lambda t: t.to(torch.int32)), r"mixed_qkv: .*dtype"),
    ("mixed_qkv_ndim", _set("mixed_qkv", lambda t: t[None]), r"mixed_qkv: expected 2-D"),
    ("mixed_qkv_width", _set("mixed_qkv", lambda t: t[:, :-1]), r"mixed_qkv: expected shape"),
    (
        "mixed_qkv_channel_stride",
        _set("mixed_qkv", lambda t: t.t().contiguous().t()),
        r"mixed_qkv: expected channel stride 1",
    ),
    ("a_heads", _set("a", lambda t: t[:, :-1]), r"a: expected shape"),
    ("b_rows", _set("b", lambda t: t[:1]), r"b: expected shape \(>= 9,"),
    ("b_dtype", _set("b", lambda t: t.to(torch.float64)), r"b: activation_dtype=float64: the kernels take float16, bf"),
    ("A_log_shape", _set("A_log", lambda t: t[:-1]), r"num_k_heads|A_log"),
    ("dt_bias_stride", _set("dt_bias", lambda t: torch.stack([t, t], 1)[:, 0]), r"dt_bias: expected contiguous"),
    ("conv_weight_shape", _set("conv_weight", lambda t: t[:-1]), r"conv_weight: expected shape"),
    ("conv_bias_len", _set("conv_bias", lambda t: t[:-1]), r"conv_bias: expected"),
    (
        "conv_bias_stride",
        _set("conv_bias", lambda t: torch.stack([t, t], 1)[:, 0]),
        r"conv_bias: expected contiguous shape \(192,\), got shape \(192,\) strides \(2,\)",
    ),
    (
        "conv_state_short",
        _set("conv_state", lambda t: t[:, :, :-1]),
        r"conv_state: expected shape .*state_len >= width - 2 \+ T_max",
    ),
    ("conv_state_ndim", _set("conv_state", lambda t: t[0]), r"conv_state: expected 3-D"),
    ("ssm_state_layout", _set("ssm_layout", "kv"), r"ssm_state: expected shape .*'kv'"),
    ("ssm_state_dtype", _set("ssm_state", lambda t: t.to(torch.float64)), r"ssm_state: .*dtype"),
    (
        "query_start_loc_dtype",
        _set("query_start_loc", lambda t: t.float()),
        r"query_start_loc: expected index dtype int32 or int64",
    ),
    ("state_indices_ndim", _set("state_indices", lambda t: t[:, 0].contiguous()), r"state_indices: expected 2-D"),
    ("state_indices_rows", _set("state_indices", lambda t: t[:1]), r"state_indices: expected"),
    (
        "state_indices_stride",
        _set("state_indices", lambda t: t.t().contiguous().t()),
        r"state_indices: expected stride 1 along its last dimension, got strides \(1, 4\)",
    ),
    ("num_accepted_rows", _set("num_accepted_tokens", lambda t: t[:1]), r"num_accepted_tokens: expected shape"),
    (
        "num_accepted_dtype",
        _set("num_accepted_tokens", lambda t: t.to(torch.int16)),
        r"num_accepted_tokens: expected index dtype",
    ),
    ("out_heads", _set("out", lambda t: t[:, :-1]), r"out: expected shape"),
    ("out_stride", _set("out", lambda t: t.transpose(1, 2).contiguous().transpose(1, 2)), r"out: expected stride 1"),
    (
        "token_index_dtype",
        _set("token_index", torch.zeros(9, dtype=torch.float32)),
        r"token_index: expected index dtype",
    ),
    ("ssm_layout_value", _set("ssm_layout", "hv"), r"ssm_layout: expected 'vk' or 'kv'"),
    ("null_slot_max_type", _set("null_slot_max", 0.0), r"null_slot_max: expected an int"),
    ("heads_not_dividing", _set("num_k_heads", 3), r"A_log: num_v_heads=4: not a multiple of num_k_heads=3"),
    ("device_mismatch", _set("a", lambda t: t.to("meta")), r"a: expected a tensor on cpu"),
    # Sizes are constexprs and dimensions of the scratch: a float there is no size.
    ("num_k_heads_float", _set("num_k_heads", 2.0), r"num_k_heads: expected an int, got 2\.0"),
    ("num_k_heads_bool", _set("num_k_heads", True), r"num_k_heads: expected an int, got True"),
    ("head_k_dim_none", _set("head_k_dim", None), r"head_k_dim: expected an int, got None"),
    ("head_v_dim_float", _set("head_v_dim", 32.0), r"head_v_dim: expected an int"),
    # Arguments the plan key cannot be built from (no tensor metadata, unhashable).
    ("null_slot_max_unhashable", _set("null_slot_max", [0]), r"null_slot_max: expected an int"),
    ("launch_config_unhashable", _set("launch_config", {}), r"launch_config: expected an ArchLaunchConfig or None"),
    ("mixed_qkv_none", _set("mixed_qkv", None), r"mixed_qkv: expected a torch.Tensor, got NoneType"),
    ("ssm_state_numpy", _set("ssm_state", lambda t: t.numpy()), r"ssm_state: expected a torch.Tensor, got ndarray"),
    ("conv_bias_list", _set("conv_bias", lambda t: t.tolist()), r"conv_bias: expected a torch.Tensor or None, got"),
    # Sparse layouts: COO reports zero strides, CSR none (its .stride() raises).
    (
        "a_sparse_coo",
        _set("a", lambda t: t.to_sparse()),
        r"a: expected a dense \(strided\) tensor, got torch.sparse_coo",
    ),
    (
        "conv_weight_sparse_csr",
        _set("conv_weight", lambda t: t.to_sparse_csr()),
        r"conv_weight: expected a dense \(strided\) tensor, got torch.sparse_csr",
    ),
    # Written tensors: a zero stride (an expand()ed view) makes several written elements one location.
    ("out_expanded_rows", _set("out", lambda t: t[:1].expand(t.shape[0], -1, -1)), r"out: expected no zero stride"),
    (
        "ssm_state_expanded_blocks",
        _set("ssm_state", lambda t: t[:1].expand(t.shape[0], -1, -1, -1)),
        r"ssm_state: expected no zero stride",
    ),
    (
        "conv_state_expanded_positions",
        _set("conv_state", lambda t: t[..., :1].expand(-1, -1, t.shape[2])),
        r"conv_state: expected no zero stride",
    ),
]


@pytest.mark.parametrize("mutate,match", [(m, r) for _, m, r in _BAD_INPUTS], ids=[i for i, _, _ in _BAD_INPUTS])
def test_bad_input_raises_value_error_naming_it(mutate, match):
    from caovan.kernels.gdn_spec_decode import gdn_spec_decode

    inp = _valid_inputs()
    mutate(inp)
    with pytest.raises(ValueError, match=match):
        cases.call_kernel(gdn_spec_decode, inp)


def test_cpu_tensors_refused_without_interpreter():
    from caovan.kernels.gdn_spec_decode import gdn_spec_decode, launcher

    if launcher.INTERPRETED:
        pytest.skip("this process runs the interpreter (TRITON_INTERPRET=1): CPU is allowed")
    with pytest.raises(ValueError, match=r"mixed_qkv: expected CUDA tensors .*TRITON_INTERPRET"):
        cases.call_kernel(gdn_spec_decode, _valid_inputs())


def test_valid_inputs_pass_validation():
    # The validation must not reject what the numerics scenarios feed the kernels: with the
    # checks passed, the only complaint left on CPU is the missing interpreter.
    from caovan.kernels.gdn_spec_decode import gdn_spec_decode, launcher

    if launcher.INTERPRETED:
        pytest.skip("this process runs the interpreter: covered by the numerics scenarios")
    for scenario in cases.SCENARIOS:
        with pytest.raises(ValueError, match="TRITON_INTERPRET") as err:
            cases.call_kernel(gdn_spec_decode, cases.make_inputs(scenario))
        assert "mixed_qkv: expected CUDA tensors" in str(err.value), scenario.id


def test_zero_stride_over_a_size_one_dimension_accepted():
    # Only a zero stride over more than one element aliases writes: (rows, 1, V) with stride 0 on the head
    # dimension is a valid out.
    from caovan.kernels.gdn_spec_decode import gdn_spec_decode, launcher

    if launcher.INTERPRETED:
        pytest.skip("this process runs the interpreter: validation would be followed by a launch")
    inp = cases.make_inputs(next(s for s in cases.SCENARIOS if s.id == "heads_H1_G1"))
    out = inp["tensors"]["out"]
    inp["tensors"]["out"] = out.as_strided(out.shape, (out.stride(0), 0, 1))
    with pytest.raises(ValueError, match="mixed_qkv: expected CUDA tensors"):
        cases.call_kernel(gdn_spec_decode, inp)


@pytest.fixture
def interpreted_entry(monkeypatch):
    """The entry as TRITON_INTERPRET=1 leaves it (CPU tensors accepted), with plan caches of its own; only
    calls that launch nothing (validation errors, empty batches) are made through it here."""
    from caovan.kernels.gdn_spec_decode import entry, launcher, plans

    monkeypatch.setattr(launcher, "INTERPRETED", True)
    monkeypatch.setattr(plans, "cached", {})
    monkeypatch.setattr(launcher, "direct_launches", {})
    return entry


def test_meta_tensors_refused_under_interpreter(interpreted_entry):
    # The interpreter runs on CPU tensors only; meta (or any other device) reached the launch.
    inp = _valid_inputs()
    inp["tensors"] = {k: None if t is None else t.to("meta") for k, t in inp["tensors"].items()}
    with pytest.raises(ValueError, match=r"mixed_qkv: expected CUDA tensors .*, got meta"):
        cases.call_kernel(interpreted_entry.gdn_spec_decode, inp)


def test_token_index_into_no_rows_is_a_no_op(interpreted_entry):
    # token_index names rows of mixed_qkv / a / b / out; with none there, a launch could only access out of bounds.
    inp = _valid_inputs()
    t = inp["tensors"]
    for name in ("mixed_qkv", "a", "b", "out"):
        t[name] = t[name][:0]
    t["token_index"] = torch.arange(int(t["query_start_loc"][-1]))
    before = {name: t[name].clone() for name in ("conv_state", "ssm_state")}
    cases.call_kernel(
        interpreted_entry.gdn_spec_decode, inp
    )  # no launch: one would fail here (no CUDA, not interpreted)
    for name, old in before.items():
        assert torch.equal(t[name], old), name


def test_float_size_refused_after_the_int_plan_is_cached(interpreted_entry):
    # 2.0 == 2 and hash(2.0) == hash(2): without the sizes' types in the plan key, the float would reuse the
    # int's plan and be accepted or refused depending on the calls before it.
    inp = cases.make_inputs(next(s for s in cases.SCENARIOS if s.id == "empty_batch_N0"))
    cases.call_kernel(interpreted_entry.gdn_spec_decode, inp)  # empty batch: validated, planned, nothing launched
    from caovan.kernels.gdn_spec_decode import plans

    assert len(plans.cached) == 1
    inp["kwargs"]["num_k_heads"] = float(inp["kwargs"]["num_k_heads"])
    with pytest.raises(ValueError, match=r"num_k_heads: expected an int"):
        cases.call_kernel(interpreted_entry.gdn_spec_decode, inp)
