"""Real-layer equivalence (tier ``kernel``, CUDA GPU): vLLM's GDN core vs caovan's override of it.

Two layers are built from one tiny model (Qwen3-Next or Qwen3.5 layout) through ``GatedDeltaNetAttention(...)``
inside vLLM's config context: the in-tree class, and caovan's subclass (registered the way ``install()`` does,
enabled by ``additional_config {"caovan": true}``).  They get the same weights, identical caches allocated as
vLLM allocates them, the same inputs and metadata made by vLLM's own ``GDNAttentionMetadataBuilder``; each runs
``_forward_core``, and the outputs and both caches are compared.

What is compared, and how closely:

* Output rows of live spec sequences.  vLLM leaves garbage in rows of sequences whose state slots are the null
  block and in CUDA-graph padding rows, so those rows are excluded (``live_spec_rows``).
* Conv state: exactly.  It only ever holds copies of input activations; any difference is a wrong window.
* SSM state and outputs: within ``TOLERANCES``.  Both implementations keep the recurrent state in fp32 inside
  the kernel and round to the cache/activation dtype on every store; vLLM additionally rounds the conv output
  to the activation dtype before the recurrence.  Those roundings differ by a few ulp (fp16 ulp ~1e-3,
  bf16 ~8e-3 at magnitude 1; states reach ~3 here), so the bounds are 2e-2 (fp16) and 5e-2 (bf16) absolute
  plus the same relative.  Real mistakes (wrong head mapping, accepted-token offset, gating, missing L2 norm)
  move values by O(0.1–1).
* Spec rows and spec blocks are also compared with caovan's fp64 reference
  (``caovan.kernels.gdn_spec_decode.naive.gdn_spec_decode_reference``), called with arguments written from
  the kernel contract rather than taken from the layer, at the same tolerance.
* All cache blocks except the null block 0 are compared, so stray writes to unrelated blocks fail too.

Runtime on an H200: about a minute, mostly Triton compilation (vLLM's chunked-prefill kernels are restricted
to one autotune configuration, see ``fla_autotune_first_config_only``).
"""

from __future__ import annotations

import importlib
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import torch
from helpers.gpu_visibility import visible_note as cuda_visible_note

from caovan.bench.vllm_layer_rig import (
    CoreInputs,
    MambaCache,
    TinyGdnModel,
    allocate_and_bind_cache,
    allocate_cache,
    build_capture_metadata,
    build_gdn_layer,
    build_metadata,
    caovan_override_class,
    ensure_single_process_distributed,
    fla_autotune_first_config_only,
    live_spec_rows,
    make_batch,
    make_metadata_builder,
    make_vllm_config,
    new_core_output,
    non_spec_rows,
    null_block_id,
    padding_request,
    prefill_request,
    random_core_inputs,
    randomize_parameters_,
    reference_arguments,
    run_core,
    shutdown_distributed,
    spec_blocks,
    spec_request,
    write_model_dir,
)

pytestmark = pytest.mark.kernel

F16, BF16 = torch.float16, torch.bfloat16

#: HV/H ratios 1, 2, 3; K = V in {32, 128}; 1..3 speculative tokens; both activation dtypes; SSM cache in the
#: activation dtype ("auto") or fp32 (what Qwen3.5 configs often ask for).
MODEL_CASES = [
    TinyGdnModel("qwen3_next", num_k_heads=2, num_v_heads=2, head_dim=128, num_spec=1, dtype=BF16),
    TinyGdnModel(
        "qwen3_next", num_k_heads=2, num_v_heads=6, head_dim=32, num_spec=3, dtype=F16, ssm_cache_dtype="float32"
    ),
    TinyGdnModel("qwen3_5", num_k_heads=2, num_v_heads=4, head_dim=128, num_spec=2, dtype=F16),
    TinyGdnModel(
        "qwen3_5", num_k_heads=1, num_v_heads=3, head_dim=32, num_spec=3, dtype=BF16, ssm_cache_dtype="float32"
    ),
]
#: The prefill path, graph capture and full forward cost extra compilation: one model of each family, both fp16
#: (the activation dtype on SM75).
SUBSET = [MODEL_CASES[1], MODEL_CASES[2]]

