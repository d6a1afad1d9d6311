"""caovan's prefill hook logic on stand-ins: which calls it takes, what it hands back to vLLM, how it goes in on
each route and comes out again, and the option that turns it on. The kernels' numerics are the numerics and
kernel tiers' job; the real families' hooks are probed in the discovery tier."""

from __future__ import annotations

import sys
import types
from dataclasses import replace

import pytest

torch = pytest.importorskip("torch")

from caovan.adapters import prefill_hook  # noqa: E402
from caovan.adapters.families import GDN_LINEAR_ATTN_V020, QWEN3_NEXT_GDN_V016  # noqa: E402
from caovan.kernels.gdn_prefill.envelope import prefill_envelope_problems  # noqa: E402
from caovan.plugin import counters  # noqa: E402
from caovan.plugin.options import CaovanConfigError, parse_options  # noqa: E402


def _kwargs(**over):
    T, H, HV, K, V = 5, 1, 2, 16, 16
    base = {
        "q": torch.zeros(1, T, H, K, dtype=torch.float16),
        "k": torch.zeros(1, T, H, K, dtype=torch.float16),
        "v": torch.zeros(1, T, HV, V, dtype=torch.float16),
        "g": torch.zeros(1, T, HV),
        "beta": torch.zeros(1, T, HV, dtype=torch.float16),
        "initial_state": torch.zeros(1, HV, V, K),
        "output_final_state": True,
        "cu_seqlens": torch.tensor([0, T], dtype=torch.int32),
        "use_qk_l2norm_in_kernel": False,
    }
    base.update(over)
    return base


def test_vllm_calls_as_every_family_makes_them_are_taken():
    assert prefill_hook.call_problem((), _kwargs()) is None
    assert prefill_hook.call_problem((), _kwargs(head_first=False, chunk_indices=None, core_attn_out=None)) is None
    assert prefill_hook.call_problem((), _kwargs(aiter_prefill_metadata=None)) is None  # 0.33's extra, unset on CUDA


@pytest.mark.parametrize(
    ("args", "over", "why"),
    [
        ((1,), {}, "positional-arguments"),
        ((), {"aiter_prefill_metadata": object()}, "argument-aiter_prefill_metadata"),
        ((), {"head_first": True}, "head-first"),
        ((), {"q": torch.zeros(1, 5, 1, 16)}, "dtype"),
        ((), {"cu_seqlens": None, "q": torch.zeros(2, 5, 1, 16, dtype=torch.float16)}, "batch-without-cu_seqlens"),
        ((), {"initial_state": torch.zeros(1, 2, 16, 8)}, "initial-state-shape"),
    ],
)
def test_calls_outside_the_kernels_go_back_to_vllm_counted(args, over, why):
    counters.reset()
    calls = []
    result = prefill_hook.run_prefill(GDN_LINEAR_ATTN_V020, lambda *a, **k: calls.append((a, k)) or "vllm", args,
                                      _kwargs(**over))  # fmt: skip
    assert result == "vllm" and len(calls) == 1
    assert counters.snapshot()["fallbacks"] == {f"prefill-{why}": 1}
    assert "prefill" not in counters.snapshot()["dispatched"]


class _Op(torch.nn.Module):
    def forward(self, *args, **kwargs):
        return "in-tree"


class _Layer(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.chunk_gated_delta_rule = _Op()


def test_layer_route_wraps_the_layers_op_and_keeps_it_for_fallbacks():
    layer = _Layer()
    original = layer.chunk_gated_delta_rule
    assert prefill_hook.take_over_layer(layer, GDN_LINEAR_ATTN_V020)
    wrapped = layer.chunk_gated_delta_rule
    assert isinstance(wrapped, prefill_hook.CaovanChunkGatedDeltaRule) and wrapped.in_tree is original
    assert prefill_hook.take_over_layer(layer, GDN_LINEAR_ATTN_V020)  # a second time: nothing changes
    assert layer.chunk_gated_delta_rule is wrapped
    assert wrapped(1) == "in-tree"  # a positional call is vLLM's


def test_layer_route_refuses_a_layer_without_the_op():
    layer = torch.nn.Module()
    assert not prefill_hook.take_over_layer(layer, GDN_LINEAR_ATTN_V020)


@pytest.fixture
def module_family(monkeypatch):
    def chunk_gated_delta_rule(*args, **kwargs):
        return "in-tree"

    class Layer:
        def __init__(self):
            self.chunk_gated_delta_rule = None

    module = types.SimpleNamespace(chunk_gated_delta_rule=chunk_gated_delta_rule, Layer=Layer)
    monkeypatch.setitem(sys.modules, "caovan_test_fake_gdn_module", module)
    family = replace(QWEN3_NEXT_GDN_V016, gdn_module="caovan_test_fake_gdn_module", gdn_class="Layer")
    yield family, module, chunk_gated_delta_rule
    prefill_hook.uninstall_module_function(family)


def test_function_route_wraps_the_module_global_once_and_puts_it_back(module_family):
    family, module, original = module_family
    assert prefill_hook.take_over_layer(object(), family)
    wrapper = module.chunk_gated_delta_rule
    assert wrapper is not original and wrapper._caovan_prefill_original is original
    prefill_hook.take_over_layer(object(), family)
    assert module.chunk_gated_delta_rule is wrapper  # not wrapped twice
    assert wrapper(1) == "in-tree"
    assert prefill_hook.uninstall_module_function(family)
    assert module.chunk_gated_delta_rule is original
    assert not prefill_hook.uninstall_module_function(family)


def test_hook_probe_names_what_is_missing(module_family):
    family, module, _ = module_family
    assert prefill_hook.hook_problem(family) is None
    del module.chunk_gated_delta_rule
    assert "has no chunk_gated_delta_rule" in prefill_hook.hook_problem(family)
    layer_route = replace(family, prefill_route="layer_attribute")
    assert prefill_hook.hook_problem(layer_route) is None  # Layer.__init__ assigns self.chunk_gated_delta_rule
    assert "does not import" in prefill_hook.hook_problem(replace(family, gdn_module="caovan_no_such_module"))


def test_the_prefill_option_needs_caovan_on():
    assert parse_options({"caovan": True, "caovan_prefill": True}).prefill
    assert not parse_options({"caovan": True}).prefill
    with pytest.raises(CaovanConfigError, match="'caovan_prefill'=true asks for caovan's GDN prefill"):
        parse_options({"caovan_prefill": True})
    with pytest.raises(CaovanConfigError, match="'caovan_prefill' must be true or false"):
        parse_options({"caovan": True, "caovan_prefill": "yes"})


def test_prefill_envelope():
    ok = {"num_k_heads": 8, "num_v_heads": 24, "head_k_dim": 128, "head_v_dim": 128}
    assert prefill_envelope_problems(**ok, activation_dtype="torch.float16", capability=(7, 5)) == []
    assert prefill_envelope_problems(**ok, activation_dtype="torch.bfloat16", capability=(9, 0)) == []
    (why,) = prefill_envelope_problems(**ok, activation_dtype="torch.bfloat16", capability=(7, 5))
    assert "no bf16 tensor cores" in why
    (why,) = prefill_envelope_problems(**{**ok, "head_k_dim": 256}, activation_dtype="float16")
    assert "head_k_dim 256" in why
    (why,) = prefill_envelope_problems(**ok, activation_dtype="float32")
    assert "float16 or bfloat16" in why
