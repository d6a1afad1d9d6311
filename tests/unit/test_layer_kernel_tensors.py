"""``kernel_tensors``: the layer tensors caovan's spec step passes: the weights' derived once and re-derived when a
source changes, the cache states read on every call and never kept.

A stand-in layer built from ``torch.nn`` (the attributes vLLM 0.21's ``GatedDeltaNetAttention`` has: ``A_log``,
``dt_bias``, ``conv1d`` with its weight unsqueezed to (dim, 1, width), ``kv_cache`` = (conv, ssm)); the real
layer runs this path in tests/layer_gpu.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import gc  # noqa: E402
import weakref  # noqa: E402

from torch import nn  # noqa: E402

from caovan.adapters.layer_support import kernel_tensors  # noqa: E402

DIM, WIDTH, HV = 12, 4, 3


class StandInLayer(nn.Module):
    def __init__(self, bias: bool = False) -> None:
        super().__init__()
        self.conv1d = nn.Linear(WIDTH, DIM, bias=bias)
        self.conv1d.weight.data = self.conv1d.weight.data.unsqueeze(1)  # as vLLM does: (dim, 1, width)
        self.A_log = nn.Parameter(torch.randn(HV))
        self.dt_bias = nn.Parameter(torch.randn(HV))
        self.kv_cache = self.new_cache()

    @staticmethod
    def new_cache() -> tuple:
        return torch.randn(5, WIDTH + 2, DIM), torch.randn(5, HV, 8, 8)  # conv state (blocks, state_len, dim)


def _check(layer: StandInLayer, got: tuple, conv_dim_first: bool) -> None:
    a_log, dt_bias, weight, bias, conv_state, ssm_state = got
    assert a_log is layer.A_log and dt_bias is layer.dt_bias and bias is layer.conv1d.bias
    assert weight.shape == (DIM, WIDTH) and weight.data_ptr() == layer.conv1d.weight.data_ptr()
    assert torch.equal(weight, layer.conv1d.weight[:, 0, :])
    expected_conv = layer.kv_cache[0] if conv_dim_first else layer.kv_cache[0].transpose(-1, -2)
    assert conv_state.shape == expected_conv.shape and conv_state.stride() == expected_conv.stride()
    assert conv_state.data_ptr() == layer.kv_cache[0].data_ptr()
    assert ssm_state is layer.kv_cache[1]


@pytest.mark.parametrize("conv_dim_first", [False, True])
@pytest.mark.parametrize("bias", [False, True])
def test_derived_once_then_reused(conv_dim_first, bias):
    layer = StandInLayer(bias=bias)
    first = kernel_tensors(layer, conv_dim_first)
    _check(layer, first, conv_dim_first)
    again = kernel_tensors(layer, conv_dim_first)
    assert all(a is b for a, b in zip(again[:4], first[:4], strict=True))  # cache hit: the very same weight views
    _check(layer, again, conv_dim_first)


@pytest.mark.parametrize("conv_dim_first", [False, True])
def test_a_kv_cache_vllm_drops_is_freed_without_another_call(conv_dim_first):
    """vLLM 0.21+ captures graphs on a minimal profiling KV cache, drops it and allocates the real one from the
    memory that frees: a cache state kept by caovan between calls pinned it (OOM on a lent H100, vLLM 0.25.0)."""
    layer = StandInLayer()
    kernel_tensors(layer, conv_dim_first)
    dropped = [weakref.ref(t) for t in layer.kv_cache]
    layer.kv_cache = torch.tensor([])  # as vLLM's _cleanup_profiling_kv_cache does
    gc.collect()
    assert all(ref() is None for ref in dropped), "a dropped KV cache tensor is still referenced"


@pytest.mark.parametrize(
    "change",
    [
        pytest.param(lambda layer: setattr(layer, "kv_cache", layer.new_cache()), id="kv_cache rebound"),
        pytest.param(lambda layer: setattr(layer, "A_log", nn.Parameter(torch.randn(HV))), id="A_log replaced"),
        pytest.param(lambda layer: setattr(layer, "dt_bias", nn.Parameter(torch.randn(HV))), id="dt_bias replaced"),
        pytest.param(
            lambda layer: setattr(layer.conv1d.weight, "data", torch.randn(DIM, 1, WIDTH)), id="weight .data assigned"
        ),
        pytest.param(
            lambda layer: setattr(layer.conv1d, "weight", nn.Parameter(torch.randn(DIM, 1, WIDTH))),
            id="weight replaced",
        ),
        pytest.param(
            lambda layer: setattr(layer.kv_cache[0], "data", torch.randn(5, WIDTH + 2, DIM)),
            id="conv cache .data assigned",
        ),
    ],
)
def test_a_changed_source_is_seen(change):
    layer = StandInLayer()
    before = kernel_tensors(layer, False)
    _check(layer, before, False)
    change(layer)
    after = kernel_tensors(layer, False)
    _check(layer, after, False)


def test_parameters_kept_elsewhere_take_the_attribute_path():
    """A conv module exposing ``weight`` as a property (not in ``_parameters``) still gets the right tensors."""

    class PropertyConv(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.register_buffer("packed", torch.randn(DIM, 1, WIDTH))
            self.bias = None

        @property
        def weight(self) -> torch.Tensor:
            return self.packed

    layer = StandInLayer()
    layer.conv1d = PropertyConv()
    got = kernel_tensors(layer, False)
    assert got[2].shape == (DIM, WIDTH) and got[2].data_ptr() == layer.conv1d.packed.data_ptr()
    assert got[3] is None and got[0] is layer.A_log
    assert "_caovan_weight_tensors" not in layer.__dict__


class DispatchingParameter(nn.Parameter):
    """Shaped like vLLM's ``BasevLLMParameter``: a ``__torch_function__`` override on a Parameter subclass."""

    calls = 0

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        cls.calls += 1
        return super().__torch_function__(func, types, args, kwargs or {})