TOLERANCES = {F16: {"atol": 2e-2, "rtol": 2e-2}, BF16: {"atol": 5e-2, "rtol": 5e-2}}

NUM_BLOCKS = 24  # null block 0, up to 16 blocks in use, the rest must stay untouched


def _ids(models: list[TinyGdnModel]) -> list[str]:
    return [m.id for m in models]


# ---------------------------------------------------------------------------------------------------------------
# The rig: both layers of one model, their caches and metadata builders.


@dataclass
class Rig:
    model: TinyGdnModel
    model_dir: Path
    config: Any  # VllmConfig with {"caovan": true}
    device: torch.device
    in_tree: Any
    caovan: Any
    in_tree_cache: MambaCache
    caovan_cache: MambaCache
    eager_builder: Any  # cudagraph_mode NONE (--enforce-eager)
    graph_builder: Any  # cudagraph_mode FULL_AND_PIECEWISE (the default for hybrid models)
    block_order: list[int] = field(default_factory=list)

    def block_rows(self, count: int) -> list[tuple[int, ...]]:
        """``count`` block-table rows of distinct real blocks, scattered (not in request order)."""
        t = self.model.tokens_per_spec_request
        if count * t > len(self.block_order):
            raise ValueError(f"block_rows: {count} rows of {t} blocks exceed the {len(self.block_order)} blocks")
        return [tuple(self.block_order[i * t : (i + 1) * t]) for i in range(count)]

    def reset_caches(self, seed: int) -> None:
        self.in_tree_cache.fill_random_(seed)
        self.caovan_cache.copy_from_(self.in_tree_cache)

    def scratch_cache(self) -> MambaCache:
        """A cache laid out like the layers' (for the reference run), bound to no layer."""
        return allocate_cache(self.in_tree, self.config, NUM_BLOCKS, self.device)


def build_rig(model: TinyGdnModel, workdir: Path, device: torch.device, vllm_device: str | None = None) -> Rig:
    model_dir = write_model_dir(model, workdir / model.id)
    config = make_vllm_config(model, model_dir, caovan=True, device=vllm_device)
    ensure_single_process_distributed(config)  # layers look up the TP group when they are built
    in_tree = build_gdn_layer(config, model, "model.layers.0.linear_attn", device, caovan=False)
    caovan = build_gdn_layer(config, model, "model.layers.1.linear_attn", device, caovan=True)
    randomize_parameters_(in_tree, seed=1)
    caovan.load_state_dict(in_tree.state_dict())
    names = [in_tree.prefix, caovan.prefix]
    order = torch.randperm(NUM_BLOCKS - 1, generator=torch.Generator().manual_seed(7)) + 1  # never block 0
    return Rig(
        model=model,
        model_dir=model_dir,
        config=config,
        device=device,
        in_tree=in_tree,
        caovan=caovan,
        in_tree_cache=allocate_and_bind_cache(in_tree, config, NUM_BLOCKS, device),
        caovan_cache=allocate_and_bind_cache(caovan, config, NUM_BLOCKS, device),
        eager_builder=make_metadata_builder(in_tree, names, config, device, full_cuda_graph=False),
        graph_builder=make_metadata_builder(in_tree, names, config, device, full_cuda_graph=True),
        block_order=order.tolist(),
    )


class RigFactory:
    """Builds each model's rig once (module scope), and tears the distributed world down at the end."""

    def __init__(self, workdir: Path, device: torch.device, vllm_device: str | None = None) -> None:
        self.workdir, self.device, self.vllm_device = workdir, device, vllm_device
        self.rigs: dict[str, Rig] = {}

    def __call__(self, model: TinyGdnModel) -> Rig:
        if model.id not in self.rigs:
            self.rigs[model.id] = build_rig(model, self.workdir, self.device, self.vllm_device)
        return self.rigs[model.id]

    def close(self) -> None:
        self.rigs.clear()
        shutdown_distributed()


