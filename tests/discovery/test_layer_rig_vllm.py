"""The layer rig (``caovan.bench.vllm_layer_rig``) against the row's real vLLM, on CPU (tier ``discovery``).

The kernel tier's layer-equivalence test and ``caovan bench layer`` build vLLM's GDN layer, bind its caches and
have vLLM's metadata builder describe a step, all through the rig, which reads the family record for what moved
between releases (constructor arguments, install route, cache binding, null block, metadata fields).  Those runs
need a GPU; this builds the same objects on CPU in every row, so that a family record the rig misreads fails here,
on the CPU matrix, before a GPU run is spent on it.  Nothing runs a kernel.

Two CPU-only shims, both of vLLM's device plumbing and neither of what is checked: the layer asks
``current_platform.current_device()`` for where to put its parameters (a CPU-only install has no platform), and
vLLM's builders pin host memory where ``PIN_MEMORY`` says a GPU is there to copy to.
"""

from __future__ import annotations

import importlib
import importlib.util
from pathlib import Path

import pytest
import torch

from caovan.bench.vllm_layer_rig import (
    TinyGdnModel,
    allocate_and_bind_cache,
    build_gdn_layer,
    build_metadata,
    caovan_override_class,
    cpu_device_plumbing,
    ensure_single_process_distributed,
    make_batch,
    make_metadata_builder,
    make_vllm_config,
    null_block_id,
    padding_request,
    prefill_request,
    shutdown_distributed,
    spec_request,
    write_model_dir,
)

pytestmark = pytest.mark.discovery

CPU = torch.device("cpu")
MODELS = (
    TinyGdnModel("qwen3_next", 2, 4, 16, 2, torch.float16),
    TinyGdnModel("qwen3_5", 2, 6, 16, 3, torch.bfloat16),
)


@pytest.fixture
def rig_on_cpu():
    with cpu_device_plumbing():
        yield


@pytest.fixture
def rig(served_release, rig_on_cpu, tmp_path: Path, request):
    """A vLLM config of the tiny model and a world of one around it; yields (model, config off, config on)."""
    model: TinyGdnModel = request.param
    if model.family == "qwen3_5" and importlib.util.find_spec("vllm.model_executor.models.qwen3_5") is None:
        pytest.skip("this vLLM has no Qwen3.5 (no vllm/model_executor/models/qwen3_5.py)")
    model_dir = write_model_dir(model, tmp_path / model.id)
    config_off = make_vllm_config(model, model_dir, caovan=False, device="cpu")
    config_on = make_vllm_config(model, model_dir, caovan=True, device="cpu")
    started = ensure_single_process_distributed(config_off)
    yield model, config_off, config_on
    if started:
        shutdown_distributed()


@pytest.mark.parametrize("rig", MODELS, ids=[m.id for m in MODELS], indirect=True)
def test_rig_builds_both_layers_binds_caches_and_describes_steps(rig):
    from caovan.adapters.override import in_tree_class
    from caovan.adapters.registry import installed_family

    model, config_off, config_on = rig
    family = installed_family()
    in_tree = build_gdn_layer(config_off, model, "model.layers.0.linear_attn", CPU, caovan=False)
    assert type(in_tree) is in_tree_class(family)
    assert not hasattr(in_tree, "_caovan_plan"), "vLLM's own layer must be built without caovan's take-over"
    ours = build_gdn_layer(config_on, model, "model.layers.1.linear_attn", CPU, caovan=True)
    assert type(ours) is caovan_override_class()
    assert hasattr(ours, "_caovan_plan")

    # The cache as the core reads it (kv_cache[0] / [1], behind the virtual engine's index before vLLM 0.19).
    cache = allocate_and_bind_cache(in_tree, config_off, 16, CPU)
    states = in_tree.kv_cache[0] if family.kv_cache_per_virtual_engine else in_tree.kv_cache
    assert states[0] is cache.conv and states[1] is cache.ssm
    assert cache.ssm.shape[1:] == (
        (model.num_v_heads, model.head_dim, model.head_dim)  # (HV, V, K) or (HV, K, V): square here
    )
    assert cache.conv.shape[0] == cache.ssm.shape[0] == 16

    t = model.tokens_per_spec_request
    eager = make_metadata_builder(in_tree, [in_tree.prefix], config_off, CPU, full_cuda_graph=False)
    mixed = build_metadata(
        eager, make_batch([spec_request(model, range(1, 1 + t), 2), prefill_request(model, [9] * t, 5, 0)], CPU)
    )
    assert (mixed.num_spec_decodes, mixed.num_prefills, mixed.num_decodes) == (1, 1, 0)
    assert mixed.spec_state_indices_tensor[0].tolist() == list(range(1, 1 + t))
    assert mixed.num_accepted_tokens[0].item() == 2

    graphs = make_metadata_builder(in_tree, [in_tree.prefix], config_off, CPU, full_cuda_graph=True)
    requests = [spec_request(model, range(1, 1 + t), 1), spec_request(model, range(5, 5 + t), t)]
    requests.append(padding_request(model))
    padded = build_metadata(graphs, make_batch(requests, CPU, num_tokens_padded=3 * t))
    assert padded.num_spec_decodes == 2
    # Rows the builder makes: the live ones alone before vLLM 0.17 (it counts the padding request as an empty
    # prefill, so no graph-padded branch, unless caovan's patch is in: the next test), one per token of the padded
    # batch up to 0.23, one per request from 0.24 (the layer tier's padded-batch test reads each).
    assert padded.spec_state_indices_tensor.shape[0] in (2, 3, 3 * t), padded.spec_state_indices_tensor.shape
    live = padded.spec_state_indices_tensor[:2].tolist()
    assert live == [list(range(1, 1 + t)), list(range(5, 5 + t))]
    # Every other state index (the padding request's, which vLLM before 0.17 counts as an empty prefill, and the
    # builder's buffer padding) is the null block.
    rest = [padded.spec_state_indices_tensor[2:]]
    if padded.non_spec_state_indices_tensor is not None:
        rest.append(padded.non_spec_state_indices_tensor)
    assert all((r == null_block_id()).all() for r in rest), rest


