"""register() logic with a stand-in selection (the real-vLLM version lives in tests/discovery)."""

import logging
import os

import pytest

import caovan.adapters
from caovan.adapters.registry import Selection
from caovan.plugin import guards, model_loader, startup


class _Adapter:
    family_id = "gdn-linear-attn-v020"

    def install(self) -> str:
        return "installed"


class _BrokenAdapter(_Adapter):
    def install(self) -> str:
        raise RuntimeError("GatedDeltaNetAttention is already replaced by other.Plugin")


@pytest.fixture
def fresh_state(monkeypatch, caovan_records):
    # caovan_records (conftest.py) lets vLLM configure logging first: the handler survives when run alone.
    monkeypatch.setattr(startup, "_state", startup._PluginState())
    for name in list(os.environ):
        if name.upper().startswith("CAOVAN_"):
            monkeypatch.delenv(name)
    # The inert path wraps vLLM's model loader (test_model_loader_checks.py): keep the real one untouched here.
    monkeypatch.setattr(model_loader, "install", lambda before=None, after=None: False)
    # The guards see two SM75 GPUs and a clean environment of their own, never this process's.
    monkeypatch.setattr(guards, "nvml_capabilities", lambda environ=None: [(7, 5), (7, 5)])
    apply_guards, guard_env = guards.apply_guards, {"CAOVAN_CACHE_DIR": "/cache"}
    monkeypatch.setattr(guards, "apply_guards", lambda environ=None: apply_guards(guard_env))
    return caovan_records


def _select(adapter, reason):
    return lambda: Selection("0.21.0", adapter, reason)


def test_register_logs_one_status_line_and_is_idempotent(fresh_state, monkeypatch):
    calls = []
    monkeypatch.setattr(
        caovan.adapters,
        "select_adapter",
        lambda: calls.append(1) or Selection("0.21.0", _Adapter(), "family=gdn-linear-attn-v020"),
    )
    startup.register()
    startup.register()
    startup.register()
    assert len(calls) == 1
    assert len(fresh_state) == 1
    line = fresh_state[0].getMessage()
    assert line.startswith("caovan_sm75_turbo3 0.1.0: vLLM 0.21.0, runtime=PASS ")
    assert "GDN interface check: PASS family=gdn-linear-attn-v020, layer override installed" in line
    assert startup.status().family_id == "gdn-linear-attn-v020"


def test_unsupported_vllm_stays_inert(fresh_state, monkeypatch):
    monkeypatch.setattr(caovan.adapters, "select_adapter", _select(None, "no GDN family matches vLLM 9.9.9: x"))
    startup.register()  # must not raise
    assert fresh_state[0].levelno == logging.WARNING
    assert "FAIL, plugin inert: no GDN family matches vLLM 9.9.9" in fresh_state[0].getMessage()


def test_probe_crash_stays_inert(fresh_state, monkeypatch):
    def boom():
        raise RuntimeError("kaput")

    monkeypatch.setattr(caovan.adapters, "select_adapter", boom)
    startup.register()
    assert "probe crashed: RuntimeError: kaput" in fresh_state[0].getMessage()


def test_require_mode_fails_at_start_up(fresh_state, monkeypatch):
    monkeypatch.setenv("CAOVAN_REQUIRE_TURBO3", "1")
    monkeypatch.setattr(caovan.adapters, "select_adapter", _select(None, "no GDN family matches vLLM 9.9.9: x"))
    with pytest.raises(startup.CaovanRequireError, match="no GDN family matches vLLM 9.9.9.*requires caovan"):
        startup.register()


def test_unreadable_require_env_is_refused(fresh_state, monkeypatch):
    monkeypatch.setenv("CAOVAN_REQUIRE_TURBO3", "maybe")
    with pytest.raises(startup.CaovanRequireError, match="CAOVAN_REQUIRE_TURBO3='maybe'"):
        startup.register()