@pytest.fixture(scope="module")
def rig_factory(tmp_path_factory):
    if not torch.cuda.is_available():
        pytest.skip(f"no CUDA GPU: the real vLLM GDN layer runs its Triton kernels on CUDA only{cuda_visible_note()}")
    factory = RigFactory(tmp_path_factory.mktemp("tiny_models"), torch.device("cuda"))
    yield factory
    factory.close()
    torch.cuda.empty_cache()


@pytest.fixture(autouse=True)
def _no_autograd():
    # vLLM runs the model under inference mode; the layers' parameters require grad, and the PyTorch reference
    # would otherwise record autograd history into the caches it writes.
    with torch.no_grad():
        yield


# ---------------------------------------------------------------------------------------------------------------
# One step through both layers (and the fp64 reference), then every comparison.


def _assert_close(actual: torch.Tensor, expected: torch.Tensor, what: str, *, exact: bool = False, **tol) -> None:
    if exact:
        tol = {"atol": 0.0, "rtol": 0.0}
    torch.testing.assert_close(actual.double(), expected.double(), **tol, msg=lambda m: f"{what}\n{m}")


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _max_err(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.double() - b.double()).abs().max()) if a.numel() else 0.0


def _reference_kernel() -> Callable[..., None]:
    """caovan's plain-PyTorch fp64 reference of the spec-decode kernels (``naive.py`` beside them)."""
    return importlib.import_module("caovan.kernels.gdn_spec_decode.naive").gdn_spec_decode_reference


def check_step(
    rig: Rig,
    metadata: Any,
    inputs: CoreInputs,
    *,
    expect_kind: str,
    scenario: str,
    cache_seed: int,
    spec_judged_by_reference_only: bool = False,
) -> None:
    """Run one step through vLLM's core, caovan's core and the fp64 reference; compare everything.

    ``spec_judged_by_reference_only``: vLLM 0.21's mixed-batch spec branch reads ``a``/``b`` of spec token i from
    batch row i (not from ``spec_token_indx[i]``), so when a non-spec token precedes the spec tokens its spec
    outputs and SSM states are wrong; there caovan's spec part is judged by the reference alone.
    """
    from caovan.plugin import counters

    gdn_spec_decode_reference = _reference_kernel()
    model = rig.model
    where = f"[{model.id} / {scenario}]"
    num_tokens = inputs.qkv_buffer.shape[0]
    mixed = bool(metadata.num_prefills or metadata.num_decodes)

    rig.reset_caches(cache_seed)
    reference_cache = rig.scratch_cache()
    reference_cache.copy_from_(rig.in_tree_cache)

    out_vllm = new_core_output(model, num_tokens, rig.device)
    run_core(rig.in_tree, metadata, rig.config, inputs.clone(), out_vllm)  # vLLM's conv writes into mixed_qkv

    counters.reset()
    out_caovan = new_core_output(model, num_tokens, rig.device)
    run_core(rig.caovan, metadata, rig.config, inputs.clone(), out_caovan)
    snap = counters.snapshot()
    assert snap["dispatched"] == {expect_kind: 1} and not snap["fallbacks"], (
        f"{where} caovan's core should have dispatched one {expect_kind!r} step, counters say {snap}"
    )

    out_ref = new_core_output(model, num_tokens, rig.device)
    args, kwargs = reference_arguments(
        rig.in_tree,
        metadata,
        inputs.clone(),
        reference_cache.conv,
        reference_cache.ssm,
        out_ref,
        metadata.spec_token_indx if mixed else None,
    )
    gdn_spec_decode_reference(*args, **kwargs)
    _sync(rig.device)

    tol = TOLERANCES[model.dtype]
    rows = live_spec_rows(metadata).to(rig.device)
    assert rows.numel() > 0, f"{where} test setup: no live spec rows"
    vllm_vs_ref = (
        f"(for scale: max|vLLM - fp64 reference| on these rows = {_max_err(out_vllm[rows], out_ref[rows]):.3g})"
    )
    if not spec_judged_by_reference_only:
        _assert_close(
            out_caovan[rows], out_vllm[rows], f"{where} spec-token outputs, caovan vs vLLM {vllm_vs_ref}", **tol
        )
    _assert_close(out_caovan[rows], out_ref[rows], f"{where} spec-token outputs, caovan vs fp64 reference", **tol)
    if mixed:
        other = non_spec_rows(metadata).to(rig.device)
        _assert_close(out_caovan[other], out_vllm[other], f"{where} non-spec outputs (vLLM's core in both)", **tol)

    written_by_spec = spec_blocks(metadata)
    all_blocks = list(range(null_block_id() + 1, NUM_BLOCKS))
    ssm_vs_vllm = [b for b in all_blocks if not (spec_judged_by_reference_only and b in written_by_spec)]
    conv_c, ssm_c = rig.caovan_cache.conv, rig.caovan_cache.ssm
    conv_v, ssm_v = rig.in_tree_cache.conv, rig.in_tree_cache.ssm
    _assert_close(
        conv_c[all_blocks], conv_v[all_blocks], f"{where} conv state (blocks 1..), caovan vs vLLM", exact=True
    )
    _assert_close(
        ssm_c[ssm_vs_vllm], ssm_v[ssm_vs_vllm], f"{where} SSM state, caovan vs vLLM, blocks {ssm_vs_vllm}", **tol
    )
    _assert_close(
        conv_c[written_by_spec],
        reference_cache.conv[written_by_spec],
        f"{where} conv state of spec blocks vs reference",
        exact=True,
    )
    _assert_close(
        ssm_c[written_by_spec],
        reference_cache.ssm[written_by_spec],
        f"{where} SSM state of spec blocks vs reference",
        **tol,
    )


