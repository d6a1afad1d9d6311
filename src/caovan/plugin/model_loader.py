"""caovan's start-up checks on vLLM's model loader, for every family and for the inert plugin alike.

Patch of upstream behaviour, documented in place:

* Why: vLLM hands ``--additional-config`` only to code that runs while the model is built, and only a model with
  a GDN layer builds caovan's layer.  Two checks must see the options whatever the model and whatever the plugin
  decided at load time: require mode (``caovan_require_turbo3``) must fail start-up when caovan cannot act, and
  malformed ``caovan*`` keys must be reported, not ignored.
* How: ``BaseModelLoader.load_model`` is wrapped with a check run before the model is built (the inert plugin:
  nothing to wait for) and/or one run after it (a family's check of the layers it took over), and so is the
  ``load_model`` of every loader class that defines its own (vLLM 0.21.0: ``GGUFModelLoader`` and
  ``TensorizerLoader``; the classes exist once ``base_loader`` is imported, as its package imports them all).
  A loader class defined later (``register_model_loader`` in the user's code or another plugin) gets them when it
  is created, through an ``__init_subclass__`` set on ``BaseModelLoader``.
  The checks run once per load, in the outermost wrapped call, should one loader call another's ``load_model``.
  The loader is found by probing its module and the leading ``(vllm_config, model_config)`` parameters (the wrapper
  binds them by position), not by version; when it is not there the checks are skipped quietly (the plugin never
  breaks vLLM over a missing hook).
* Upstream code wrapped: ``vllm/model_executor/model_loader/base_loader.py``, ``BaseModelLoader.load_model`` and
  its overrides in ``vllm/model_executor/model_loader/*_loader.py``, vLLM 0.21.0 (``BaseModelLoader`` defines no
  ``__init_subclass__`` of its own there; one it had would still run first).
* Remove when: vLLM gives plugins the model config at load time.
"""

from __future__ import annotations

import contextvars
import functools
import importlib
from collections.abc import Callable
from typing import Any

from caovan.plugin import method_patch
from caovan.signatures import has_leading_arguments

LOADER_MODULE = "vllm.model_executor.model_loader.base_loader"
LOADER_CLASS = "BaseModelLoader"
#: ``load_model``'s first parameters after ``self``, in this order: the wrapper binds them by position.
LOAD_MODEL_PARAMETERS = ("vllm_config", "model_config")

#: ``before(vllm_config, model_config)``: runs before the model is built.
Before = Callable[[Any, Any], None]
#: ``after(vllm_config, model_config, model)``: runs on the built model.
After = Callable[[Any, Any, Any], None]


def is_target_model(vllm_config: Any, model_config: Any) -> bool:
    """True for the served model; False for a speculative draft or another auxiliary model loaded beside it.

    An MTP or EAGLE draft is loaded with the served model's ``vllm_config`` and its own ``model_config``; the
    ``draft_model`` method instead builds a ``vllm_config`` whose ``model_config`` *is* the draft's
    (``DraftModelProposer._create_draft_vllm_config``, vLLM 0.21.0), so the draft is also recognised as the
    speculative config's ``draft_model_config``.
    """
    if model_config is not getattr(vllm_config, "model_config", None):
        return False
    speculative = getattr(vllm_config, "speculative_config", None)
    return model_config is not getattr(speculative, "draft_model_config", None)


#: True inside a wrapped ``load_model``: a loader calling another's (``super().load_model``) is one load.
_loading = contextvars.ContextVar("caovan_load_model_running", default=False)


def wrap_load_model(original: Any, before: Before | None = None, after: After | None = None) -> Any:
    @functools.wraps(original)
    def load_model(self: Any, vllm_config: Any, model_config: Any, *args: Any, **kwargs: Any) -> Any:
        if _loading.get():
            return original(self, vllm_config, model_config, *args, **kwargs)
        if before is not None:
            before(vllm_config, model_config)
        token = _loading.set(True)
        try:
            model = original(self, vllm_config, model_config, *args, **kwargs)
        finally:
            _loading.reset(token)
        if after is not None:
            after(vllm_config, model_config, model)
        return model

    setattr(load_model, method_patch.WRAPPED, original)
    load_model._caovan_checks = (before, after)  # type: ignore[attr-defined]
    return load_model


