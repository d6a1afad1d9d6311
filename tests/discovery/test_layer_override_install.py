"""Installing caovan's layer override against the real vLLM classes (tier `discovery`, no GPU needed)."""

import pytest

from caovan.adapters import select_adapter

pytestmark = pytest.mark.discovery


@pytest.fixture
def v020():
    selection = select_adapter()
    if selection.family_id != "gdn-linear-attn-v020":
        pytest.skip(f"family gdn-linear-attn-v020 not selected here: {selection.reason}")
    from vllm.model_executor.custom_op import op_registry_oot

    from caovan.adapters import gdn_linear_attn_v020_layer as layer_mod

    saved = op_registry_oot.pop(layer_mod.IN_TREE_NAME, None)
    yield selection.adapter, op_registry_oot, layer_mod
    op_registry_oot.pop(layer_mod.IN_TREE_NAME, None)
    if saved is not None:
        op_registry_oot[layer_mod.IN_TREE_NAME] = saved


def test_install_is_idempotent_and_reversible(v020):
    adapter, registry, layer_mod = v020
    from vllm.model_executor.layers.mamba.gdn_linear_attn import GatedDeltaNetAttention

    assert adapter.install() == "installed"
    first = registry["GatedDeltaNetAttention"]
    assert adapter.install() == "already installed"
    assert registry["GatedDeltaNetAttention"] is first
    # The replacement must subclass the in-tree class, or vLLM's PluggableLayer.__new__ would skip __init__.
    assert issubclass(first, GatedDeltaNetAttention)
    assert first.__name__ == "CaovanGatedDeltaNetAttention"
    # The in-tree core stays the class method: an instance only gets caovan's core when enabled and supported.
    assert first._forward_core is GatedDeltaNetAttention._forward_core
    assert adapter.uninstall() is True
    assert "GatedDeltaNetAttention" not in registry
    assert adapter.uninstall() is False
    assert adapter.install() == "installed"


def test_install_refuses_to_replace_a_foreign_override(v020):
    adapter, registry, layer_mod = v020
    from vllm.model_executor.layers.mamba.gdn_linear_attn import GatedDeltaNetAttention

    class OtherPluginLayer(GatedDeltaNetAttention):
        pass

    registry["GatedDeltaNetAttention"] = OtherPluginLayer
    with pytest.raises(RuntimeError, match="already replaced by .*OtherPluginLayer; two plugins cannot both"):
        adapter.install()
    assert registry["GatedDeltaNetAttention"] is OtherPluginLayer
    assert adapter.uninstall() is False


def test_install_wraps_the_model_loader_once_and_uninstall_restores_it(v020):
    adapter, registry, layer_mod = v020
    from vllm.model_executor.model_loader.base_loader import BaseModelLoader

    adapter.uninstall()
    original = BaseModelLoader.load_model
    assert not hasattr(original, "_caovan_wrapped")
    adapter.install()
    wrapped = BaseModelLoader.load_model
    assert wrapped._caovan_wrapped is original
    registry.pop("GatedDeltaNetAttention")  # a second install in the same process (plugin loaded twice)
    adapter.install()
    assert BaseModelLoader.load_model is wrapped, "the loader must not be wrapped twice"
    adapter.uninstall()
    assert BaseModelLoader.load_model is original


def test_install_wraps_the_loaders_that_override_load_model(v020):
    # GGUF and tensorizer loading never reach BaseModelLoader.load_model: their own load_model carries the checks.
    adapter, _, _ = v020
    from vllm.model_executor.model_loader.gguf_loader import GGUFModelLoader
    from vllm.model_executor.model_loader.tensorizer_loader import TensorizerLoader

    adapter.uninstall()
    originals = {cls: cls.__dict__["load_model"] for cls in (GGUFModelLoader, TensorizerLoader)}
    adapter.install()
    try:
        for cls, original in originals.items():
            assert cls.__dict__["load_model"]._caovan_wrapped is original, cls.__name__
    finally:
        adapter.uninstall()
    assert all(cls.__dict__["load_model"] is original for cls, original in originals.items())


def test_a_loader_registered_after_install_gets_the_checks(v020):
    # register_model_loader (the user's code, another plugin) defines its class after caovan installed.
    adapter, _, _ = v020
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


def test_an_install_that_fails_halfway_leaves_vllm_as_it_was(v020, monkeypatch):
    # The loader is wrapped before the layer is registered: a registration that raised left the loaders wrapped
    # with the active family's check (and their __init_subclass__ hook) behind a plugin that says it is inert.
    adapter, registry, _ = v020
    from vllm.model_executor.layers.mamba.gdn_linear_attn import GatedDeltaNetAttention
    from vllm.model_executor.model_loader.base_loader import BaseModelLoader

    adapter.uninstall()
    original = BaseModelLoader.load_model

    def register_oot(cls, _decorated_layer_cls=None, name=None):
        raise TypeError("Decorator can only be applied to classes.")

    monkeypatch.setattr(GatedDeltaNetAttention, "register_oot", classmethod(register_oot))
    with pytest.raises(TypeError, match="Decorator can only be applied"):
        adapter.install()
    assert BaseModelLoader.load_model is original
    assert "__init_subclass__" not in BaseModelLoader.__dict__
    assert "GatedDeltaNetAttention" not in registry


def test_a_gdn_class_renamed_behind_the_old_name_is_refused(v020, monkeypatch):
    # PluggableLayer.__new__ looks the override up by the class's __name__: were the old name only an alias of a
    # renamed class (a compatibility shim), registering under "GatedDeltaNetAttention" would never be consulted,
    # and the probe said PASS for a plugin that can never act.
    from vllm.model_executor.layers.mamba import gdn_linear_attn as gdn

    from caovan.adapters.gdn_linear_attn_v020 import GdnLinearAttnV020Adapter

    class QwenGatedDeltaNetAttention(gdn.GatedDeltaNetAttention):
        pass

    monkeypatch.setattr(gdn, "GatedDeltaNetAttention", QwenGatedDeltaNetAttention)
    report = GdnLinearAttnV020Adapter().probe()
    assert not report.ok
    assert "QwenGatedDeltaNetAttention" in report.reason, report.reason


def test_a_core_whose_parameters_changed_order_is_refused(v020, monkeypatch):
    # caovan's core receives the custom op's arguments and hands them back to the in-tree core by position: with
    # b and a swapped in vLLM's signature, the names all still matched and the probe passed.
    from vllm.model_executor.layers.mamba import gdn_linear_attn as gdn

    from caovan.adapters.gdn_linear_attn_v020 import GdnLinearAttnV020Adapter

    def _forward_core(self, mixed_qkv, a, b, core_attn_out):
        pass

    monkeypatch.setattr(gdn.GatedDeltaNetAttention, "_forward_core", _forward_core)
    report = GdnLinearAttnV020Adapter().probe()
    assert not report.ok
    assert "_forward_core" in report.reason and "order" in report.reason, report.reason