# ---------------------------------------------------------------------------------------------------------------
# Scenarios.


def _pure_spec_requests(rig: Rig, count: int) -> list:
    t = rig.model.tokens_per_spec_request
    rows = rig.block_rows(count)
    return [spec_request(rig.model, rows[i], num_accepted=(i % t) + 1) for i in range(count)]


@pytest.mark.parametrize("model", MODEL_CASES, ids=_ids(MODEL_CASES))
def test_pure_spec_batch(rig_factory: Callable[[TinyGdnModel], Rig], model: TinyGdnModel) -> None:
    """Eager step (``--enforce-eager`` builder); every accepted-token count 1..T occurs."""
    rig = rig_factory(model)
    batch = make_batch(_pure_spec_requests(rig, 4), rig.device)
    md = build_metadata(rig.eager_builder, batch)
    assert (md.num_spec_decodes, md.num_prefills, md.num_decodes) == (4, 0, 0), md
    inputs = random_core_inputs(model, batch.num_tokens, seed=11, device=rig.device)
    check_step(rig, md, inputs, expect_kind="spec", scenario="pure spec", cache_seed=12)


@pytest.mark.parametrize("model", MODEL_CASES, ids=_ids(MODEL_CASES))
def test_cudagraph_capture_metadata(rig_factory, model) -> None:
    """Metadata from ``build_for_cudagraph_capture`` (persistent buffers), with a null-block sequence inside."""
    rig = rig_factory(model)
    t = model.tokens_per_spec_request
    rows = rig.block_rows(4)
    rows[2] = (null_block_id(),) * t
    batch = make_batch([spec_request(model, r, num_accepted=1) for r in rows], rig.device)
    md = build_capture_metadata(rig.graph_builder, batch)
    assert md.num_spec_decodes == 4, md
    # build_for_cudagraph_capture derives num_accepted_tokens from the query lengths: every draft accepted.
    assert md.num_accepted_tokens[:4].tolist() == [t] * 4, md.num_accepted_tokens
    inputs = random_core_inputs(model, batch.num_tokens, seed=21, device=rig.device)
    check_step(rig, md, inputs, expect_kind="spec", scenario="capture metadata", cache_seed=22)


