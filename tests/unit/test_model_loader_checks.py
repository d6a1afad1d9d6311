"""The inert plugin still checks the caovan options when vLLM loads the model (stand-in loader module; the wrap of
vLLM's real BaseModelLoader is checked in tests/discovery)."""

import sys
from types import ModuleType, SimpleNamespace

import pytest

import caovan.adapters
from caovan.adapters.registry import Selection
from caovan.plugin import guards, model_loader, startup
from caovan.plugin.options import CaovanConfigError, CaovanRequireError


class _Loader:
    def load_model(self, vllm_config, model_config, prefix=""):
        return "model"


@pytest.fixture
def fake_loader(monkeypatch):
    # register() applies the environment guards: give them an environment of their own, never this process's.
    apply_guards = guards.apply_guards
    monkeypatch.setattr(guards, "apply_guards", lambda environ=None: apply_guards({}))
    monkeypatch.setattr(guards, "nvml_capabilities", lambda environ=None: [])
    module = ModuleType(model_loader.LOADER_MODULE)

    class BaseModelLoader(_Loader):
        pass

    module.BaseModelLoader = BaseModelLoader
    monkeypatch.setitem(sys.modules, model_loader.LOADER_MODULE, module)
    return BaseModelLoader


@pytest.fixture
def inert_plugin(monkeypatch, fake_loader):
    monkeypatch.setattr(startup, "_state", startup._PluginState())
    monkeypatch.delenv("CAOVAN_REQUIRE_TURBO3", raising=False)
    monkeypatch.setattr(
        caovan.adapters, "select_adapter", lambda: Selection("9.9.9", None, "no GDN family matches vLLM 9.9.9: x")
    )
    startup.register()
    return fake_loader


def _load(loader_cls, additional, target=True):
    model_config = SimpleNamespace(model="/models/qwen")
    vllm_config = SimpleNamespace(model_config=model_config, additional_config=additional)
    return loader_cls().load_model(vllm_config, model_config if target else SimpleNamespace(model="draft"))


def test_inert_plugin_enforces_require_from_the_config_key(inert_plugin):
    with pytest.raises(CaovanRequireError, match="plugin is inert: no GDN family matches vLLM 9.9.9"):
        _load(inert_plugin, {"caovan": True, "caovan_require_turbo3": True})


def test_inert_plugin_reports_malformed_keys(inert_plugin):
    with pytest.raises(CaovanConfigError, match="key 'caovan' must be true or false, got str 'yes'"):
        _load(inert_plugin, {"caovan": "yes"})


def test_inert_plugin_without_require_loads_and_drafts_are_skipped(inert_plugin):
    assert _load(inert_plugin, {"caovan": True}) == "model"
    assert _load(inert_plugin, None) == "model"
    assert _load(inert_plugin, {"caovan": "yes"}, target=False) == "model"


def test_install_failure_also_gets_the_inert_check(monkeypatch, fake_loader):
    class Broken:
        family_id = "gdn-linear-attn-v020"

        def install(self):
            model_loader.install(after=lambda *a: None)  # the family's check went in before the failure
            raise RuntimeError("GatedDeltaNetAttention is already replaced by other.Plugin")

    monkeypatch.setattr(startup, "_state", startup._PluginState())
    monkeypatch.delenv("CAOVAN_REQUIRE_TURBO3", raising=False)
    monkeypatch.setattr(caovan.adapters, "select_adapter", lambda: Selection("0.21.0", Broken(), "family=x"))
    startup.register()
    with pytest.raises(CaovanRequireError, match="installing its override failed"):
        _load(fake_loader, {"caovan": True, "caovan_require_turbo3": True})


def test_install_wraps_once_replaces_checks_and_uninstall_restores(fake_loader):
    original = fake_loader.load_model
    check = startup.inert_check("x")
    assert model_loader.install(before=check)
    wrapped = fake_loader.load_model
    assert wrapped._caovan_wrapped is original
    assert model_loader.install(before=check) and fake_loader.load_model is wrapped
    assert model_loader.install(after=check)  # another set of checks: replaces, never stacks
    assert fake_loader.load_model._caovan_wrapped is original
    assert model_loader.uninstall() and fake_loader.load_model is original
    assert not model_loader.uninstall()


def test_a_missing_or_different_loader_is_skipped_quietly(monkeypatch, fake_loader):
    def load_model(self, config):
        return None

    monkeypatch.setattr(fake_loader, "load_model", load_model)
    assert not model_loader.install(before=startup.inert_check("x"))
    monkeypatch.delattr(sys.modules[model_loader.LOADER_MODULE], "BaseModelLoader")
    assert not model_loader.install(before=startup.inert_check("x"))
    monkeypatch.setitem(sys.modules, model_loader.LOADER_MODULE, None)  # import fails
    assert not model_loader.install(before=startup.inert_check("x"))


def test_a_config_object_of_another_plugin_is_not_caovans_business(inert_plugin):
    # vLLM types additional_config as dict | SupportsHash: an object with compute_hash() holds no caovan keys.
    class PlatformConfig:
        def compute_hash(self) -> str:
            return "h"

    assert _load(inert_plugin, PlatformConfig()) == "model"
    with pytest.raises(CaovanConfigError, match="must be a JSON object, got list"):
        _load(inert_plugin, ["caovan"])