def test_install_failure_stays_inert(fresh_state, monkeypatch):
    monkeypatch.setattr(caovan.adapters, "select_adapter", _select(_BrokenAdapter(), "family=gdn-linear-attn-v020"))
    startup.register()
    assert startup.status().family_id is None
    assert "installing its override failed: RuntimeError: GatedDeltaNetAttention is already replaced" in (
        fresh_state[0].getMessage()
    )


def test_status_line_always_has_the_turbo3_tokens(fresh_state, monkeypatch):
    monkeypatch.setattr(caovan.adapters, "select_adapter", _select(_Adapter(), "family=gdn-linear-attn-v020"))
    startup.register()
    assert fresh_state[0].getMessage() == (
        "caovan_sm75_turbo3 0.1.0: vLLM 0.21.0, runtime=PASS sm75=2/2 flashinfer_sampler=disabled-sm75-guard "
        "triton_cache=isolated post_start_warmup=disabled-default, "
        "GDN interface check: PASS family=gdn-linear-attn-v020, layer override installed"
    )


def test_inert_status_line_says_runtime_fail_and_keeps_the_tokens(fresh_state, monkeypatch):
    monkeypatch.setattr(guards, "nvml_capabilities", lambda environ=None: [(8, 6)])
    monkeypatch.setattr(caovan.adapters, "select_adapter", _select(None, "no GDN family matches vLLM 9.9.9: x"))
    startup.register()
    assert (
        fresh_state[0]
        .getMessage()
        .startswith(
            "caovan_sm75_turbo3 0.1.0: vLLM 0.21.0, runtime=FAIL sm75=0/1 flashinfer_sampler=default "
            "triton_cache=default post_start_warmup=disabled-default, GDN interface check: FAIL, plugin inert: "
        )
    )


def test_unknown_caovan_environment_variables_get_one_warning_line(fresh_state, monkeypatch):
    monkeypatch.setenv("CAOVAN_GDN_LEGACY_DISABLE", "1")
    monkeypatch.setenv("CAOVAN_REQUIRE", "1")
    monkeypatch.setenv("CAOVAN_CACHE_DIR", "/cache")
    monkeypatch.setattr(caovan.adapters, "select_adapter", _select(_Adapter(), "family=gdn-linear-attn-v020"))
    startup.register()
    assert [r.levelno for r in fresh_state] == [logging.WARNING, logging.INFO]
    assert fresh_state[0].getMessage() == (
        "caovan_sm75_turbo3: environment variables caovan ignores: CAOVAN_GDN_LEGACY_DISABLE (it has no effect, "
        "caovan has no legacy bridge), CAOVAN_REQUIRE (not read by caovan; did you mean CAOVAN_REQUIRE_TURBO3?)"
    )


@pytest.mark.parametrize("value", ["maybe", "1"])
def test_a_refusal_is_raised_again_when_register_is_called_again(fresh_state, monkeypatch, value):
    # vLLM aborts on the first raise, but a caller that goes on (or loads the plugin twice) must not find require
    # mode dropped: the second call used to return quietly, with no status line and no inert check.
    monkeypatch.setenv("CAOVAN_REQUIRE_TURBO3", value)
    monkeypatch.setattr(caovan.adapters, "select_adapter", _select(None, "no GDN family matches vLLM 9.9.9: x"))
    with pytest.raises(startup.CaovanRequireError) as first:
        startup.register()
    with pytest.raises(startup.CaovanRequireError) as second:
        startup.register()
    assert str(second.value) == str(first.value)
    assert startup.status().refusal == str(first.value)


@pytest.mark.parametrize(
    ("value", "named"), [("yes", "CAOVAN_REQUIRE_TURBO3=yes"), (" 1 ", "CAOVAN_REQUIRE_TURBO3=' 1 '")]
)
def test_the_require_refusal_names_the_value_the_user_set(fresh_state, monkeypatch, value, named):
    monkeypatch.setenv("CAOVAN_REQUIRE_TURBO3", value)
    monkeypatch.setattr(caovan.adapters, "select_adapter", _select(None, "no GDN family matches vLLM 9.9.9: x"))
    with pytest.raises(startup.CaovanRequireError) as info:
        startup.register()
    assert str(info.value).endswith(f"({named} requires caovan)")


