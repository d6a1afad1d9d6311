"""The class-patch route (vLLM 0.12 - 0.18): caovan wraps the layer class's own ``__init__`` in place, reversibly.

A stand-in layer class plays vLLM's ``Qwen3NextGatedDeltaNet`` (a plain class, a subclass that inherits everything,
as 0.18's Qwen3.5 layer does, and one with a core of its own); the record is F5's with the stand-in's module. What
is checked here is caovan's own logic: the real classes go through the same install in the discovery tier.
"""

from __future__ import annotations

import sys
import types
from dataclasses import replace
from types import SimpleNamespace

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("vllm", reason="the override imports vLLM's forward context when it is built")

from caovan.adapters import override  # noqa: E402
from caovan.adapters.families import QWEN3_NEXT_GDN_V010, QWEN3_NEXT_GDN_V018  # noqa: E402
from caovan.adapters.layer_support import LayerPlan  # noqa: E402

MODULE = "caovan_test_fake_qwen3_next"
PLAN = LayerPlan(num_k_heads=1, num_v_heads=2, head_k_dim=4, head_v_dim=4, conv_dim_first=False)


class FakeGdn(torch.nn.Module):
    def __init__(self, prefix: str = "layer.0") -> None:
        super().__init__()
        self.prefix = prefix
        self.A_log = torch.nn.Parameter(torch.zeros(2, dtype=torch.bfloat16))  # the model's dtype, as up to 0.18
        self.dt_bias = torch.nn.Parameter(torch.zeros(2))
        self.conv1d = torch.nn.Linear(4, 24, bias=False)
        self.conv1d.weight.data = self.conv1d.weight.data.unsqueeze(1)

    def _forward_core(self, mixed_qkv, b, a, core_attn_out):
        return "in-tree"


class Qwen35Like(FakeGdn):
    pass


class OwnCore(FakeGdn):
    def _forward_core(self, mixed_qkv, b, a, core_attn_out):
        return "its own"


@pytest.fixture
def family(monkeypatch):
    """F5's record on the stand-in module; the model-loader hook and the layer decision faked (caovan enabled)."""
    monkeypatch.setitem(sys.modules, MODULE, types.SimpleNamespace(FakeGdn=FakeGdn))
    monkeypatch.setattr(override.model_loader, "install", lambda after: True)
    monkeypatch.setattr(override.model_loader, "uninstall", lambda: None)
    monkeypatch.setattr(override, "plan_for_layer", lambda layer, family: PLAN)
    monkeypatch.setattr(override, "prefill_plan_for_layer", lambda layer, family: False)
    record = replace(QWEN3_NEXT_GDN_V018, gdn_module=MODULE, gdn_class="FakeGdn")
    original = FakeGdn.__dict__["__init__"]
    yield record
    override.uninstall(record)
    assert FakeGdn.__dict__["__init__"] is original


def test_install_wraps_init_in_place_and_uninstall_restores_it(family):
    original = FakeGdn.__dict__["__init__"]
    assert override.install(family) == "installed"
    wrapper = FakeGdn.__dict__["__init__"]
    assert wrapper is not original and wrapper._caovan_original is original
    assert override.install(family) == "already installed"
    assert FakeGdn.__dict__["__init__"] is wrapper
    assert override.uninstall(family) is True
    assert FakeGdn.__dict__["__init__"] is original
    assert override.INIT_WRAPPER_ATTRIBUTE not in FakeGdn.__dict__
    assert override.uninstall(family) is False


def test_the_class_and_a_subclass_that_inherits_its_core_are_taken_over(family):
    override.install(family)
    for cls in (FakeGdn, Qwen35Like):
        layer = cls()
        assert layer._caovan_plan is PLAN
        assert "_forward_core" in vars(layer) and layer._forward_core.__self__ is layer
    assert FakeGdn._forward_core(FakeGdn(), None, None, None, None) == "in-tree"  # the class keeps its core


def test_a_subclass_with_a_core_of_its_own_is_left_to_vllm(family):
    override.install(family)
    layer = OwnCore()
    assert layer._caovan_plan is None and "_forward_core" not in vars(layer)
    assert layer._forward_core(None, None, None, None) == "its own"


def test_the_spec_step_reads_kv_cache_at_the_virtual_engine_and_a_log_in_float32(family, monkeypatch):
    import vllm.forward_context

    import caovan.kernels.gdn_spec_decode as kernels

    calls = []
    monkeypatch.setattr(kernels, "gdn_spec_decode", lambda *args, **kwargs: calls.append((args, kwargs)))
    engines = [(torch.zeros(3, 6, 24), torch.zeros(3, 2, 4, 4)), (torch.ones(3, 6, 24), torch.ones(3, 2, 4, 4))]
    md = SimpleNamespace(
        spec_sequence_masks=torch.ones(1, dtype=torch.bool), num_prefills=0, num_decodes=0, num_spec_decodes=1,
        spec_query_start_loc=torch.tensor([0, 2]), spec_state_indices_tensor=torch.tensor([[1, 2]]),
        num_accepted_tokens=torch.tensor([1]),
    )  # fmt: skip
    context = SimpleNamespace(attn_metadata={"layer.0": md}, virtual_engine=1)
    monkeypatch.setattr(vllm.forward_context, "get_forward_context", lambda: context)
    override.install(family)
    layer = FakeGdn()
    layer.kv_cache = engines
    layer._forward_core(torch.zeros(2, 24), torch.zeros(2, 2), torch.zeros(2, 2), torch.zeros(2, 2, 4))
    ((args, kwargs),) = calls
    a_log, conv_state, ssm_state = args[3], args[7], args[8]
    assert a_log.dtype == torch.float32 and torch.equal(a_log, layer.A_log.float())
    assert conv_state.data_ptr() == engines[1][0].data_ptr() and conv_state.shape == (3, 24, 6)
    assert ssm_state is engines[1][1]
    assert kwargs["ssm_layout"] == "vk" and kwargs["null_slot_max"] == -1


def test_a_refused_family_installs_nothing_and_says_why(family):
    refused = replace(QWEN3_NEXT_GDN_V010, gdn_module=MODULE, gdn_class="FakeGdn")
    original = FakeGdn.__dict__["__init__"]
    with pytest.raises(RuntimeError, match="caovan does not serve qwen3-next-gdn-v010: the op runs the whole layer"):
        override.install(refused)
    assert FakeGdn.__dict__["__init__"] is original


def test_the_layer_rig_takes_a_layer_over_once_where_install_already_wrapped_init(family, monkeypatch):
    """The rig builds caovan's layers with its own ``__init__`` wrapper; over ``install()``'s it must not stack."""
    from caovan.bench.vllm_layer_rig.layer import _init_entry

    plans = []
    monkeypatch.setattr(override, "plan_for_layer", lambda layer, family: plans.append(layer) or PLAN)
    override.install(family)
    installed = FakeGdn.__dict__["__init__"]
    with _init_entry(FakeGdn, family, caovan=True):
        FakeGdn()
    assert len(plans) == 1
    with _init_entry(FakeGdn, family, caovan=False):
        assert not hasattr(FakeGdn(), "_caovan_plan")
    assert FakeGdn.__dict__["__init__"] is installed and len(plans) == 1
