"""Requests, batches and the GDN attention metadata vLLM's builder makes from them."""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from dataclasses import dataclass, fields
from typing import Any

import torch

from .layer import TinyGdnModel, null_block_id

#: Where ``CommonAttentionMetadata`` lives, newest first (``backends.utils`` before vLLM 0.19).
COMMON_METADATA_MODULES = ("vllm.v1.attention.backend", "vllm.v1.attention.backends.utils")


def make_metadata_builder(
    layer: Any,
    layer_names: list[str],
    vllm_config: Any,
    device: torch.device,
    *,
    full_cuda_graph: bool,
    min_graph_tokens: int = 64,
) -> Any:
    """vLLM's GDN metadata builder, with or without the full-CUDA-graph persistent buffers.

    The builder reads ``compilation_config.cudagraph_mode`` once, at construction; the engine resolves it to
    FULL_AND_PIECEWISE for hybrid models by default (full graphs for uniform spec-decode batches) and to NONE
    under ``--enforce-eager``.  Both are set here explicitly so each test knows which branch of ``build()`` runs.
    ``min_graph_tokens``: the persistent buffers must hold padded batches of at least this many tokens.
    """
    from vllm.config.compilation import CUDAGraphMode

    from caovan.adapters.registry import installed_family

    metadata_module = importlib.import_module(installed_family().metadata_module)
    GDNAttentionMetadataBuilder = metadata_module.GDNAttentionMetadataBuilder
    compilation = vllm_config.compilation_config
    saved = compilation.cudagraph_mode, compilation.max_cudagraph_capture_size
    compilation.cudagraph_mode = CUDAGraphMode.FULL_AND_PIECEWISE if full_cuda_graph else CUDAGraphMode.NONE
    cap = compilation.max_cudagraph_capture_size
    if cap is None or (full_cuda_graph and not cap):
        # 0 means this config resolved CUDA graphs off (the buffers would be empty), None no cap. The cap given
        # instead is the builder's own bound (vLLM 0.12 takes min() of the two, later releases skip a None cap).
        num_spec = vllm_config.speculative_config.num_speculative_tokens
        compilation.max_cudagraph_capture_size = vllm_config.scheduler_config.max_num_seqs * (num_spec + 1)
    try:
        builder = GDNAttentionMetadataBuilder(layer.get_kv_cache_spec(vllm_config), layer_names, vllm_config, device)
        if full_cuda_graph:
            _map_batches_to_themselves(compilation)
    finally:
        compilation.cudagraph_mode, compilation.max_cudagraph_capture_size = saved
    if builder.use_full_cuda_graph is not full_cuda_graph:
        raise AssertionError(f"builder.use_full_cuda_graph={builder.use_full_cuda_graph}, wanted {full_cuda_graph}")
    if full_cuda_graph and builder.decode_cudagraph_max_bs < min_graph_tokens:
        raise AssertionError(
            f"GDN builder holds CUDA-graph batches of {builder.decode_cudagraph_max_bs} tokens, "
            f"tests need {min_graph_tokens}"
        )
    return builder


def _map_batches_to_themselves(compilation: Any) -> None:
    """vLLM 0.12's graph-padded branch pads the batch once more (``vllm_config.pad_for_cudagraph``), through a map
    the engine computes from its capture sizes. Here every batch the tests build is taken as captured, as the
    runner hands the builder batches already padded to a capture size."""
    if getattr(compilation, "bs_to_padded_graph_size", ()) is not None:
        return  # a later vLLM without the map, or one the engine computed
    sizes = compilation.cudagraph_capture_sizes
    compilation.cudagraph_capture_sizes = list(range(1, compilation.max_cudagraph_capture_size + 1))
    try:
        compilation.compute_bs_to_padded_graph_size()
    finally:
        compilation.cudagraph_capture_sizes = sizes


@dataclass(frozen=True)
class Request:
    """One scheduled request, as GPUModelRunner describes it to the attention builders."""

    query_len: int  # tokens scheduled this step (0: CUDA-graph padding request)
    context_len: int  # tokens computed before this step
    draft_tokens: int  # num_decode_draft_tokens: drafts being verified, -1 for none (prefill / padding)
    num_accepted: int  # tokens the previous step accepted (vLLM keeps 1 for requests without drafts)
    blocks: tuple[int, ...]  # block-table row: 1 + num_spec block ids, null_block_id() = no block
    prefilling: bool = False  # still in its prompt (vLLM's is_prefilling: num_computed_tokens < prompt length)


def spec_request(model: TinyGdnModel, blocks: Sequence[int], num_accepted: int, context_len: int = 40) -> Request:
    t = model.tokens_per_spec_request
    if not 1 <= num_accepted <= t:
        raise ValueError(f"spec_request: num_accepted={num_accepted} outside 1..{t}")
    return Request(t, context_len, model.num_spec, num_accepted, tuple(blocks))


def prefill_request(model: TinyGdnModel, blocks: Sequence[int], query_len: int, context_len: int) -> Request:
    return Request(query_len, context_len, -1, 1, tuple(blocks), prefilling=True)