@pytest.mark.parametrize("model", MODEL_CASES, ids=_ids(MODEL_CASES))
def test_full_graph_padded_batch(rig_factory, model) -> None:
    """``build()``'s full-CUDA-graph branch: 3 live requests padded to 4 requests / 4*T tokens."""
    from caovan.adapters.registry import installed_family
    from caovan.plugin import graph_padding_patch

    rig = rig_factory(model)
    t = model.tokens_per_spec_request
    batch = make_batch(_pure_spec_requests(rig, 3) + [padding_request(model)], rig.device, num_tokens_padded=4 * t)
    # Before vLLM 0.17 the builder takes this branch only with caovan's patch (vLLM issue 31649), as a server with
    # caovan on builds it.
    family = installed_family()
    patched = graph_padding_patch.install(family)
    try:
        md = build_metadata(rig.graph_builder, batch)
    finally:
        if patched:
            graph_padding_patch.uninstall(family)
    assert patched is bool(graph_padding_patch.counts_padding_as_prefill(type(rig.graph_builder)))
    assert md.num_spec_decodes == 3, md
    # Padded rows as vLLM makes them: null_block_id() slots, zero-length query ranges, num_accepted_tokens 1. Up to
    # vLLM 0.23 the builder makes one per token of the padded batch (4*T), from 0.24 one per request (4).
    rows = md.spec_state_indices_tensor.shape[0]
    assert rows in (4, 4 * t), md.spec_state_indices_tensor.shape
    assert md.num_accepted_tokens.shape[0] == rows, md.num_accepted_tokens.shape
    assert (md.spec_state_indices_tensor[3:] == null_block_id()).all(), md.spec_state_indices_tensor
    assert md.spec_query_start_loc[3:].tolist() == [3 * t] * (rows - 2), md.spec_query_start_loc
    assert (md.num_accepted_tokens[3:] == 1).all(), md.num_accepted_tokens
    inputs = random_core_inputs(model, batch.num_tokens, seed=31, device=rig.device)
    check_step(rig, md, inputs, expect_kind="spec", scenario="full-graph padded", cache_seed=32)


@pytest.mark.parametrize("model", SUBSET, ids=_ids(SUBSET))
def test_mixed_prefill_and_spec_batch(rig_factory, model) -> None:
    """Spec requests first (vLLM's decode-first reorder), then a fresh and a continued prefill."""
    rig = rig_factory(model)
    t = model.tokens_per_spec_request
    rows = rig.block_rows(4)
    requests = [
        spec_request(model, rows[0], num_accepted=t),
        spec_request(model, rows[1], num_accepted=1),
        prefill_request(model, rows[2], query_len=7, context_len=0),
        prefill_request(model, rows[3], query_len=5, context_len=12),
    ]
    batch = make_batch(requests, rig.device)
    md = build_metadata(rig.eager_builder, batch)
    assert (md.num_spec_decodes, md.num_prefills, md.num_decodes) == (2, 2, 0), md
    assert md.spec_token_indx.tolist() == list(range(2 * t)), md.spec_token_indx
    inputs = random_core_inputs(model, batch.num_tokens, seed=41, device=rig.device)
    with fla_autotune_first_config_only() as restricted:
        assert restricted > 0, "found no FLA autotuners to restrict: vLLM's fla.ops layout changed"
        check_step(rig, md, inputs, expect_kind="mixed", scenario="mixed prefill + spec", cache_seed=42)


@pytest.mark.parametrize("model", SUBSET[:1], ids=_ids(SUBSET[:1]))
def test_mixed_batch_with_non_spec_token_first(rig_factory, model) -> None:
    """A 1-token request without drafts ahead of the spec requests: spec tokens sit at ``spec_token_indx``."""
    rig = rig_factory(model)
    t = model.tokens_per_spec_request
    rows = rig.block_rows(4)
    requests = [
        prefill_request(model, rows[0], query_len=1, context_len=30),  # decode-sized, no drafts
        spec_request(model, rows[1], num_accepted=2),
        spec_request(model, rows[2], num_accepted=t),
        prefill_request(model, rows[3], query_len=6, context_len=0),
    ]
    batch = make_batch(requests, rig.device)
    md = build_metadata(rig.eager_builder, batch)
    # vLLM reclassifies the 1-token request as a prefill when spec requests are present.
    assert (md.num_spec_decodes, md.num_prefills, md.num_decodes) == (2, 2, 0), md
    assert md.spec_token_indx.tolist() == list(range(1, 1 + 2 * t)), md.spec_token_indx
    inputs = random_core_inputs(model, batch.num_tokens, seed=51, device=rig.device)
    with fla_autotune_first_config_only():
        check_step(
            rig,
            md,
            inputs,
            expect_kind="mixed",
            scenario="non-spec token first",
            cache_seed=52,
            spec_judged_by_reference_only=True,
        )


