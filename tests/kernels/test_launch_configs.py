"""Launch configurations as data: the SM75 values users know, and the lookup by capability."""

from __future__ import annotations

import pytest

from caovan.kernels.gdn_spec_decode.launch_configs import (
    ALL_LAUNCH_CONFIGS,
    LAUNCH_CONFIGS,
    config_for,
)


def test_sm75_values_are_turbo3s():
    sm75 = LAUNCH_CONFIGS["sm75"]
    assert (sm75.qk.num_warps, sm75.qk.num_stages) == (2, 1)
    assert (sm75.v_gdn.num_warps, sm75.v_gdn.num_stages, sm75.v_gdn.BV) == (2, 1, 32)
    assert sm75.tuned


def test_untuned_placeholders_say_so():
    for config in ALL_LAUNCH_CONFIGS:
        if not config.tuned:
            assert "untuned" in config.note


@pytest.mark.parametrize(
    "capability,arch",
    [
        ((7, 5), "sm75"),
        (75, "sm75"),
        ("sm_75", "sm75"),
        ((8, 6), "sm75"),
        ((8, 9), "sm75"),
        ((9, 0), "sm90"),
        ("sm90", "sm90"),
        ((12, 0), "sm90"),
    ],
)
def test_config_for_picks_exact_or_nearest_lower(capability, arch):
    assert config_for(capability).arch == arch


@pytest.mark.parametrize("capability", [(7, 0), 61, "sm_70"])
def test_config_for_refuses_pre_turing(capability):
    with pytest.raises(ValueError, match="no launch configuration for sm"):
        config_for(capability)


def test_config_for_rejects_garbage():
    with pytest.raises(ValueError, match="capability"):
        config_for("turing")


def test_direct_launch_hook_detection_understands_triton_hook_chains(monkeypatch):
    """Triton 3.6 stores launch hooks in a HookChain that is never None: an empty chain is no hook."""
    import caovan.kernels.gdn_spec_decode as spec

    class Chain:
        def __init__(self, calls):
            self.calls = calls

    monkeypatch.setattr(spec.knobs.runtime, "launch_enter_hook", Chain([]))
    monkeypatch.setattr(spec.knobs.runtime, "launch_exit_hook", Chain([]))
    assert not spec._launch_hooks_set()
    monkeypatch.setattr(spec.knobs.runtime, "launch_enter_hook", Chain([print]))
    assert spec._launch_hooks_set()
    monkeypatch.setattr(spec.knobs.runtime, "launch_enter_hook", None)
    assert not spec._launch_hooks_set()
    monkeypatch.setattr(spec.knobs.runtime, "launch_exit_hook", print)
    assert spec._launch_hooks_set()
