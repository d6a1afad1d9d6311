"""Installing caovan's layer override against the real vLLM classes (tier `discovery`, no GPU needed)."""

import pytest

from caovan.adapters import select_adapter

pytestmark = pytest.mark.discovery


@pytest.fixture
def installed(served_release):
    """The installed vLLM's family adapter, the family record and its in-tree layer class, with whatever override of
    caovan's was in place taken out first and vLLM put back as it was afterwards (a refused release skips, with its
    refusal, in ``served_release``)."""
    selection = select_adapter()
    assert selection.adapter is not None, selection.reason
    from caovan.adapters.override import in_tree_class

    family = selection.adapter.family
    adapter = selection.adapter
    saved = None
    if family.install_route == "register_oot":
        from vllm.model_executor.custom_op import op_registry_oot

        saved = op_registry_oot.pop(family.oot_key, None)
    else:
        adapter.uninstall()
    yield adapter, family, in_tree_class(family)
    adapter.uninstall()
    if saved is not None:
        op_registry_oot[family.oot_key] = saved


def _current_override(family, in_tree):
    """What caovan put in place for the layer, or None: the registered subclass, or the wrapper of __init__."""
    if family.install_route == "register_oot":
        from vllm.model_executor.custom_op import op_registry_oot

        return op_registry_oot.get(family.oot_key)
    from caovan.adapters.override import INIT_WRAPPER_ATTRIBUTE

    wrapper = in_tree.__dict__.get(INIT_WRAPPER_ATTRIBUTE)
    return wrapper if wrapper is not None and in_tree.__dict__["__init__"] is wrapper else None


def test_install_is_idempotent_and_reversible(installed):
    adapter, family, in_tree = installed
    original_init = in_tree.__dict__["__init__"]
    class_core = in_tree.__dict__[family.core_method]

    assert _current_override(family, in_tree) is None
    assert adapter.install() == "installed"
    first = _current_override(family, in_tree)
    assert first is not None
    assert adapter.install() == "already installed"
    assert _current_override(family, in_tree) is first
    if family.install_route == "register_oot":
        # The replacement must subclass the in-tree class, or vLLM's PluggableLayer.__new__ would skip __init__.
        assert issubclass(first, in_tree)
        assert first.__name__ == "CaovanGatedDeltaNetAttention"
        # The in-tree core stays the class method: an instance only gets caovan's core when enabled and supported.
        assert first._forward_core is in_tree._forward_core
    else:
        # The class's own __init__ runs first, untouched; the core stays the class method here too.
        assert first._caovan_original is original_init
        assert in_tree.__dict__[family.core_method] is class_core
    assert adapter.uninstall() is True
    assert _current_override(family, in_tree) is None
    assert in_tree.__dict__["__init__"] is original_init
    assert adapter.uninstall() is False
    assert adapter.install() == "installed"


def test_subclasses_of_a_patched_class_inherit_the_wrapper(installed):
    # vLLM 0.18 builds Qwen3.5's layer from a subclass of Qwen3NextGatedDeltaNet that keeps its __init__ and core.
    import importlib
    import importlib.util

    adapter, family, in_tree = installed
    if family.install_route != "class_patch":
        pytest.skip(f"{family.family_id} registers a subclass through register_oot: no class is patched")
    if importlib.util.find_spec("vllm.model_executor.models.qwen3_5") is not None:
        importlib.import_module("vllm.model_executor.models.qwen3_5")
    adapter.install()
    wrapper = _current_override(family, in_tree)
    inheriting = [sub for sub in in_tree.__subclasses__() if "__init__" not in vars(sub)]
    for sub in inheriting:
        assert sub.__init__ is wrapper, sub.__qualname__
        assert getattr(sub, family.core_method) is getattr(in_tree, family.core_method), sub.__qualname__
    print(f"{len(inheriting)} subclass(es) of {in_tree.__name__} inherit the wrapper: {inheriting}")