@pytest.mark.parametrize("model", SUBSET, ids=_ids(SUBSET))
def test_cuda_graph_capture_and_replay(rig_factory, model) -> None:
    """Capture caovan's core as vLLM does (capture metadata, all slots null), replay with real padded steps.

    Each replay follows vLLM's runner: ``build()`` refills the builder's persistent buffers the graph reads, and
    the step's activations are copied into the captured input tensors.  The replay must equal caovan's eager run
    of the same step (same kernels: up to 2 ulp) and match vLLM's eager core (``TOLERANCES``).
    """
    from caovan.plugin import counters

    rig = rig_factory(model)
    t = model.tokens_per_spec_request
    dev = rig.device
    num_tokens = 4 * t
    where = f"[{model.id} / CUDA graph]"

    capture_batch = make_batch([spec_request(model, (null_block_id(),) * t, num_accepted=1)] * 4, dev)
    capture_md = build_capture_metadata(rig.graph_builder, capture_batch)
    static_inputs = random_core_inputs(model, num_tokens, seed=61, device=dev)
    static_out = new_core_output(model, num_tokens, dev)

    rig.reset_caches(62)
    untouched = rig.caovan_cache.raw.clone()
    run_core(rig.caovan, capture_md, rig.config, static_inputs, static_out)  # warm-up: compile outside capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    counters.reset()
    from vllm.forward_context import set_forward_context

    with set_forward_context({rig.caovan.prefix: capture_md}, rig.config), torch.cuda.graph(graph):
        rig.caovan._forward_core(static_inputs.mixed_qkv, static_inputs.b, static_inputs.a, static_out)
    torch.cuda.synchronize()
    assert counters.snapshot()["dispatched"] == {"spec": 1}, counters.snapshot()
    assert torch.equal(rig.caovan_cache.raw, untouched), f"{where} warm-up/capture with null slots wrote the cache"

    tol = TOLERANCES[model.dtype]
    replay_tol = {"atol": 2 * torch.finfo(model.dtype).eps, "rtol": 2 * torch.finfo(model.dtype).eps}
    block_rows = rig.block_rows(4)
    # Round 2 has fewer live requests and other blocks in another order: nothing of round 1 may be baked in.
    for round_no, rows in ((1, block_rows[0:3]), (2, [block_rows[3], block_rows[1]])):
        live = len(rows)
        requests = [spec_request(model, rows[i], num_accepted=(i + round_no) % t + 1) for i in range(live)]
        batch = make_batch(requests + [padding_request(model)] * (4 - live), dev, num_tokens_padded=num_tokens)
        md = build_metadata(rig.graph_builder, batch)
        for name in ("spec_state_indices_tensor", "spec_query_start_loc", "num_accepted_tokens"):
            assert getattr(md, name).data_ptr() == getattr(capture_md, name).data_ptr(), (
                f"{where} {name} is not the captured persistent buffer"
            )
        step_inputs = random_core_inputs(model, num_tokens, seed=70 + round_no, device=dev)
        static_inputs.copy_(step_inputs)
        rig.reset_caches(80 + round_no)
        initial = rig.caovan_cache.raw.clone()

        graph.replay()
        torch.cuda.synchronize()
        replay_out = static_out.clone()
        replay_conv, replay_ssm = rig.caovan_cache.snapshot()

        out_vllm = new_core_output(model, num_tokens, dev)
        run_core(rig.in_tree, md, rig.config, step_inputs.clone(), out_vllm)
        rig.caovan_cache.raw.copy_(initial)
        out_eager = new_core_output(model, num_tokens, dev)
        run_core(rig.caovan, md, rig.config, step_inputs.clone(), out_eager)
        torch.cuda.synchronize()

        live_rows = live_spec_rows(md).to(dev)
        blocks = list(range(null_block_id() + 1, NUM_BLOCKS))
        tag = f"{where} replay {round_no} ({live} live requests)"
        _assert_close(
            replay_out[live_rows], out_eager[live_rows], f"{tag}: outputs, replay vs caovan eager", **replay_tol
        )
        _assert_close(
            replay_conv[blocks], rig.caovan_cache.conv[blocks], f"{tag}: conv state, replay vs eager", exact=True
        )
        _assert_close(
            replay_ssm[blocks], rig.caovan_cache.ssm[blocks], f"{tag}: SSM state, replay vs eager", **replay_tol
        )
        _assert_close(replay_out[live_rows], out_vllm[live_rows], f"{tag}: outputs, replay vs vLLM eager", **tol)
        _assert_close(replay_conv[blocks], rig.in_tree_cache.conv[blocks], f"{tag}: conv state vs vLLM", exact=True)
        _assert_close(replay_ssm[blocks], rig.in_tree_cache.ssm[blocks], f"{tag}: SSM state vs vLLM", **tol)
    del graph


