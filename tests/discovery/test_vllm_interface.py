"""Interface discovery against the real vLLM installed in this environment (tier `discovery`)."""

import logging
from importlib.metadata import entry_points

import pytest

from caovan import PLUGIN_NAME, plugin
from caovan.adapters import ADAPTERS, probe_all, select_adapter
from caovan.adapters.base import installed_vllm_version, version_in
from caovan.adapters.registry import recognised_family
from caovan.plugin import startup

pytestmark = pytest.mark.discovery


def _hinted_family(version: str) -> str | None:
    matches = [a.family_id for a in ADAPTERS if version_in(version, a.version_hint)]
    return matches[0] if matches else None


def test_installed_vllm_lands_in_its_family(vllm_module):
    version = installed_vllm_version()
    assert version == vllm_module.__version__
    selection = select_adapter()
    # A release in no family fails the tier with what moved: a pass would put it in the table as discovered. One
    # outside every hint may still land by probing. A family caovan recognises but does not serve lands with its
    # refusal, which the row's result (its family reason) and the table then show.
    landed = selection.refused.family_id if selection.refused is not None else selection.family_id
    assert landed is not None, selection.reason
    expected = _hinted_family(version)
    if expected is not None:
        assert landed == expected, selection.reason
    if selection.refused is not None:
        assert selection.adapter is None and selection.refused.refusal in selection.reason
        print(f"recognised, not served: {selection.reason}")


def test_every_hook_point_is_reported(vllm_module):
    for report in probe_all():
        assert report.hook_points, report.family_id
        for hook in report.hook_points:
            assert hook.detail, hook.name
        if report.hint_matches:
            missing = [h for h in report.hook_points if not h.found]
            assert not missing, f"{report.family_id}: {missing}"


def test_hooked_kernels_are_the_ones_vllm_calls(vllm_module):
    """The family record must name the kernels vLLM's GDN module calls, not the FLA package's originals."""
    import importlib
    import inspect

    family, _ = recognised_family()
    layer_cls = getattr(importlib.import_module(family.gdn_module), family.gdn_class)
    source = inspect.getsource(getattr(layer_cls, family.core_method))
    for name in (*(kernel for kernel, _ in family.spec_path), "spec_state_indices_tensor"):
        assert name in source, f"{family.gdn_class}.{family.core_method} does not call {name}"


def _init_names(cls: type) -> tuple[str, ...]:
    code = getattr(vars(cls)["__init__"], "__code__", None)
    return code.co_names if code is not None else ()


def test_the_layer_has_what_the_envelope_check_reads(vllm_module):
    """The adapter judges a layer against the kernels' envelope from its heads, activation, conv weight and state
    dtypes (``layer_support.envelope_reasons``), right after vLLM's ``__init__``."""
    from types import SimpleNamespace

    import torch

    from caovan.adapters.override import in_tree_class

    family, refusal = recognised_family()
    if refusal is not None:
        pytest.skip(f"no layer of this release is ever judged: {refusal}")
    layer_cls = in_tree_class(family)
    # From vLLM 0.22 a base class's __init__ sets some of them (tp_size, activation): any class of the MRO counts.
    assigned = {name for cls in layer_cls.__mro__ if "__init__" in vars(cls) for name in _init_names(cls)}
    for name in ("tp_size", "num_k_heads", "num_v_heads", "head_k_dim", "head_v_dim", "activation", "conv1d"):
        assert name in assigned, name
    # The state dtypes vLLM allocates the caches with, from the configs __init__ keeps (Qwen3.5: an fp32 SSM state;
    # before vLLM 0.18 one dtype for both, mamba_cache_dtype's).
    import inspect

    from vllm.model_executor.layers.mamba.mamba_utils import MambaStateDtypeCalculator

    layer = SimpleNamespace(
        model_config=SimpleNamespace(dtype=torch.float16),
        cache_config=SimpleNamespace(mamba_cache_dtype="auto", mamba_ssm_cache_dtype="float32"),
    )
    own_ssm_dtype = (
        "mamba_ssm_cache_dtype" in inspect.signature(MambaStateDtypeCalculator.gated_delta_net_state_dtype).parameters
    )
    expected = (torch.float16, torch.float32 if own_ssm_dtype else torch.float16)
    assert layer_cls.get_state_dtype(layer) == expected


def test_entry_point_is_discovered_by_vllm(vllm_module):
    ours = [ep for ep in entry_points(group="vllm.general_plugins") if ep.name == PLUGIN_NAME]
    assert ours and ours[0].value == "caovan.plugin:register", "is caovan installed in this environment?"
    from vllm.plugins import load_plugins_by_group

    loaded = load_plugins_by_group("vllm.general_plugins")
    assert PLUGIN_NAME in loaded
    assert loaded[PLUGIN_NAME] is plugin.register


def test_vllm_plugins_filter_is_honoured(vllm_module, monkeypatch):
    from vllm.plugins import load_plugins_by_group

    monkeypatch.setenv("VLLM_PLUGINS", "some_other_plugin")
    # vllm.envs caches nothing for VLLM_PLUGINS in 0.2x: the loader reads it at call time.
    assert PLUGIN_NAME not in load_plugins_by_group("vllm.general_plugins")


def test_register_is_idempotent_in_real_vllm(vllm_module, monkeypatch):
    monkeypatch.setattr(startup, "_state", startup._PluginState())
    records: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = records.append
    startup.logger.addHandler(handler)
    # vLLM 0.31 configures its loggers when its CLI or engine starts, no longer on import: INFO passes here either way.
    level = startup.logger.level
    startup.logger.setLevel(logging.INFO)
    try:
        from vllm.plugins import load_plugins_by_group

        funcs = load_plugins_by_group("vllm.general_plugins")
        for _ in range(3):  # vLLM calls it once per process, plugins may be loaded repeatedly
            funcs[PLUGIN_NAME]()
    finally:
        startup.logger.removeHandler(handler)
        startup.logger.setLevel(level)
    assert len(records) == 1
    line = records[0].getMessage()
    assert f"vLLM {vllm_module.__version__}" in line
    assert startup.status().family_id == select_adapter().family_id


def test_doctor_reports_family(vllm_module, capsys):
    from caovan.cli import main

    code = main(["doctor", "--json"])
    import json

    facts = json.loads(capsys.readouterr().out)
    assert facts["vllm"] == vllm_module.__version__
    assert facts["discovery"]["discovered"] is True
    healthy = facts["ok"] and facts["kernels"]["ok"] and all(c["writable"] for c in facts["caches"])
    assert (code == 0) == healthy
    selection = select_adapter()
    assert facts["family"] == selection.family_id
    if selection.refused is not None:  # doctor judges as start-up does: FAIL, with the refusal
        assert facts["family_refused"]["family"] == selection.refused.family_id
        assert not facts["ok"] and selection.refused.refusal in facts["result"]["verdict"]
    # The kernels compile for this GPU, or ahead of time for sm_75 where there is none.
    assert facts["kernels"]["ok"], facts["kernels"]
    assert {g["guard"] for g in facts["guards"]} == {"flashinfer_sampler", "triton_cache"}
