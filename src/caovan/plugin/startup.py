"""The vLLM general-plugin entry point (``vllm.general_plugins`` → ``caovan_sm75_turbo3``).

vLLM calls ``register()`` in every process it starts (front end, engine core, each worker, the model-registry
subprocess) and does not guard the call: an exception here aborts vLLM.  So ``register()`` only raises when the
user asked caovan to be required (``CAOVAN_REQUIRE_TURBO3=1``); otherwise it logs one status line and stays
inert when anything is off.  The ``--additional-config`` switches are not visible here (vLLM's config exists only
while the model is built); they are read when the GDN layers are constructed and, through a check on vLLM's model
loader (``plugin/model_loader.py``), when the model is loaded: so an inert plugin still reports malformed caovan
keys and still fails start-up when ``caovan_require_turbo3`` asks for it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from caovan import PLUGIN_NAME, __version__
from caovan.log import logger

from .options import (
    FAIL,
    REQUIRE_ENV,
    CaovanRequireError,
    check_environment,
    env_setting,
    parse_options,
    require_from_env,
)


@dataclass
class _PluginState:
    registered: bool = False
    family_id: str | None = None
    status_line: str = ""
    #: Why require mode refused start-up in this process (raised again on every later call); None when it did not.
    refusal: str | None = None


_state = _PluginState()
_lock = threading.Lock()


def status() -> _PluginState:
    """What ``register()`` decided in this process (the tests read it)."""
    return _state


def register() -> None:
    with _lock:
        if _state.registered:
            if _state.refusal is not None:
                # A caller that carries on after the first refusal (vLLM itself aborts) must not find require mode
                # dropped: returning quietly would leave the plugin neither active nor inert-checked, and silent.
                raise CaovanRequireError(_state.refusal)
            return
        _state.registered = True
        try:
            _register()
        except CaovanRequireError as exc:
            _state.refusal = str(exc)
            raise


def _register() -> None:
    # The judgement `caovan doctor` and `caovan serve` report too (options.check_environment): one function, so
    # neither can pass a setting this start-up refuses.
    findings = check_environment()
    failures = [finding.message for finding in findings if finding.level == FAIL]
    if failures:
        raise CaovanRequireError(f"{PLUGIN_NAME}: {'; '.join(failures)}")
    for finding in findings:
        logger.warning("%s: %s", PLUGIN_NAME, finding.message)
    require = require_from_env()  # readable: check_environment found no FAIL
    try:
        from caovan.adapters import select_adapter

        selection = select_adapter()
        family, reason, vllm_version = selection.family_id, selection.reason, selection.vllm_version
    except Exception as exc:  # never break vLLM over a probe
        family, reason, vllm_version = None, f"probe crashed: {type(exc).__name__}: {exc}", None
    if family is not None:
        try:
            reason = f"{reason}, layer override {selection.adapter.install()}"
        except Exception as exc:  # an install failure leaves vLLM exactly as it was
            family, reason = (
                None,
                f"family={family} but installing its override failed: {type(exc).__name__}: {exc}",
            )
    _state.family_id = family
    try:
        from .guards import apply_guards

        guards = apply_guards().tokens()
    except Exception as exc:  # a guard is a convenience; it never stops vLLM
        guards = f"guards skipped ({type(exc).__name__}: {exc})"
    # The Turbo3 tokens users grep for, always present: runtime= is the interface check's verdict, and there
    # is no in-process warm-up to enable (Turbo3's raced the engine's own first compile and killed it).
    runtime = "PASS" if family is not None else "FAIL"
    head = (
        f"{PLUGIN_NAME} {__version__}: vLLM {vllm_version or 'unknown'}, runtime={runtime} {guards} "
        "post_start_warmup=disabled-default,"
    )
    if family is not None:
        _state.status_line = f"{head} GDN interface check: PASS {reason}"
        logger.info(_state.status_line)
        return
    _state.status_line = f"{head} GDN interface check: FAIL, plugin inert: {reason}"
    if require:
        raise CaovanRequireError(f"{_state.status_line} ({env_setting(REQUIRE_ENV)} requires caovan)")
    if not _install_inert_check(reason):
        # Nothing else in this process reads --additional-config: a require key there cannot act, so the one line
        # says so (the environment switch, read here, still can).
        _state.status_line += (
            "; no model-loader hook either, so --additional-config goes unchecked here "
            f"(caovan_require_turbo3 cannot stop start-up: use {REQUIRE_ENV}=1)"
        )
    logger.warning(_state.status_line)


def inert_check(reason: str) -> Callable[[Any, Any], None]:
    """What the inert plugin checks before vLLM loads the served model: the caovan options parse (a malformed key
    is the usual ``CaovanConfigError``) and, under ``caovan_require_turbo3``, start-up fails with ``reason``."""

    def check(vllm_config: Any, model_config: Any) -> None:
        from .model_loader import is_target_model

        if not is_target_model(vllm_config, model_config):
            return  # the MTP draft: the served model's load already checked
        options = parse_options(getattr(vllm_config, "additional_config", None))
        if options.require:
            raise CaovanRequireError(
                f"{PLUGIN_NAME}: caovan_require_turbo3=true requires caovan, but the plugin is inert: {reason}"
            )

    return check


def _install_inert_check(reason: str) -> bool:
    """Whether the inert check is in place (False: vLLM has no loader of the shape it wraps, or wrapping failed)."""
    try:
        from . import model_loader

        return model_loader.install(before=inert_check(reason))
    except Exception:  # the check only serves require mode and bad keys; it never stops vLLM by failing itself
        return False