@pytest.mark.parametrize("model", SUBSET, ids=_ids(SUBSET))
def test_layer_forward_reaches_caovan_core_through_vllm_custom_op(rig_factory, model) -> None:
    """``layer.forward`` -> in_proj -> ``torch.ops.vllm.gdn_attention_core`` -> the instance's ``_forward_core``."""
    from vllm.forward_context import set_forward_context

    from caovan.plugin import counters

    rig = rig_factory(model)
    where = f"[{model.id} / forward]"
    batch = make_batch(_pure_spec_requests(rig, 3), rig.device)
    md = build_metadata(rig.eager_builder, batch)
    gen = torch.Generator().manual_seed(91)
    hidden = torch.randn(batch.num_tokens, model.hidden_size, generator=gen).to(rig.device, model.dtype)
    out_vllm = torch.zeros_like(hidden)
    out_caovan = torch.zeros_like(hidden)
    rig.reset_caches(92)
    counters.reset()
    with set_forward_context({rig.in_tree.prefix: md, rig.caovan.prefix: md}, rig.config):
        rig.in_tree.forward(hidden, out_vllm)
        rig.caovan.forward(hidden, out_caovan)
    _sync(rig.device)
    assert counters.snapshot()["dispatched"] == {"spec": 1}, f"{where} {counters.snapshot()}"
    # The gated RMSNorm rescales each head's core output before out_proj: compare relative to the output scale.
    tol = TOLERANCES[model.dtype]
    scale = float(out_vllm.abs().max())
    _assert_close(
        out_caovan, out_vllm, f"{where} layer output, caovan vs vLLM", atol=tol["atol"] * scale, rtol=tol["rtol"]
    )
    blocks = list(range(null_block_id() + 1, NUM_BLOCKS))
    _assert_close(rig.caovan_cache.conv[blocks], rig.in_tree_cache.conv[blocks], f"{where} conv state", exact=True)
    _assert_close(rig.caovan_cache.ssm[blocks], rig.in_tree_cache.ssm[blocks], f"{where} SSM state", **tol)