def test_vllm_style_parameter_weight_is_read_without_dispatch_and_changes_are_seen():
    layer = StandInLayer()
    layer.conv1d.weight = DispatchingParameter(torch.randn(DIM, 1, WIDTH))
    first = kernel_tensors(layer, False)
    _check(layer, first, False)
    DispatchingParameter.calls = 0
    assert kernel_tensors(layer, False)[2] is first[2]
    assert DispatchingParameter.calls == 0  # the cache key read the weight's pointer with the dispatch off
    layer.conv1d.weight.data = torch.randn(DIM, 1, WIDTH)
    after = kernel_tensors(layer, False)
    assert after[2] is not first[2]
    _check(layer, after, False)


def test_conv_kept_outside_the_submodules_takes_the_attribute_path():
    layer = StandInLayer()
    conv = layer.conv1d
    del layer._modules["conv1d"]
    object.__setattr__(layer, "conv1d", conv)  # a plain attribute, not a registered submodule
    got = kernel_tensors(layer, False)
    assert got[2].shape == (DIM, WIDTH) and got[2].data_ptr() == conv.weight.data_ptr()
    assert "_caovan_weight_tensors" not in layer.__dict__


def test_a_kv_cache_per_virtual_engine_is_read_at_the_engine_given():
    # vLLM before 0.19 binds kv_cache as one [conv, ssm] per virtual engine.
    layer = StandInLayer()
    engines = [StandInLayer.new_cache(), StandInLayer.new_cache()]
    layer.kv_cache = engines
    got = kernel_tensors(layer, False, 1)
    assert got[4].data_ptr() == engines[1][0].data_ptr() and got[5] is engines[1][1]


def test_an_a_log_in_the_model_dtype_is_handed_over_as_float32_and_follows_in_place_updates():
    layer = StandInLayer()
    layer.A_log = nn.Parameter(torch.randn(HV).to(torch.bfloat16))
    first = kernel_tensors(layer, False)
    assert first[0].dtype == torch.float32 and torch.equal(first[0], layer.A_log.float())
    assert kernel_tensors(layer, False)[0] is first[0]  # cached while nothing changed
    with torch.no_grad():
        layer.A_log.add_(1)  # a weight update in place: same object, same storage, new version
    again = kernel_tensors(layer, False)
    assert again[0] is not first[0] and torch.equal(again[0], layer.A_log.float())
