"""A GPU older than sm_75 leaves the GDN layer to vLLM (or fails start-up under require), decided at construction:
the kernels' launch configuration has no entry for it and would raise at the first spec batch."""

import logging
from types import SimpleNamespace

import pytest

pytest.importorskip("triton", reason="the launch configurations live in the kernels package")

from caovan.adapters import layer_support as layer_mod  # noqa: E402
from caovan.adapters.families import GDN_LINEAR_ATTN_V020  # noqa: E402
from caovan.plugin.options import CaovanRequireError  # noqa: E402


def _layer(**overrides):
    """What the adapter reads of a vLLM GatedDeltaNetAttention (heads, conv weight, state dtypes), in range."""
    fields = dict(
        num_spec=3, tp_size=1, num_k_heads=16, num_v_heads=32, head_k_dim=128, head_v_dim=128, activation="silu"
    )
    fields.update(overrides)
    conv_weight = SimpleNamespace(shape=(12288, 1, 4), dtype="torch.float16")
    return SimpleNamespace(
        conv1d=SimpleNamespace(weight=conv_weight), get_state_dtype=lambda: ("torch.float16", "torch.float32"), **fields
    )


def test_gpu_older_than_sm75_is_unsupported():
    assert layer_mod.unsupported_reasons(_layer(), True, (7, 0)) == ["GPU sm70 is older than the kernels' sm_75 target"]
    assert layer_mod.unsupported_reasons(_layer(), True, (6, 1)) == ["GPU sm61 is older than the kernels' sm_75 target"]


def test_sm75_and_newer_are_supported():
    for capability in ((7, 5), (8, 6), (8, 9), (9, 0), (12, 0)):
        assert layer_mod.unsupported_reasons(_layer(), True, capability) == [], capability


def test_unreadable_capability_is_unsupported_and_cpu_needs_no_capability():
    assert layer_mod.unsupported_reasons(_layer(), True, None) == ["the GPU's compute capability could not be read"]
    assert layer_mod.unsupported_reasons(_layer(), False, None) == ["platform is not CUDA"]


@pytest.fixture
def on_sm70(monkeypatch):
    pytest.importorskip("vllm")
    import vllm.config
    from vllm.model_executor.layers.mamba import gdn_linear_attn  # noqa: F401 - imported on CPU before faking CUDA
    from vllm.platforms import current_platform

    monkeypatch.delenv("CAOVAN_REQUIRE_TURBO3", raising=False)
    monkeypatch.setattr(current_platform, "is_cuda", lambda: True)
    monkeypatch.setattr(layer_mod, "current_gpu_capability", lambda: (7, 0))
    monkeypatch.setattr(layer_mod, "_announced", set())

    def with_config(additional):
        config = SimpleNamespace(additional_config=additional)
        monkeypatch.setattr(vllm.config, "get_current_vllm_config", lambda: config)

    return with_config


def test_layer_on_sm70_stays_vllms_with_one_line(on_sm70, caovan_records):
    on_sm70({"caovan": True})
    assert layer_mod.plan_for_layer(_layer(), GDN_LINEAR_ATTN_V020) is None
    assert layer_mod.plan_for_layer(_layer(), GDN_LINEAR_ATTN_V020) is None
    assert len(caovan_records) == 1
    assert caovan_records[0].levelno == logging.WARNING
    assert "GPU sm70 is older than the kernels' sm_75 target" in caovan_records[0].getMessage()


def test_layer_on_sm70_fails_start_up_under_require(on_sm70):
    on_sm70({"caovan": True, "caovan_require_turbo3": True})
    with pytest.raises(CaovanRequireError, match="GPU sm70 is older than the kernels' sm_75 target"):
        layer_mod.plan_for_layer(_layer(), GDN_LINEAR_ATTN_V020)
