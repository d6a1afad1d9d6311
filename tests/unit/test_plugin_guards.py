import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from caovan.plugin import guards
from caovan.plugin.guards import (
    GUARDS_ENV,
    apply_guards,
    base_cache_dir,
    isolated_cache_dir,
    nvml_capabilities,
    plan_guards,
    visible_indices,
)


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
    monkeypatch.setattr(guards, "nvml_capabilities", lambda environ=None: [(7, 5)])
    env = {"XDG_CACHE_HOME": str(tmp_path), "TRITON_CACHE_DIR": "/mine"}
    report = apply_guards(env)
    assert env["VLLM_USE_FLASHINFER_SAMPLER"] == "0"
    assert env["TRITON_CACHE_DIR"] == "/mine"
    assert report.tokens() == "sm75=1/1 flashinfer_sampler=disabled-sm75-guard triton_cache=set-by-user"


def test_cache_dir_env_and_stack_isolation(tmp_path):
    assert base_cache_dir({"CAOVAN_CACHE_DIR": str(tmp_path / "c")}) == tmp_path / "c"
    name = isolated_cache_dir({"CAOVAN_CACHE_DIR": str(tmp_path)}).name
    assert name.startswith("caovan0.1.0-py") and "-torch" in name


@pytest.mark.parametrize(
    "value, status",
    [("0", "disabled-by-user"), ("1", "enabled-by-user"), ("true", "set-by-user")],
)
def test_sampler_token_says_what_the_user_set(value, status):
    guards = {g.name: g for g in plan_guards([(7, 5)], {"VLLM_USE_FLASHINFER_SAMPLER": value})}
    assert guards["flashinfer_sampler"].status == status


def test_tokens_without_sm75_are_left_to_the_defaults():
    guards = {g.name: g for g in plan_guards([(9, 0)], {})}
    assert guards["flashinfer_sampler"].status == "default" and guards["triton_cache"].status == "default"


def test_processes_started_after_the_guard_still_report_it(monkeypatch, tmp_path):
    # vLLM's workers inherit the front end's environment: the guard's values must not read as the user's there.
    monkeypatch.setattr(guards, "nvml_capabilities", lambda environ=None: [(7, 5), (8, 6)])
    front_end = {"CAOVAN_CACHE_DIR": str(tmp_path)}
    assert apply_guards(front_end).tokens() == ("sm75=1/2 flashinfer_sampler=disabled-sm75-guard triton_cache=isolated")
    assert front_end[GUARDS_ENV] == "VLLM_USE_FLASHINFER_SAMPLER,TRITON_CACHE_DIR"
    worker = dict(front_end)
    assert apply_guards(worker).tokens() == "sm75=1/2 flashinfer_sampler=disabled-sm75-guard triton_cache=isolated"
    assert worker == front_end
    worker["VLLM_USE_FLASHINFER_SAMPLER"] = "1"  # changed after the guard: the user's
    assert "flashinfer_sampler=enabled-by-user" in apply_guards(worker).tokens()


def test_visible_indices_follow_cuda_visible_devices():
    uuids = ["GPU-aaaa-1", "GPU-bbbb-2", "GPU-cccc-3"]
    assert visible_indices(None, uuids) == [0, 1, 2]
    assert visible_indices("", uuids) == []
    assert visible_indices("2, 0", uuids) == [2, 0]
    assert visible_indices("0,7,1", uuids) == [0]  # CUDA stops at the first entry naming no GPU
    assert visible_indices("-1", uuids) == []
    assert visible_indices("GPU-bbbb", uuids) == [1]
    assert visible_indices("1,1", uuids) == [1]
    assert visible_indices("MIG-1234", uuids) == [None]


def test_nvml_capabilities_count_only_the_visible_gpus(monkeypatch):
    caps = [(8, 6), (7, 5), (7, 5)]
    fake = SimpleNamespace(
        nvmlInit=lambda: None,
        nvmlShutdown=lambda: None,
        nvmlDeviceGetCount=lambda: len(caps),
        nvmlDeviceGetHandleByIndex=lambda i: i,
        nvmlDeviceGetUUID=lambda h: f"GPU-{h}",
        nvmlDeviceGetCudaComputeCapability=lambda h: caps[h],
    )
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    assert nvml_capabilities({}) == caps
    assert nvml_capabilities({"CUDA_VISIBLE_DEVICES": "1"}) == [(7, 5)]
    assert nvml_capabilities({"CUDA_VISIBLE_DEVICES": "0,2"}) == [(8, 6), (7, 5)]


@pytest.mark.parametrize(
    ("cuda", "hip", "tag"),
    [
        ("13.0", None, "cu130"),
        ("12.8", None, "cu128"),
        (None, None, "cpu"),
        (None, "6.4.43482-0f2d60242", "rocm6.4.43482"),
    ],
)
def test_cache_folder_is_isolated_per_cuda_version(monkeypatch, tmp_path, cuda, hip, tag):
    torch = pytest.importorskip("torch")
    monkeypatch.setattr(torch.version, "cuda", cuda)
    monkeypatch.setattr(torch.version, "hip", hip)
    name = isolated_cache_dir({"CAOVAN_CACHE_DIR": str(tmp_path)}).name
    assert name.endswith(f"-{tag}") and "-torch" in name
