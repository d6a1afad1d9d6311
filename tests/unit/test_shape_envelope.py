"""One envelope, three judges: at every edge of what the GDN kernels take, the kernel entry's validation, the vLLM
adapter's take-over decision and ``caovan check-model`` give the same verdict, with the same reason.

Issue 32: check-model called a model with K=8 a candidate, the adapter then refused its layers at start-up, and
the kernel entry would have run it. Each edge below is judged by every judge that sees it: the kernel entry takes
no activation (SiLU is hard-wired; its caller decides), and check-model reads no activation or conv-state dtype
(vLLM resolves the config's ``dtype`` itself and takes the conv-state dtype from its command line only).

The kernel entry's validation is called directly with CPU tensors (it reads metadata only, before any launch),
the adapter's decision with a fake layer, check-model on a model folder written to tmp_path.
"""

from __future__ import annotations

import inspect
import json
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton", reason="the kernel entry imports the Triton kernels")

from caovan import model_check  # noqa: E402
from caovan.adapters import layer_support as layer_mod  # noqa: E402
from caovan.kernels.gdn_spec_decode import launcher, validation  # noqa: E402

FIXTURE = Path(__file__).parent / "data" / "model_configs" / "qwen3_6_27b" / "config.json"
JUDGES = ("kernel", "adapter", "check_model")


@dataclass(frozen=True)
class Edge:
    id: str
    H: int = 2
    HV: int = 4
    K: int = 32
    V: int = 32
    width: int = 4
    activation: str = "silu"
    activation_dtype: str = "float16"
    conv_state_dtype: str = "float16"
    ssm_state_dtype: str = "float32"
    #: For a refused edge: the envelope parameter at fault, the entry argument its ValueError names and the
    #: check-model check that fails. None: the edge is inside the envelope.
    parameter: str | None = None
    argument: str | None = None
    check: str | None = None
    judges: tuple[str, ...] = JUDGES


def _refused(id: str, parameter: str, argument: str | None, check: str | None, **shape) -> Edge:
    judges = tuple(j for j, seen in zip(JUDGES, (argument, True, check), strict=True) if seen)
    return Edge(id, parameter=parameter, argument=argument, check=check, judges=judges, **shape)


EDGES = [
    Edge("base"),
    # Head ratio HV/H.
    Edge("ratio_1", HV=2),
    Edge("ratio_3", HV=6),
    _refused("ratio_4", "num_v_heads", "A_log", "head_ratio", HV=8),
    _refused("ratio_not_divisible", "num_v_heads", "A_log", "head_ratio", HV=5),
    # K: 16..256 in multiples of 8; no power-of-two rule (the kernels pad K and mask).
    _refused("K_8", "head_k_dim", "head_k_dim", "key_head_dim", K=8),
    Edge("K_16", K=16),
    Edge("K_24_not_a_power_of_two", K=24),
    Edge("K_256", K=256),
    _refused("K_512", "head_k_dim", "head_k_dim", "key_head_dim", K=512),
    _refused("K_20_not_a_multiple_of_8", "head_k_dim", "head_k_dim", "key_head_dim", K=20),
    # V: multiples of 8.
    Edge("V_8", V=8),
    Edge("V_24_not_a_multiple_of_16", V=24),
    _refused("V_20_not_a_multiple_of_8", "head_v_dim", "head_v_dim", "value_head_dim", V=20),
    # Conv width 2..6.
    _refused("width_1", "conv_width", "conv_weight", "conv_width", width=1),
    Edge("width_2", width=2),
    Edge("width_6", width=6),
    _refused("width_7", "conv_width", "conv_weight", "conv_width", width=7),
    # Activation (the kernel entry has none to judge).
    Edge("activation_swish", activation="swish", judges=("adapter", "check_model")),
    _refused("activation_gelu", "activation", None, "activation", activation="gelu"),
    # Dtypes.
    Edge("activations_bfloat16", activation_dtype="bfloat16", conv_state_dtype="bfloat16"),
    Edge("activations_float32", activation_dtype="float32", conv_state_dtype="float32"),
    Edge("ssm_state_float16", ssm_state_dtype="float16"),
    Edge("ssm_state_bfloat16", ssm_state_dtype="bfloat16"),
    _refused("ssm_state_int8", "ssm_state_dtype", "ssm_state", "ssm_state_dtype", ssm_state_dtype="int8"),
    _refused("ssm_state_float64", "ssm_state_dtype", "ssm_state", "ssm_state_dtype", ssm_state_dtype="float64"),
    _refused("activations_float64", "activation_dtype", "mixed_qkv", None, activation_dtype="float64"),
    _refused("conv_state_float64", "conv_state_dtype", "conv_state", None, conv_state_dtype="float64"),
]


def _edges(judge: str) -> list:
    return [pytest.param(edge, id=edge.id) for edge in EDGES if judge in edge.judges]


def _dtype(name: str) -> torch.dtype:
    return getattr(torch, name)


