"""Require mode, and the enabled-but-idle line, when the model has no GDN layer (stand-in loader and model; the
wrap itself is checked against vLLM's real BaseModelLoader in tests/discovery)."""

import logging
from types import SimpleNamespace

import pytest

from caovan.adapters import layer_support as layer_mod
from caovan.adapters.families import FAMILIES
from caovan.adapters.layer_support import check_required_model
from caovan.plugin.model_loader import wrap_load_model
from caovan.plugin.options import CaovanRequireError

FAMILY = FAMILIES[0]


class _Model:
    """A model with one GDN layer of caovan's (taken over or not)."""

    def __init__(self, planned: bool):
        self.layer = SimpleNamespace(_caovan_plan=object() if planned else None, _caovan_family=FAMILY)

    def modules(self):
        return [self, self.layer]


class _LlamaForCausalLM:
    """A model without any GDN layer."""

    def modules(self):
        return [self, SimpleNamespace()]


def _configs(additional):
    model_config = SimpleNamespace(model="/models/llama")
    return SimpleNamespace(model_config=model_config, additional_config=additional), model_config


@pytest.fixture(autouse=True)
def guard_installs(monkeypatch):
    """The uniform-decode guard's and the graph-padding patch's installs (recorded, not done: the real ones wrap
    vLLM's GPUModelRunner and GDN metadata builder)."""
    calls = []
    monkeypatch.setattr(layer_mod.uniform_decode_guard, "install", lambda config, family: calls.append(config))
    monkeypatch.setattr(layer_mod.graph_padding_patch, "install", lambda family: calls.append(family))
    return calls


def test_a_gdn_model_gets_both_patches_and_a_dense_one_does_not(guard_installs):
    vllm_config, model_config = _configs({"caovan": True})
    check_required_model(vllm_config, model_config, _LlamaForCausalLM())
    assert guard_installs == []
    for planned in (True, False):  # whoever runs its GDN layers, caovan or vLLM
        check_required_model(vllm_config, model_config, _Model(planned=planned))
    assert guard_installs == [FAMILY, vllm_config] * 2
    off, model_config = _configs({"caovan": False})
    check_required_model(off, model_config, _Model(planned=True))
    assert guard_installs == [FAMILY, vllm_config] * 2


def test_require_without_any_gdn_layer_fails_start_up(monkeypatch):
    monkeypatch.delenv("CAOVAN_REQUIRE_TURBO3", raising=False)
    vllm_config, model_config = _configs({"caovan": True, "caovan_require_turbo3": True})
    with pytest.raises(CaovanRequireError, match="/models/llama has no GDN layer caovan can take over"):
        check_required_model(vllm_config, model_config, _Model(planned=False))


def test_require_with_a_taken_over_layer_passes(monkeypatch):
    monkeypatch.delenv("CAOVAN_REQUIRE_TURBO3", raising=False)
    vllm_config, model_config = _configs({"caovan": True, "caovan_require_turbo3": True})
    check_required_model(vllm_config, model_config, _Model(planned=True))


def test_draft_model_and_no_require_are_left_alone(monkeypatch, caovan_records):
    monkeypatch.delenv("CAOVAN_REQUIRE_TURBO3", raising=False)
    vllm_config, _ = _configs({"caovan": True, "caovan_require_turbo3": True})
    check_required_model(vllm_config, SimpleNamespace(model="draft"), _Model(planned=False))
    check_required_model(vllm_config, SimpleNamespace(model="draft"), _LlamaForCausalLM())
    # A GDN layer that stays vLLM's already said why when it was built: nothing more here.
    vllm_config, model_config = _configs({"caovan": True})
    check_required_model(vllm_config, model_config, _Model(planned=False))
    assert caovan_records == []


def test_enabled_without_any_gdn_layer_says_so_once(monkeypatch, caovan_records):
    monkeypatch.delenv("CAOVAN_REQUIRE_TURBO3", raising=False)
    monkeypatch.setattr(layer_mod, "_announced", set())
    vllm_config, model_config = _configs({"caovan": True})
    check_required_model(vllm_config, model_config, _LlamaForCausalLM())
    check_required_model(vllm_config, model_config, _LlamaForCausalLM())
    assert [r.levelno for r in caovan_records] == [logging.WARNING]
    assert caovan_records[0].getMessage() == (
        "caovan_sm75_turbo3: caovan is enabled but /models/llama has no GDN layer caovan can take over "
        "(model class _LlamaForCausalLM): vLLM's own path runs"
    )


def test_not_enabled_without_any_gdn_layer_stays_silent(monkeypatch, caovan_records):
    monkeypatch.delenv("CAOVAN_REQUIRE_TURBO3", raising=False)
    monkeypatch.setattr(layer_mod, "_announced", set())
    for additional in (None, {}, {"caovan": False}, {"gdn_prefill_backend": "x"}):
        vllm_config, model_config = _configs(additional)
        check_required_model(vllm_config, model_config, _LlamaForCausalLM())
    assert caovan_records == []


def test_wrapped_loader_checks_after_building(monkeypatch):
    monkeypatch.delenv("CAOVAN_REQUIRE_TURBO3", raising=False)
    vllm_config, model_config = _configs({"caovan": True, "caovan_require_turbo3": True})

    def load_model(self, vllm_config, model_config, prefix=""):
        return _Model(planned=False)

    wrapped = wrap_load_model(load_model, after=check_required_model)
    assert wrapped._caovan_wrapped is load_model
    with pytest.raises(CaovanRequireError):
        wrapped(object(), vllm_config, model_config)


def test_draft_model_method_draft_is_not_the_served_model(monkeypatch, caovan_records):
    # vLLM's draft_model method loads the draft with a vllm_config whose model_config *is* the draft's
    # (DraftModelProposer._create_draft_vllm_config); only speculative_config.draft_model_config tells them apart.
    monkeypatch.delenv("CAOVAN_REQUIRE_TURBO3", raising=False)
    monkeypatch.setattr(layer_mod, "_announced", set())
    draft = SimpleNamespace(model="/models/llama-draft")
    for additional in ({"caovan": True, "caovan_require_turbo3": True}, {"caovan": True}):
        draft_vllm_config = SimpleNamespace(
            model_config=draft,
            speculative_config=SimpleNamespace(draft_model_config=draft),
            additional_config=additional,
        )
        check_required_model(draft_vllm_config, draft, _LlamaForCausalLM())
    assert caovan_records == []