def test_loaders_with_their_own_load_model_get_the_checks_once_per_load(fake_loader):
    # vLLM's GGUF and tensorizer loaders (among others) override load_model and never reach the base's.
    calls = []

    class OwnLoader(fake_loader):  # like GGUFModelLoader
        def load_model(self, vllm_config, model_config, prefix=""):
            return "own"

    class ChainedLoader(OwnLoader):  # a loader that defers to its parent's load_model
        def load_model(self, vllm_config, model_config, prefix=""):
            return "chained " + super().load_model(vllm_config, model_config, prefix)

    class OtherShape(fake_loader):  # not a load_model vLLM calls that way: left alone
        def load_model(self, config):
            return "other"

    original_other = OtherShape.load_model
    assert model_loader.install(before=lambda vllm_config, model_config: calls.append(model_config.model))
    assert _load(OwnLoader, None) == "own" and _load(ChainedLoader, None) == "chained own"
    assert calls == ["/models/qwen", "/models/qwen"]  # one check per load, the chained one included
    assert OtherShape.load_model is original_other
    assert model_loader.uninstall()
    assert not hasattr(OwnLoader.load_model, "_caovan_wrapped") and not hasattr(
        ChainedLoader.load_model, "_caovan_wrapped"
    )


def test_inert_plugin_enforces_require_through_a_loader_of_its_own(monkeypatch, fake_loader):
    class OwnLoader(fake_loader):
        def load_model(self, vllm_config, model_config, prefix=""):
            return "own"

    monkeypatch.setattr(startup, "_state", startup._PluginState())
    monkeypatch.delenv("CAOVAN_REQUIRE_TURBO3", raising=False)
    monkeypatch.setattr(caovan.adapters, "select_adapter", lambda: Selection("9.9.9", None, "no GDN family: x"))
    startup.register()
    with pytest.raises(CaovanRequireError, match="plugin is inert"):
        _load(OwnLoader, {"caovan": True, "caovan_require_turbo3": True})


def test_loaders_defined_after_install_get_the_checks(fake_loader):
    # register_model_loader in the user's code or another plugin: the class does not exist when caovan installs.
    calls = []

    class Earlier(fake_loader):
        def __init_subclass__(cls, tag="", **kwargs):
            super().__init_subclass__(**kwargs)
            cls.tag = tag

    assert model_loader.install(before=lambda vllm_config, model_config: calls.append(model_config.model))

    class Later(Earlier, tag="later"):
        def load_model(self, vllm_config, model_config, prefix=""):
            return "later"

    class Inherits(fake_loader):  # no load_model of its own: the base's wrapped one already checks
        pass

    assert Later.tag == "later"  # a subclass's own __init_subclass__ still runs
    assert _load(Later, None) == "later" and _load(Inherits, None) == "model"
    assert calls == ["/models/qwen", "/models/qwen"]
    assert model_loader.uninstall()
    assert not hasattr(Later.load_model, "_caovan_wrapped") and "__init_subclass__" not in fake_loader.__dict__

    class AfterUninstall(fake_loader):
        def load_model(self, vllm_config, model_config, prefix=""):
            return "after"

    assert not hasattr(AfterUninstall.load_model, "_caovan_wrapped")


def test_a_base_init_subclass_of_its_own_still_runs_and_comes_back(fake_loader):
    seen = []

    def own(cls, **kwargs):
        seen.append(cls.__name__)

    fake_loader.__init_subclass__ = classmethod(own)
    assert model_loader.install(before=startup.inert_check("x"))

    class Later(fake_loader):
        def load_model(self, vllm_config, model_config, prefix=""):
            return "later"

    assert seen == ["Later"] and hasattr(Later.load_model, "_caovan_wrapped")
    assert model_loader.uninstall()
    assert fake_loader.__dict__["__init_subclass__"].__func__ is own


def test_uninstall_leaves_an_inherited_load_model_inherited(fake_loader):
    # The stand-in BaseModelLoader inherits load_model from a mixin: uninstall used to leave a copy of it in the
    # class's own namespace, so vLLM was not put back exactly (a later patch of the mixin no longer reached it).
    assert "load_model" not in fake_loader.__dict__
    assert model_loader.install(before=startup.inert_check("x"))
    assert model_loader.install(after=lambda *a: None)  # replacing the checks keeps what was vLLM's
    assert model_loader.uninstall()
    assert "load_model" not in fake_loader.__dict__
    assert fake_loader.load_model is _Loader.load_model


def test_a_load_model_whose_parameters_changed_order_is_not_wrapped(monkeypatch, fake_loader):
    # The wrapper binds (vllm_config, model_config) by position: were vLLM's order swapped, every load would look
    # like an auxiliary model's and the require-mode checks would be skipped without a word.
    def load_model(self, model_config, vllm_config, prefix=""):
        return "model"

    monkeypatch.setattr(fake_loader, "load_model", load_model)
    assert not model_loader.install(before=startup.inert_check("x"))
    assert fake_loader.load_model is load_model
