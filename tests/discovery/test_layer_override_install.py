"""Installing caovan's layer override against the real vLLM classes (tier `discovery`, no GPU needed)."""

import pytest

from caovan.adapters import select_adapter

pytestmark = pytest.mark.discovery


@pytest.fixture
def installed():
    """The installed vLLM's family adapter, vLLM's OOT registry (its entry for the family saved and restored), the
    family record and its in-tree layer class. Every family this vLLM can land in is a register_oot family."""
    selection = select_adapter()
    assert selection.adapter is not None, selection.reason
    from vllm.model_executor.custom_op import op_registry_oot

    from caovan.adapters.override import in_tree_class

    family = selection.adapter.family
    saved = op_registry_oot.pop(family.oot_key, None)
    yield selection.adapter, op_registry_oot, family, in_tree_class(family)
    op_registry_oot.pop(family.oot_key, None)
    if saved is not None:
        op_registry_oot[family.oot_key] = saved


def test_install_is_idempotent_and_reversible(installed):
    adapter, registry, family, in_tree = installed

    assert adapter.install() == "installed"
    first = registry[family.oot_key]
    assert adapter.install() == "already installed"
    assert registry[family.oot_key] is first
    # The replacement must subclass the in-tree class, or vLLM's PluggableLayer.__new__ would skip __init__.
    assert issubclass(first, in_tree)
    assert first.__name__ == "CaovanGatedDeltaNetAttention"
    # The in-tree core stays the class method: an instance only gets caovan's core when enabled and supported.
    assert first._forward_core is in_tree._forward_core
    assert adapter.uninstall() is True
    assert family.oot_key not in registry
    assert adapter.uninstall() is False
    assert adapter.install() == "installed"


def test_install_refuses_to_replace_a_foreign_override(installed):
    adapter, registry, family, in_tree = installed

    class OtherPluginLayer(in_tree):
        pass

    registry[family.oot_key] = OtherPluginLayer
    with pytest.raises(RuntimeError, match="already replaced by .*OtherPluginLayer; two plugins cannot both"):
        adapter.install()
    assert registry[family.oot_key] is OtherPluginLayer
    assert adapter.uninstall() is False


def test_install_wraps_the_model_loader_once_and_uninstall_restores_it(installed):
    adapter, registry, family, _ = installed
    from vllm.model_executor.model_loader.base_loader import BaseModelLoader

    adapter.uninstall()
    original = BaseModelLoader.load_model
    assert not hasattr(original, "_caovan_wrapped")
    adapter.install()
    wrapped = BaseModelLoader.load_model
    assert wrapped._caovan_wrapped is original
    registry.pop(family.oot_key)  # a second install in the same process (plugin loaded twice)
    adapter.install()
    assert BaseModelLoader.load_model is wrapped, "the loader must not be wrapped twice"
    adapter.uninstall()
    assert BaseModelLoader.load_model is original


def test_install_wraps_the_loaders_that_override_load_model(installed):
    # Some loaders (GGUF up to vLLM 0.23, tensorizer, modelexpress) never reach BaseModelLoader.load_model: their
    # own load_model carries the checks. Which ones do is read from this vLLM, as the install reads it.
    adapter = installed[0]
    import vllm.model_executor.model_loader  # noqa: F401  (imports every loader class vLLM ships)
    from vllm.model_executor.model_loader.base_loader import BaseModelLoader

    def subclasses(cls):
        return [sub for direct in cls.__subclasses__() for sub in (direct, *subclasses(direct))]

    adapter.uninstall()
    originals = {cls: cls.__dict__["load_model"] for cls in subclasses(BaseModelLoader) if "load_model" in cls.__dict__}
    assert any(cls.__name__ == "TensorizerLoader" for cls in originals), "tensorizer's loader has its own load_model"
    adapter.install()
    try:
        for cls, original in originals.items():
            assert cls.__dict__["load_model"]._caovan_wrapped is original, cls.__name__
    finally:
        adapter.uninstall()
    assert all(cls.__dict__["load_model"] is original for cls, original in originals.items())


def test_a_loader_registered_after_install_gets_the_checks(installed):
    # register_model_loader (the user's code, another plugin) defines its class after caovan installed.
    adapter = installed[0]
    from vllm.model_executor import model_loader as loaders
    from vllm.model_executor.model_loader.base_loader import BaseModelLoader

    adapter.uninstall()
    assert "__init_subclass__" not in BaseModelLoader.__dict__, "vLLM defines one now: check it still runs"
    adapter.install()
    try:

        @loaders.register_model_loader("caovan_discovery_test_loader")
        class LaterLoader(BaseModelLoader):
            def download_model(self, model_config):
                pass

            def load_weights(self, model, model_config):
                pass

            def load_model(self, vllm_config, model_config, prefix=""):
                return "later"

        assert hasattr(LaterLoader.__dict__["load_model"], "_caovan_wrapped")
    finally:
        adapter.uninstall()
        loaders._LOAD_FORMAT_TO_MODEL_LOADER.pop("caovan_discovery_test_loader", None)
    assert not hasattr(LaterLoader.__dict__["load_model"], "_caovan_wrapped")
    assert "__init_subclass__" not in BaseModelLoader.__dict__


def test_an_install_that_fails_halfway_leaves_vllm_as_it_was(installed, monkeypatch):
    # The loader is wrapped before the layer is registered: a registration that raised left the loaders wrapped
    # with the active family's check (and their __init_subclass__ hook) behind a plugin that says it is inert.
    adapter, registry, family, in_tree = installed
    from vllm.model_executor.model_loader.base_loader import BaseModelLoader

    adapter.uninstall()
    original = BaseModelLoader.load_model

    def register_oot(cls, _decorated_layer_cls=None, name=None):
        raise TypeError("Decorator can only be applied to classes.")

    monkeypatch.setattr(in_tree, "register_oot", classmethod(register_oot))
    with pytest.raises(TypeError, match="Decorator can only be applied"):
        adapter.install()
    assert BaseModelLoader.load_model is original
    assert "__init_subclass__" not in BaseModelLoader.__dict__
    assert family.oot_key not in registry


def test_a_gdn_class_renamed_behind_the_old_name_is_refused(installed, monkeypatch):
    # PluggableLayer.__new__ looks the override up by the class's __name__: were the old name only an alias of a
    # renamed class (a compatibility shim), registering under the record's name would never be consulted, and the
    # probe said PASS for a plugin that can never act.
    import importlib

    adapter, _, family, in_tree = installed

    class RenamedGatedDeltaNetAttention(in_tree):
        pass

    monkeypatch.setattr(importlib.import_module(family.gdn_module), family.gdn_class, RenamedGatedDeltaNetAttention)
    report = adapter.probe()
    assert not report.ok
    assert "RenamedGatedDeltaNetAttention" in report.reason, report.reason


def test_a_core_whose_parameters_changed_order_is_refused(installed, monkeypatch):
    # caovan's core receives the custom op's arguments and hands them back to the in-tree core by position: with
    # b and a swapped in vLLM's signature, the names all still matched and the probe passed.
    adapter, _, _, in_tree = installed

    def _forward_core(self, mixed_qkv, a, b, core_attn_out):
        pass

    monkeypatch.setattr(in_tree, "_forward_core", _forward_core)
    report = adapter.probe()
    assert not report.ok
    assert "_forward_core" in report.reason and "order" in report.reason, report.reason