def _fake_layer(edge: Edge, tp_size: int = 1) -> SimpleNamespace:
    """What the adapter reads of vLLM's GatedDeltaNetAttention, for a model with this edge's heads."""
    conv_dim = (2 * edge.H * edge.K + edge.HV * edge.V) // tp_size
    return SimpleNamespace(
        num_spec=3,
        tp_size=tp_size,
        num_k_heads=edge.H,
        num_v_heads=edge.HV,
        head_k_dim=edge.K,
        head_v_dim=edge.V,
        activation=edge.activation,
        # vLLM's conv1d weight is (conv_dim / tp, 1, width), in the model dtype
        conv1d=SimpleNamespace(
            weight=torch.empty(conv_dim, 1, edge.width, dtype=_dtype(edge.activation_dtype), device="meta")
        ),
        get_state_dtype=lambda: (_dtype(edge.conv_state_dtype), _dtype(edge.ssm_state_dtype)),
    )


def _adapter_reasons(edge: Edge, tp_size: int = 1) -> list[str]:
    """The adapter's reasons not to take the layer over, on an sm_75 GPU with spec decoding on."""
    return layer_mod.unsupported_reasons(_fake_layer(edge, tp_size), True, (7, 5))


def _validate(edge: Edge) -> validation.ValidatedCall:
    """The kernel entry's validation of one call with this edge's shape and dtypes (1 sequence of 2 tokens)."""
    H, HV, K, V, width, rows = edge.H, edge.HV, edge.K, edge.V, edge.width, 2
    act = _dtype(edge.activation_dtype)
    conv_dim = 2 * H * K + HV * V
    i32 = dict(dtype=torch.int32)
    return validation.validate(
        torch.zeros(rows, conv_dim, dtype=act),  # mixed_qkv
        torch.zeros(rows, HV, dtype=act),  # a
        torch.zeros(rows, HV, dtype=act),  # b
        torch.zeros(HV, dtype=act),  # A_log
        torch.zeros(HV, dtype=act),  # dt_bias
        torch.zeros(conv_dim, width, dtype=act),  # conv_weight
        None,  # conv_bias
        torch.zeros(3, conv_dim, max(width - 2 + rows, 1), dtype=_dtype(edge.conv_state_dtype)),
        torch.zeros(3, HV, V, K, dtype=_dtype(edge.ssm_state_dtype)),
        torch.tensor([0, rows], **i32),  # query_start_loc
        torch.tensor([[1, 2]], **i32),  # state_indices
        torch.tensor([1], **i32),  # num_accepted_tokens
        torch.zeros(rows, HV, V, dtype=act),  # out
        H,
        K,
        V,
        "vk",
        0,
        None,  # token_index
        None,  # launch_config
    )


def _check_model(edge: Edge, tmp_path: Path) -> model_check.ModelReport:
    config = json.loads(FIXTURE.read_text())
    config["text_config"].update(
        linear_num_key_heads=edge.H,
        linear_num_value_heads=edge.HV,
        linear_key_head_dim=edge.K,
        linear_value_head_dim=edge.V,
        linear_conv_kernel_dim=edge.width,
        hidden_act=edge.activation,
        mamba_ssm_dtype=edge.ssm_state_dtype,
    )
    folder = tmp_path / edge.id
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(config))
    return model_check.check_model_dir(folder)


@pytest.mark.parametrize("edge", _edges("adapter"))
def test_adapter_takes_the_layer_over_exactly_inside_the_envelope(edge):
    reasons = _adapter_reasons(edge)
    if edge.parameter is None:
        assert reasons == []
    else:
        assert len(reasons) == 1, reasons
        assert reasons[0].startswith(f"{edge.parameter}="), reasons
        assert reasons[0].parameter == edge.parameter


@pytest.mark.parametrize("edge", _edges("kernel"))
def test_kernel_entry_accepts_exactly_what_the_adapter_takes_over(edge, monkeypatch):
    monkeypatch.setattr(launcher, "INTERPRETED", True)  # CPU tensors pass the device check: validation only
    if edge.parameter is None:
        assert _validate(edge).HV == edge.HV
        return
    with pytest.raises(ValueError) as refused:
        _validate(edge)
    (reason,) = _adapter_reasons(edge)
    assert str(refused.value) == f"gdn_spec_decode: {edge.argument}: {reason}"


@pytest.mark.parametrize("edge", _edges("check_model"))
def test_check_model_calls_a_candidate_exactly_what_the_adapter_takes_over(edge, tmp_path):
    report = _check_model(edge, tmp_path)
    failed = {check.name: check.message for check in report.checks if check.status == model_check.STATUS_FAIL}
    if edge.parameter is None:
        assert report.is_candidate, failed
        return
    assert not report.is_candidate
    assert list(failed) == [edge.check]
    (reason,) = _adapter_reasons(edge)
    assert failed[edge.check].endswith(reason)


def test_every_envelope_parameter_has_a_refused_edge():
    from caovan.kernels.gdn_spec_decode.envelope import envelope_problems

    # num_k_heads is below 1 only per rank (tensor_parallel test below): a config cannot say 0 key heads.
    parameters = set(inspect.signature(envelope_problems).parameters) - {"num_k_heads"}
    assert {edge.parameter for edge in EDGES if edge.parameter} == parameters


def test_tensor_parallel_heads_are_judged_per_rank():
    # 8/4 heads over TP=2 are the 4/2 of the base edge per rank: taken over.
    assert _adapter_reasons(Edge("tp2", H=4, HV=8), tp_size=2) == []
    # 2/1 heads over TP=2 leave a rank no key head.
    assert _adapter_reasons(Edge("tp2_no_key_head", H=1, HV=2), tp_size=2) == [
        "num_k_heads=0: the kernels need at least one key head"
    ]
