from pathlib import Path

from caovan import runtime_guards
from caovan.runtime_guards import apply_guards, base_cache_dir, isolated_cache_dir, plan_guards


def test_sm75_host_gets_flashinfer_sampler_guard_and_isolated_cache(tmp_path):
    env = {"XDG_CACHE_HOME": str(tmp_path)}
    guards = {g.name: g for g in plan_guards([(7, 5), (7, 5)], env)}
    assert guards["flashinfer_sampler"].applies and guards["flashinfer_sampler"].value == "0"
    assert guards["flashinfer_sampler"].why == "disabled-sm75-guard (sm75=2/2)"
    cache = Path(guards["triton_cache"].value)
    assert cache.parent.parent == tmp_path / "caovan-sm75-turbo3"


def test_user_settings_are_never_overridden():
    env = {"VLLM_USE_FLASHINFER_SAMPLER": "1", "TRITON_CACHE_DIR": "/mine"}
    guards = plan_guards([(7, 5)], env)
    assert all(not g.applies and g.why == "set by the user" for g in guards)


def test_non_sm75_host_is_left_alone():
    assert not any(g.applies for g in plan_guards([(9, 0)], {}))
    assert not any(g.applies for g in plan_guards([], {}))


def test_apply_fills_defaults_only(monkeypatch, tmp_path):
    monkeypatch.setattr(runtime_guards, "nvml_capabilities", lambda: [(7, 5)])
    env = {"XDG_CACHE_HOME": str(tmp_path), "TRITON_CACHE_DIR": "/mine"}
    apply_guards(env)
    assert env["VLLM_USE_FLASHINFER_SAMPLER"] == "0"
    assert env["TRITON_CACHE_DIR"] == "/mine"


def test_cache_dir_env_and_stack_isolation(tmp_path):
    assert base_cache_dir({"CAOVAN_CACHE_DIR": str(tmp_path / "c")}) == tmp_path / "c"
    name = isolated_cache_dir({"CAOVAN_CACHE_DIR": str(tmp_path)}).name
    assert name.startswith("caovan0.1.0-py") and "-torch" in name