def test_install_refuses_to_replace_a_foreign_override(installed):
    adapter, family, in_tree = installed
    if family.install_route != "register_oot":
        pytest.skip(f"{family.family_id} wraps __init__: another plugin's wrapper chains with caovan's (next test)")
    from vllm.model_executor.custom_op import op_registry_oot

    class OtherPluginLayer(in_tree):
        pass

    op_registry_oot[family.oot_key] = OtherPluginLayer
    with pytest.raises(RuntimeError, match="already replaced by .*OtherPluginLayer; two plugins cannot both"):
        adapter.install()
    assert op_registry_oot[family.oot_key] is OtherPluginLayer
    assert adapter.uninstall() is False
    del op_registry_oot[family.oot_key]


def test_uninstall_leaves_a_wrapper_another_plugin_put_on_top(installed):
    import functools

    adapter, family, in_tree = installed
    if family.install_route != "class_patch":
        pytest.skip(f"{family.family_id} registers a subclass: a second override is refused (test above)")
    adapter.install()
    ours = in_tree.__dict__["__init__"]

    @functools.wraps(ours)  # copies the attributes of caovan's wrapper onto theirs
    def theirs(self, *args, **kwargs):
        ours(self, *args, **kwargs)

    type.__setattr__(in_tree, "__init__", theirs)
    try:
        assert adapter.install() == "already installed"
        assert adapter.uninstall() is False, "uninstalling caovan must not drop the other plugin's wrapper"
        assert in_tree.__dict__["__init__"] is theirs
    finally:
        type.__setattr__(in_tree, "__init__", ours)


def test_install_wraps_the_model_loader_once_and_uninstall_restores_it(installed):
    adapter, family, in_tree = installed
    from vllm.model_executor.model_loader.base_loader import BaseModelLoader

    adapter.uninstall()
    original = BaseModelLoader.load_model
    assert not hasattr(original, "_caovan_wrapped")
    adapter.install()
    wrapped = BaseModelLoader.load_model
    assert wrapped._caovan_wrapped is original
    from caovan.adapters.override import uninstall_layer

    assert uninstall_layer(family)  # the loader part stays: a second install in the same process (plugin loaded twice)
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
    adapter, family, in_tree = installed
    from vllm.model_executor.model_loader.base_loader import BaseModelLoader

    from caovan.adapters import override

    adapter.uninstall()
    original = BaseModelLoader.load_model
    original_init = in_tree.__dict__["__init__"]

    def fails(*args, **kwargs):
        raise TypeError("Decorator can only be applied to classes.")

    if family.install_route == "register_oot":
        monkeypatch.setattr(in_tree, "register_oot", classmethod(fails))
    else:
        monkeypatch.setattr(override, "build_init_wrapper", fails)
    with pytest.raises(TypeError, match="Decorator can only be applied"):
        adapter.install()
    assert BaseModelLoader.load_model is original
    assert "__init_subclass__" not in BaseModelLoader.__dict__
    assert _current_override(family, in_tree) is None
    assert in_tree.__dict__["__init__"] is original_init


def test_a_gdn_class_renamed_behind_the_old_name_is_refused(installed, monkeypatch):
    # PluggableLayer.__new__ looks the override up by the class's __name__: were the old name only an alias of a
    # renamed class (a compatibility shim), registering under the record's name would never be consulted, and the
    # probe said PASS for a plugin that can never act.
    import importlib

    adapter, family, in_tree = installed
    if family.install_route != "register_oot":
        pytest.skip(f"{family.family_id} wraps the class itself: no registry looks it up by name")

    class RenamedGatedDeltaNetAttention(in_tree):
        pass

    monkeypatch.setattr(importlib.import_module(family.gdn_module), family.gdn_class, RenamedGatedDeltaNetAttention)
    report = adapter.probe()
    assert not report.ok
    assert "RenamedGatedDeltaNetAttention" in report.reason, report.reason


def test_a_core_whose_parameters_changed_order_is_refused(installed, monkeypatch):
    # caovan's core receives the custom op's arguments and hands them back to the in-tree core by position: with
    # b and a swapped in vLLM's signature, the names all still matched and the probe passed.
    adapter, _, in_tree = installed

    def _forward_core(self, mixed_qkv, a, b, core_attn_out):
        pass

    monkeypatch.setattr(in_tree, "_forward_core", _forward_core)
    report = adapter.probe()
    assert not report.ok
    assert "_forward_core" in report.reason and "order" in report.reason, report.reason