def test_an_inert_plugin_without_its_loader_check_says_the_config_keys_go_unchecked(fresh_state, monkeypatch):
    # fresh_state: no loader of the expected shape (model_loader.install returns False). Then nothing in the process
    # ever reads --additional-config, so a caovan_require_turbo3 there cannot fail start-up: the one status line
    # must say so, or the user believes require mode holds.
    monkeypatch.setattr(caovan.adapters, "select_adapter", _select(None, "no GDN family matches vLLM 9.9.9: x"))
    startup.register()
    assert len(fresh_state) == 1
    line = fresh_state[0].getMessage()
    assert line.endswith(
        "plugin inert: no GDN family matches vLLM 9.9.9: x; no model-loader hook either, so --additional-config goes "
        "unchecked here (caovan_require_turbo3 cannot stop start-up: use CAOVAN_REQUIRE_TURBO3=1)"
    )


def test_an_inert_plugin_with_its_loader_check_says_nothing_more(fresh_state, monkeypatch):
    monkeypatch.setattr(model_loader, "install", lambda before=None, after=None: True)
    monkeypatch.setattr(caovan.adapters, "select_adapter", _select(None, "no GDN family matches vLLM 9.9.9: x"))
    startup.register()
    assert fresh_state[0].getMessage().endswith("plugin inert: no GDN family matches vLLM 9.9.9: x")


@pytest.mark.parametrize(
    "environ",
    [
        {},
        {"CAOVAN_REQUIRE_TURBO3": "maybe"},
        {"CAOVAN_REQUIRE_TURBO3": "0", "CAOVAN_GDN_LEGACY_DISABLE": "1"},
        {"CAOVAN_LOG_COUNTERS": "sometimes", "CAOVAN_REQUIRE": "1"},
        {"CAOVAN_REQUIRE_TURBO3": "on", "CAOVAN_LOG_COUNTERS": "1"},
    ],
)
def test_start_up_acts_on_the_shared_environment_verdict(fresh_state, monkeypatch, environ):
    # Issue 32: doctor said PASS for CAOVAN_REQUIRE_TURBO3=maybe, which start-up refuses. Start-up's verdict is
    # options.check_environment's, the one doctor and serve report: a FAIL is its refusal, each WARN one warning line.
    from caovan.plugin.options import FAIL, check_environment

    for name, value in environ.items():
        monkeypatch.setenv(name, value)
    findings = check_environment()
    monkeypatch.setattr(caovan.adapters, "select_adapter", _select(_Adapter(), "family=gdn-linear-attn-v020"))
    failures = [f.message for f in findings if f.level == FAIL]
    if failures:
        with pytest.raises(startup.CaovanRequireError) as refused:
            startup.register()
        assert str(refused.value) == "caovan_sm75_turbo3: " + "; ".join(failures)
        return
    startup.register()
    warnings = [r.getMessage() for r in fresh_state if r.levelno == logging.WARNING]
    assert warnings == [f"caovan_sm75_turbo3: {f.message}" for f in findings]


@pytest.mark.parametrize("require", [False, True])
def test_a_recognised_family_caovan_does_not_serve_leaves_the_plugin_inert_with_its_refusal(
    fresh_state, monkeypatch, require
):
    from caovan.adapters.families import QWEN3_NEXT_GDN_V010 as refused

    reason = f"vLLM 0.10.2 is F1 {refused.family_id}; caovan does not serve it: {refused.refusal}"
    monkeypatch.setattr(caovan.adapters, "select_adapter", lambda: Selection("0.10.2", None, reason, refused=refused))
    if require:
        monkeypatch.setenv("CAOVAN_REQUIRE_TURBO3", "1")
        with pytest.raises(startup.CaovanRequireError, match="caovan does not serve it: the op runs the whole layer"):
            startup.register()
        return
    startup.register()
    line = fresh_state[0].getMessage()
    assert f"GDN interface check: FAIL, plugin inert: {reason}" in line and startup.status().family_id is None