@pytest.mark.parametrize("rig", MODELS[:1], ids=[MODELS[0].id], indirect=True)
def test_padded_spec_batch_takes_the_graph_branch(rig):
    """vLLM issue 31649: the graph-padding patch's source probe (``plugin/graph_padding_patch.py``) against what this
    row's real builder does with a padded spec batch, and the patch making a builder that needs it take its
    graph-padded branch."""
    from caovan.adapters.registry import installed_family
    from caovan.plugin import graph_padding_patch as patch

    model, config_off, _ = rig
    family = installed_family()
    in_tree = build_gdn_layer(config_off, model, "model.layers.0.linear_attn", CPU, caovan=False)
    allocate_and_bind_cache(in_tree, config_off, 16, CPU)
    graphs = make_metadata_builder(in_tree, [in_tree.prefix], config_off, CPU, full_cuda_graph=True)
    builder = type(graphs)
    assert patch.in_tree_builder(family) is builder
    t = model.tokens_per_spec_request
    live = [spec_request(model, range(1, 1 + t), 1), spec_request(model, range(5, 5 + t), t)]
    batch = make_batch([*live, padding_request(model)], CPU, num_tokens_padded=3 * t)

    unpatched = build_metadata(graphs, batch)
    counts = patch.counts_padding_as_prefill(builder)
    assert counts is not None, f"{builder.__qualname__}.build no longer computes num_prefills from the query lengths"
    assert unpatched.num_prefills == int(counts), (f"the probe says counts_padding_as_prefill={counts}", unpatched)
    if not counts:
        assert patch.judgement(family) is None and patch.install(family) is False
        return
    original = builder.__dict__[patch.METHOD]
    try:
        assert patch.install(family) is True and builder.__dict__[patch.METHOD]._caovan_wrapped is original
        assert patch.install(family) is True and builder.__dict__[patch.METHOD]._caovan_wrapped is original  # once
        padded = build_metadata(graphs, batch)
    finally:
        assert patch.uninstall(family) is True and builder.__dict__[patch.METHOD] is original
    assert (padded.num_prefills, padded.num_decodes, padded.num_spec_decodes) == (0, 0, 2), padded
    # The graph-padded branch, as vLLM 0.17 - 0.23 lay it out: one row per token of the padded batch, the live
    # ones first, then the null slot with zero tokens and one accepted token.
    rows = padded.spec_state_indices_tensor
    assert rows.shape[0] == 3 * t and rows[:2].tolist() == [list(range(1, 1 + t)), list(range(5, 5 + t))]
    assert (rows[2:] == null_block_id()).all(), rows
    assert padded.spec_query_start_loc.tolist() == [0, t, 2 * t] + [2 * t] * (3 * t - 2)
    assert padded.num_accepted_tokens.tolist() == [1, t] + [1] * (3 * t - 2)
    assert padded.spec_state_indices_tensor.data_ptr() == graphs.spec_state_indices_tensor.data_ptr()


@pytest.mark.parametrize("rig", MODELS[:1], ids=[MODELS[0].id], indirect=True)
def test_caovans_prefill_takes_the_real_layers_prefill_call(rig, monkeypatch):
    """With ``"caovan_prefill": true`` the real layer's prefill call is caovan's, where the family record says. The
    layer is built on the CPU, so caovan's decision is told it runs on a 7.5 CUDA device (vLLM is not)."""
    from caovan.adapters import layer_support, prefill_hook
    from caovan.adapters.registry import installed_family

    model, _, config_on = rig
    family = installed_family()
    config_on.additional_config["caovan_prefill"] = True
    monkeypatch.setattr(layer_support, "platform_is_cuda", lambda: True)
    monkeypatch.setattr(layer_support, "current_gpu_capability", lambda: (7, 5))
    try:
        layer = build_gdn_layer(config_on, model, "model.layers.2.linear_attn", CPU, caovan=True)
        assert layer._caovan_prefill is True
        if family.prefill_route == "module_function":
            call = getattr(importlib.import_module(family.gdn_module), prefill_hook.PREFILL_NAME)
            assert call._caovan_prefill_original is not None
        else:
            call = getattr(layer, prefill_hook.PREFILL_NAME)
            assert isinstance(call, prefill_hook.CaovanChunkGatedDeltaRule)
            assert type(call.in_tree).__name__ == "ChunkGatedDeltaRule"
    finally:
        prefill_hook.uninstall_module_function(family)