def loader_class() -> type | None:
    """vLLM's ``BaseModelLoader`` when its ``load_model`` takes ``(vllm_config, model_config)``; else None."""
    try:
        module = importlib.import_module(LOADER_MODULE)
    except Exception:  # another layout, or no vLLM: nothing to wrap
        return None
    cls = getattr(module, LOADER_CLASS, None)
    method = getattr(cls, "load_model", None)
    if not isinstance(cls, type) or method is None:
        return None
    if not has_leading_arguments(method_patch.unwrapped(method), LOAD_MODEL_PARAMETERS):
        return None
    return cls


def _own_load_model(cls: type) -> Any:
    """``cls``'s own ``load_model`` (not inherited) as vLLM defined it, when it takes the base's parameters."""
    method = method_patch.unwrapped(cls.__dict__.get("load_model"))
    if not callable(method) or not has_leading_arguments(method, LOAD_MODEL_PARAMETERS):
        return None
    return method


def _subclasses(cls: type) -> list[type]:
    found: list[type] = []
    for sub in cls.__subclasses__():
        if sub not in found:
            found += [sub, *(s for s in _subclasses(sub) if s not in found)]
    return found


def loader_classes() -> list[type]:
    """``BaseModelLoader`` and every loader class under it with its own ``load_model`` of that shape; [] when vLLM
    has no ``BaseModelLoader`` of that shape."""
    base = loader_class()
    if base is None:
        return []
    return [base, *(cls for cls in _subclasses(base) if _own_load_model(cls) is not None)]


#: What each hooked base class had as its own ``__init_subclass__`` before caovan set one (None: nothing).
_previous_init_subclass: dict[type, Any] = {}


def _wrap(cls: type, before: Before | None, after: After | None) -> None:
    current = cls.load_model  # the base's may be inherited from a mixin; the others are their own
    if getattr(current, "_caovan_checks", None) != (before, after):
        own = cls.__dict__.get("load_model")
        # Whether vLLM's load_model was inherited, carried over when the checks are replaced: uninstall then
        # deletes the wrapper instead of leaving a copy of the inherited method in the class.
        inherited = getattr(own, "_caovan_inherited", False) if own is not None else True
        wrapper = wrap_load_model(method_patch.unwrapped(current), before, after)
        wrapper._caovan_inherited = inherited  # type: ignore[attr-defined]
        cls.load_model = wrapper


def _hook_later_subclasses(base: type, before: Before | None, after: After | None) -> None:
    """Loader classes created from now on get the checks as they are defined (they are not there to wrap yet)."""
    previous = _previous_init_subclass.setdefault(base, base.__dict__.get("__init_subclass__"))

    def __init_subclass__(cls: type, **kwargs: Any) -> None:
        if previous is not None:
            previous.__get__(None, cls)(**kwargs)
        else:
            super(base, cls).__init_subclass__(**kwargs)
        if _own_load_model(cls) is not None:
            _wrap(cls, before, after)

    base.__init_subclass__ = classmethod(__init_subclass__)  # type: ignore[assignment]


def install(before: Before | None = None, after: After | None = None) -> bool:
    """Wrap the loaders with these checks, replacing caovan's earlier ones (never wrapping twice), and the loaders
    defined later as they are created; False when vLLM has no loader of that shape."""
    classes = loader_classes()
    for cls in classes:
        _wrap(cls, before, after)
    if classes:
        _hook_later_subclasses(classes[0], before, after)
    return bool(classes)


def uninstall() -> bool:
    """Put vLLM's own ``load_model`` back on every loader, and its ``__init_subclass__``; True when caovan had
    wrapped one."""
    restored = False
    for cls in loader_classes():
        wrapper = cls.__dict__.get("load_model")
        original = getattr(wrapper, method_patch.WRAPPED, None)
        if original is not None:
            if getattr(wrapper, "_caovan_inherited", False):
                del cls.load_model
            else:
                cls.load_model = original
            restored = True
        if cls in _previous_init_subclass:
            previous = _previous_init_subclass.pop(cls)
            if previous is None:
                del cls.__init_subclass__
            else:
                cls.__init_subclass__ = previous
    return restored
