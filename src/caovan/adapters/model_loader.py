"""caovan's start-up checks on vLLM's model loader, for every family and for the inert plugin alike.

Patch of upstream behaviour, documented in place:

* Why: vLLM hands ``--additional-config`` only to code that runs while the model is built, and only a model with
  a GDN layer builds caovan's layer.  Two checks must see the options whatever the model and whatever the plugin
  decided at load time: require mode (``caovan_require_turbo3``) must fail start-up when caovan cannot act, and
  malformed ``caovan*`` keys must be reported, not ignored.
* How: ``BaseModelLoader.load_model`` is wrapped with a check run before the model is built (the inert plugin:
  nothing to wait for) and/or one run after it (a family's check of the layers it took over).  The loader is
  found by probing its module and the ``(vllm_config, model_config)`` parameters, not by version; when it is not
  there the checks are skipped quietly (the plugin never breaks vLLM over a missing hook).
* Upstream code wrapped: ``vllm/model_executor/model_loader/base_loader.py``, ``BaseModelLoader.load_model``,
  vLLM 0.21.0.  Loaders that override ``load_model`` (GGUF, tensorizer) are not covered.
* Remove when: vLLM gives plugins the model config at load time.
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Callable
from typing import Any

from .base import has_argument

LOADER_MODULE = "vllm.model_executor.model_loader.base_loader"
LOADER_CLASS = "BaseModelLoader"

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


def wrap_load_model(original: Any, before: Before | None = None, after: After | None = None) -> Any:
    @functools.wraps(original)
    def load_model(self: Any, vllm_config: Any, model_config: Any, *args: Any, **kwargs: Any) -> Any:
        if before is not None:
            before(vllm_config, model_config)
        model = original(self, vllm_config, model_config, *args, **kwargs)
        if after is not None:
            after(vllm_config, model_config, model)
        return model

    load_model._caovan_wrapped = original  # type: ignore[attr-defined]
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
    method = getattr(method, "_caovan_wrapped", method)
    if not (has_argument(method, "vllm_config") and has_argument(method, "model_config")):
        return None
    return cls


def install(before: Before | None = None, after: After | None = None) -> bool:
    """Wrap the loader with these checks, replacing caovan's earlier ones (never wrapping twice); False when vLLM
    has no loader of that shape."""
    cls = loader_class()
    if cls is None:
        return False
    current = cls.load_model
    if getattr(current, "_caovan_checks", None) == (before, after):
        return True
    cls.load_model = wrap_load_model(getattr(current, "_caovan_wrapped", current), before, after)
    return True


def uninstall() -> bool:
    """Put vLLM's own ``load_model`` back; True when caovan had wrapped it."""
    cls = loader_class()
    original = getattr(getattr(cls, "load_model", None), "_caovan_wrapped", None)
    if cls is None or original is None:
        return False
    cls.load_model = original
    return True