def test_dim_first_conv_state_layout(rig_factory, tmp_path) -> None:
    """``VLLM_SSM_CONV_STATE_LAYOUT=DS``: conv state stored (dim, L) per block, passed without a transpose."""
    from vllm.model_executor.layers.mamba import mamba_utils

    model = MODEL_CASES[2]
    saved = os.environ.get("VLLM_SSM_CONV_STATE_LAYOUT")
    os.environ["VLLM_SSM_CONV_STATE_LAYOUT"] = "DS"
    mamba_utils.get_conv_state_layout.cache_clear()
    try:
        assert mamba_utils.is_conv_state_dim_first(), "VLLM_SSM_CONV_STATE_LAYOUT=DS was not picked up"
        rig = build_rig(model, tmp_path, rig_factory.device, rig_factory.vllm_device)
        assert rig.caovan._caovan_plan is not None and rig.caovan._caovan_plan.conv_dim_first
        state_len = model.conv_width - 1 + model.num_spec
        assert tuple(rig.in_tree_cache.conv.shape[1:]) == (model.conv_dim, state_len), rig.in_tree_cache.conv.shape
        batch = make_batch(_pure_spec_requests(rig, 4), rig.device)
        md = build_metadata(rig.eager_builder, batch)
        inputs = random_core_inputs(model, batch.num_tokens, seed=101, device=rig.device)
        check_step(rig, md, inputs, expect_kind="spec", scenario="dim-first conv state", cache_seed=102)
    finally:
        if saved is None:
            os.environ.pop("VLLM_SSM_CONV_STATE_LAYOUT", None)
        else:
            os.environ["VLLM_SSM_CONV_STATE_LAYOUT"] = saved
        mamba_utils.get_conv_state_layout.cache_clear()
    assert not mamba_utils.is_conv_state_dim_first() or saved == "DS"


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def test_switch_off_keeps_in_tree_core_and_activation_line_logs_once(rig_factory) -> None:
    """Without ``{"caovan": true}`` caovan's class keeps vLLM's core; with it the activation line appears once."""
    from caovan.adapters.override import in_tree_class
    from caovan.adapters.registry import installed_family
    from caovan.log import logger as caovan_logger
    from caovan.plugin import counters

    model = MODEL_CASES[0]
    rig = rig_factory(model)
    config_off = make_vllm_config(model, rig.model_dir, caovan=False, device=rig_factory.vllm_device)
    layer_off = build_gdn_layer(config_off, model, "model.layers.2.linear_attn", rig.device, caovan=True)
    assert type(layer_off) is caovan_override_class()
    assert layer_off._caovan_plan is None
    core = installed_family().core_method
    assert core not in vars(layer_off), "switch off: no instance-bound core expected"
    assert getattr(layer_off, core).__func__ is getattr(in_tree_class(installed_family()), core)

    # Switched on, the instance carries caovan's core (a closure over the family, built by the override).
    bound = vars(rig.caovan).get(core)
    assert bound is not None and bound.__func__.__module__ == "caovan.adapters.override", bound
    assert bound.__func__.__name__ == "caovan_forward_core", bound

    randomize_parameters_(layer_off, seed=1)
    allocate_and_bind_cache(layer_off, config_off, NUM_BLOCKS, rig.device).fill_random_(3)
    batch = make_batch(_pure_spec_requests(rig, 2), rig.device)
    md = build_metadata(rig.eager_builder, batch)
    inputs = random_core_inputs(model, batch.num_tokens, seed=111, device=rig.device)

    records = _Records()
    saved_level = caovan_logger.level
    caovan_logger.addHandler(records)
    caovan_logger.setLevel(logging.INFO)
    try:
        counters.reset()
        run_core(layer_off, md, config_off, inputs.clone(), new_core_output(model, batch.num_tokens, rig.device))
        assert counters.snapshot()["dispatched"] == {}, f"switch off, yet caovan dispatched: {counters.snapshot()}"
        assert not counters.snapshot()["activation_logged"]
        for _ in range(2):
            run_core(rig.caovan, md, rig.config, inputs.clone(), new_core_output(model, batch.num_tokens, rig.device))
    finally:
        caovan_logger.removeHandler(records)
        caovan_logger.setLevel(saved_level)
    snap = counters.snapshot()
    assert snap["activation_logged"] and snap["dispatched"] == {"spec": 2}, snap
    lines = [m for m in records.messages if counters.ACTIVE_LINE in m]
    assert len(lines) == 1, f"activation line should be logged exactly once, got {lines}"
    family_id = installed_family().family_id
    assert f"layer={rig.caovan.prefix}" in lines[0] and f"family={family_id}" in lines[0], lines[0]