def padding_request(model: TinyGdnModel) -> Request:
    return Request(0, 0, -1, 1, (null_block_id(),) * model.tokens_per_spec_request)


@dataclass
class Batch:
    """Inputs of ``GDNAttentionMetadataBuilder.build`` for one step."""

    common: Any  # CommonAttentionMetadata
    num_accepted_tokens: torch.Tensor  # (num_reqs,) int32, device
    num_decode_draft_tokens_cpu: torch.Tensor  # (num_reqs,) int32, cpu
    num_tokens: int  # rows of the step's activations (padded for CUDA graphs)


def make_batch(requests: Sequence[Request], device: torch.device, num_tokens_padded: int | None = None) -> Batch:
    """CommonAttentionMetadata as GPUModelRunner._build_attention_metadata makes it.

    Padding requests have zero query length (query_start_loc repeats its last value), seq_len 0 and a
    ``null_block_id()`` block-table row; ``num_tokens_padded`` rows are scheduled in total.  The host-side copies
    are passed under the names this vLLM's ``CommonAttentionMetadata`` has (see :func:`host_side_fields`).
    """
    CommonAttentionMetadata = common_metadata_class()

    query_lens = torch.tensor([r.query_len for r in requests], dtype=torch.int32)
    context_lens = torch.tensor([r.context_len for r in requests], dtype=torch.int32)
    seq_lens = torch.where(query_lens > 0, context_lens + query_lens, torch.zeros_like(query_lens))
    query_start_loc = torch.zeros(len(requests) + 1, dtype=torch.int32)
    torch.cumsum(query_lens, dim=0, out=query_start_loc[1:])
    num_scheduled = int(query_start_loc[-1])
    num_tokens = num_scheduled if num_tokens_padded is None else num_tokens_padded
    if num_tokens < num_scheduled:
        raise ValueError(f"make_batch: num_tokens_padded={num_tokens} < {num_scheduled} scheduled tokens")
    if len({len(r.blocks) for r in requests}) != 1:
        raise ValueError("make_batch: every block-table row must have the same length")
    block_table = torch.tensor([list(r.blocks) for r in requests], dtype=torch.int32)
    common = CommonAttentionMetadata(
        query_start_loc=query_start_loc.to(device),
        query_start_loc_cpu=query_start_loc,
        seq_lens=seq_lens.to(device),
        num_reqs=len(requests),
        num_actual_tokens=num_tokens,
        max_query_len=int(query_lens.max()),
        max_seq_len=int(seq_lens.max()),
        block_table_tensor=block_table.to(device),
        slot_mapping=torch.zeros(num_tokens, dtype=torch.int64, device=device),
        **host_side_fields(
            CommonAttentionMetadata,
            seq_lens,
            seq_lens - query_lens,
            torch.tensor([r.prefilling for r in requests], dtype=torch.bool),
        ),
    )
    return Batch(
        common=common,
        num_accepted_tokens=torch.tensor([r.num_accepted for r in requests], dtype=torch.int32).to(device),
        num_decode_draft_tokens_cpu=torch.tensor([r.draft_tokens for r in requests], dtype=torch.int32),
        num_tokens=num_tokens,
    )


def common_metadata_class() -> type:
    for name in COMMON_METADATA_MODULES:
        try:
            cls = getattr(importlib.import_module(name), "CommonAttentionMetadata", None)
        except ModuleNotFoundError:
            continue
        if cls is not None:
            return cls
    raise ImportError(f"no CommonAttentionMetadata in {', '.join(COMMON_METADATA_MODULES)}")


def host_side_fields(
    cls: type, seq_lens: torch.Tensor, num_computed: torch.Tensor, prefilling: torch.Tensor
) -> dict[str, torch.Tensor]:
    """The CPU copies GPUModelRunner hands the builders, under this vLLM's field names: ``seq_lens_cpu`` /
    ``num_computed_tokens_cpu`` (vLLM 0.12), with a leading underscore (0.16 - 0.25), ``seq_lens_cpu_upper_bound``
    (0.21 on; exact here, as no request is speculative about its length) and ``is_prefilling`` (0.19 on)."""
    offered = {
        "seq_lens_cpu": seq_lens,
        "_seq_lens_cpu": seq_lens,
        "num_computed_tokens_cpu": num_computed,
        "_num_computed_tokens_cpu": num_computed,
        "seq_lens_cpu_upper_bound": seq_lens,
        "is_prefilling": prefilling,
    }
    names = {f.name for f in fields(cls)}
    return {name: value for name, value in offered.items() if name in names}


def build_metadata(builder: Any, batch: Batch) -> Any:
    """What GPUModelRunner calls for every step when speculative decoding is on."""
    return builder.build(
        common_prefix_len=0,
        common_attn_metadata=batch.common,
        num_accepted_tokens=batch.num_accepted_tokens,
        num_decode_draft_tokens_cpu=batch.num_decode_draft_tokens_cpu,
    )


def build_capture_metadata(builder: Any, batch: Batch) -> Any:
    """What GPUModelRunner calls while capturing full CUDA graphs."""
    return builder.build_for_cudagraph_capture(batch.common)
