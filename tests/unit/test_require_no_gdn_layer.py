"""Require mode when the model has no GDN layer (stand-in loader and model; the wrap itself is
checked against vLLM's real BaseModelLoader in tests/discovery)."""

from types import SimpleNamespace

import pytest

from caovan.adapters.gdn_linear_attn_v020_layer import check_required_model
from caovan.adapters.model_loader import wrap_load_model
from caovan.options import CaovanRequireError


class _Model:
    def __init__(self, planned: bool):
        self.layer = SimpleNamespace(_caovan_plan=object() if planned else None)

    def modules(self):
        return [self, self.layer]


def _configs(additional):
    model_config = SimpleNamespace(model="/models/llama")
    return SimpleNamespace(model_config=model_config, additional_config=additional), model_config


def test_require_without_any_gdn_layer_fails_start_up(monkeypatch):
    monkeypatch.delenv("CAOVAN_REQUIRE_TURBO3", raising=False)
    vllm_config, model_config = _configs({"caovan": True, "caovan_require_turbo3": True})
    with pytest.raises(CaovanRequireError, match="/models/llama has no GDN layer caovan can take over"):
        check_required_model(vllm_config, model_config, _Model(planned=False))


def test_require_with_a_taken_over_layer_passes(monkeypatch):
    monkeypatch.delenv("CAOVAN_REQUIRE_TURBO3", raising=False)
    vllm_config, model_config = _configs({"caovan": True, "caovan_require_turbo3": True})
    check_required_model(vllm_config, model_config, _Model(planned=True))


def test_draft_model_and_no_require_are_left_alone(monkeypatch):
    monkeypatch.delenv("CAOVAN_REQUIRE_TURBO3", raising=False)
    vllm_config, _ = _configs({"caovan": True, "caovan_require_turbo3": True})
    check_required_model(vllm_config, SimpleNamespace(model="draft"), _Model(planned=False))
    vllm_config, model_config = _configs({"caovan": True})
    check_required_model(vllm_config, model_config, _Model(planned=False))


def test_wrapped_loader_checks_after_building(monkeypatch):
    monkeypatch.delenv("CAOVAN_REQUIRE_TURBO3", raising=False)
    vllm_config, model_config = _configs({"caovan": True, "caovan_require_turbo3": True})

    def load_model(self, vllm_config, model_config, prefix=""):
        return _Model(planned=False)

    wrapped = wrap_load_model(load_model, after=check_required_model)
    assert wrapped._caovan_wrapped is load_model
    with pytest.raises(CaovanRequireError):
        wrapped(object(), vllm_config, model_config)
