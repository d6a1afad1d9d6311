"""Build vLLM's real GatedDeltaNet layer (family ``gdn-linear-attn-v020``: vLLM 0.20 – 0.21) the way vLLM does.

Everything the layer core touches comes from vLLM's own code, not from stand-ins:

* the model: a tiny ``config.json`` (Qwen3-Next or Qwen3.5 layout) parsed by ``ModelConfig``; the layer is built
  from ``model_config.hf_text_config`` with the ``gqa_interleaved_layout`` that ``models/qwen3_next.py`` (True)
  and ``models/qwen3_5.py`` (False) pass, inside ``set_current_vllm_config`` and the default dtype/device the
  model loader sets;
* speculative decoding: a real ``SpeculativeConfig(method="ngram")`` (the one speculative method that needs no
  draft model; the layer and the metadata builder only read ``num_speculative_tokens``);
* the caches: allocated exactly as ``GPUModelRunner._reshape_kv_cache_tensors`` does for a ``MambaSpec`` (one
  int8 buffer per layer, conv state then SSM state inside each page, page-strided views) and bound as
  ``layer.kv_cache = [conv_state, ssm_state]`` like ``bind_kv_cache``;
* the metadata: ``GDNAttentionMetadataBuilder.build`` / ``build_for_cudagraph_capture`` on a
  ``CommonAttentionMetadata`` shaped like the one ``GPUModelRunner`` passes (padded requests have zero length
  and a NULL_BLOCK_ID block-table row, ``num_decode_draft_tokens`` is -1 for requests without drafts).

Import cost: only torch at import time; vLLM is imported inside the functions that need it.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import pkgutil
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

#: vLLM >= 0.20 reserves block 0 as the null block: padded requests point there and kernels skip it.
NULL_BLOCK_ID = 0
MAX_MODEL_LEN = 512
FAMILIES = ("qwen3_next", "qwen3_5")

_DTYPE_NAMES = {torch.float16: "float16", torch.bfloat16: "bfloat16", torch.float32: "float32"}


@dataclass(frozen=True)
class TinyGdnModel:
    """A tiny model of one family: only the GDN shapes matter, the rest is the smallest valid config."""

    family: str  # "qwen3_next" (gqa_interleaved_layout=True) or "qwen3_5" (False)
    num_k_heads: int  # H
    num_v_heads: int  # HV
    head_dim: int  # K = V
    num_spec: int  # --speculative-config num_speculative_tokens
    dtype: torch.dtype  # model / activation dtype
    ssm_cache_dtype: str = "auto"  # --mamba-ssm-cache-dtype ("auto" follows dtype)
    conv_width: int = 4
    hidden_size: int = 64

    def __post_init__(self) -> None:
        if self.family not in FAMILIES:
            raise ValueError(f"TinyGdnModel.family: expected one of {FAMILIES}, got {self.family!r}")
        if self.num_v_heads % self.num_k_heads:
            raise ValueError(
                f"TinyGdnModel: num_v_heads={self.num_v_heads} must be a multiple of num_k_heads={self.num_k_heads}"
            )
        if self.dtype not in _DTYPE_NAMES:
            raise ValueError(f"TinyGdnModel.dtype: expected one of {list(_DTYPE_NAMES)}, got {self.dtype}")

    @property
    def id(self) -> str:
        return (
            f"{self.family}-h{self.num_k_heads}-hv{self.num_v_heads}-k{self.head_dim}-mtp{self.num_spec}"
            f"-{_DTYPE_NAMES[self.dtype]}-ssm_{self.ssm_cache_dtype}"
        )

    @property
    def tokens_per_spec_request(self) -> int:
        return self.num_spec + 1

    @property
    def gqa_interleaved_layout(self) -> bool:
        return self.family == "qwen3_next"

    @property
    def conv_dim(self) -> int:
        return 2 * self.num_k_heads * self.head_dim + self.num_v_heads * self.head_dim

    def hf_config(self) -> dict[str, Any]:
        """config.json contents; 4 layers with full_attention_interval 4 -> layers 0-2 are GDN layers."""
        text = {
            "hidden_size": self.hidden_size,
            "num_hidden_layers": 4,
            "full_attention_interval": 4,
            "linear_num_key_heads": self.num_k_heads,
            "linear_num_value_heads": self.num_v_heads,
            "linear_key_head_dim": self.head_dim,
            "linear_value_head_dim": self.head_dim,
            "linear_conv_kernel_dim": self.conv_width,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "head_dim": 16,
            "intermediate_size": 128,
            "vocab_size": 256,
            "max_position_embeddings": 4096,
            "hidden_act": "silu",
            "rms_norm_eps": 1e-6,
        }
        if self.family == "qwen3_next":
            return {
                "architectures": ["Qwen3NextForCausalLM"],
                "model_type": "qwen3_next",
                "torch_dtype": _DTYPE_NAMES[self.dtype],
                "moe_intermediate_size": 32,
                "shared_expert_intermediate_size": 32,
                "num_experts": 4,
                "num_experts_per_tok": 2,
                **text,
            }
        text.update(
            model_type="qwen3_5_text",
            dtype=_DTYPE_NAMES[self.dtype],
            rope_parameters={
                "rope_type": "default",
                "rope_theta": 10000000,
                "partial_rotary_factor": 0.25,
                "mrope_section": [2, 1, 1],
                "mrope_interleaved": True,
            },
        )
        return {
            # Qwen3.5 checkpoints are published as the multimodal class; vLLM builds its text model from
            # hf_text_config with Qwen3_5DecoderLayer (gqa_interleaved_layout=False).
            "architectures": ["Qwen3_5ForConditionalGeneration"],
            "model_type": "qwen3_5",
            "text_config": text,
            "vision_config": {
                "depth": 1,
                "hidden_size": 32,
                "num_heads": 2,
                "intermediate_size": 64,
                "out_hidden_size": self.hidden_size,
                "patch_size": 16,
                "spatial_merge_size": 2,
                "temporal_patch_size": 2,
                "in_channels": 3,
                "num_position_embeddings": 64,
            },
            "image_token_id": 250,
            "video_token_id": 251,
            "vision_start_token_id": 252,
            "vision_end_token_id": 253,
            "tie_word_embeddings": False,
        }


def write_model_dir(model: TinyGdnModel, directory: Path) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "config.json").write_text(json.dumps(model.hf_config(), indent=1))
    return directory


def make_vllm_config(
    model: TinyGdnModel,
    model_dir: Path,
    *,
    caovan: bool,
    device: str | None = None,
) -> Any:
    """A VllmConfig as the engine builds it for ``--speculative-config '{"method": "ngram", ...}'``.

    ``caovan``: put ``{"caovan": true}`` into ``additional_config`` (caovan's enable switch).
    ``gdn_prefill_backend: triton``: on SM90 vLLM would otherwise pick FlashInfer's GDN prefill, which is
    JIT-compiled on first use (minutes); the Triton/FLA prefill is vLLM's other production path.
    Prefix caching is off, so the mamba cache mode is "none" (block table = 1 + num_spec blocks per request).
    ``device``: ``"cpu"`` only for checks on machines without a GPU; None lets vLLM pick (CUDA).
    """
    from vllm.config import CacheConfig, DeviceConfig, ModelConfig, ParallelConfig, SpeculativeConfig, VllmConfig

    model_config = ModelConfig(
        model=str(model_dir),
        skip_tokenizer_init=True,
        dtype=_DTYPE_NAMES[model.dtype],
        max_model_len=MAX_MODEL_LEN,
    )
    parallel_config = ParallelConfig()
    speculative_config = SpeculativeConfig(
        method="ngram",
        num_speculative_tokens=model.num_spec,
        target_model_config=model_config,
        target_parallel_config=parallel_config,
    )
    additional: dict[str, Any] = {"gdn_prefill_backend": "triton"}
    if caovan:
        additional["caovan"] = True
    extra = {} if device is None else {"device_config": DeviceConfig(device=device)}
    config = VllmConfig(
        model_config=model_config,
        parallel_config=parallel_config,
        cache_config=CacheConfig(enable_prefix_caching=False, mamba_ssm_cache_dtype=model.ssm_cache_dtype),
        speculative_config=speculative_config,
        additional_config=additional,
        **extra,
    )
    if config.speculative_config.num_speculative_tokens != model.num_spec:
        raise AssertionError(f"VllmConfig dropped the speculative config: {config.speculative_config}")
    return config


def ensure_single_process_distributed(vllm_config: Any) -> bool:
    """A world of one (TP=1, PP=1), as a single-GPU engine has.  Returns True if it was set up by this call."""
    import socket

    from vllm.config import set_current_vllm_config
    from vllm.distributed import ensure_model_parallel_initialized, init_distributed_environment
    from vllm.distributed.parallel_state import model_parallel_is_initialized

    if model_parallel_is_initialized():
        return False
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with set_current_vllm_config(vllm_config):
        init_distributed_environment(
            world_size=1,
            rank=0,
            local_rank=0,
            distributed_init_method=f"tcp://127.0.0.1:{port}",
            backend="gloo",  # one process: no collective ever runs, and gloo works on every machine
        )
        ensure_model_parallel_initialized(1, 1)
    return True


def shutdown_distributed() -> None:
    from vllm.distributed import destroy_distributed_environment, destroy_model_parallel

    destroy_model_parallel()
    destroy_distributed_environment()


@contextlib.contextmanager
def _oot_entry(layer_cls: type | None) -> Iterator[None]:
    """vLLM's PluggableLayer registry entry for GatedDeltaNetAttention set to ``layer_cls`` (None: no entry)."""
    from vllm.model_executor.custom_op import op_registry_oot

    from ..adapters.gdn_linear_attn_v020_layer import IN_TREE_NAME

    saved = op_registry_oot.pop(IN_TREE_NAME, None)
    try:
        if layer_cls is not None:
            op_registry_oot[IN_TREE_NAME] = layer_cls
        yield
    finally:
        op_registry_oot.pop(IN_TREE_NAME, None)
        if saved is not None:
            op_registry_oot[IN_TREE_NAME] = saved


_override_class: type | None = None


def caovan_override_class() -> type:
    """caovan's OOT subclass, built once per process like ``install()`` does."""
    global _override_class
    if _override_class is None:
        from vllm.model_executor.layers.mamba.gdn_linear_attn import GatedDeltaNetAttention

        from ..adapters.gdn_linear_attn_v020_layer import build_override_class

        _override_class = build_override_class(GatedDeltaNetAttention)
    return _override_class


def build_gdn_layer(vllm_config: Any, model: TinyGdnModel, prefix: str, device: torch.device, *, caovan: bool) -> Any:
    """Construct the layer through ``GatedDeltaNetAttention(...)`` as the model code does.

    ``caovan=True``: caovan's class is registered as the OOT replacement (what ``install()`` does in a serving
    process), so PluggableLayer.__new__ hands back caovan's subclass; ``caovan=False``: no replacement is
    registered, the in-tree class is built.  The registry is restored afterwards either way.
    """
    from vllm.config import set_current_vllm_config
    from vllm.model_executor.layers.mamba.gdn_linear_attn import GatedDeltaNetAttention
    from vllm.utils.torch_utils import set_default_torch_dtype

    replacement = caovan_override_class() if caovan else None
    with (
        _oot_entry(replacement),
        set_current_vllm_config(vllm_config),
        set_default_torch_dtype(vllm_config.model_config.dtype),
        torch.device(device),
    ):
        layer = GatedDeltaNetAttention(
            config=vllm_config.model_config.hf_text_config,
            vllm_config=vllm_config,
            prefix=prefix,
            gqa_interleaved_layout=model.gqa_interleaved_layout,
        )
    expected = replacement or GatedDeltaNetAttention
    if type(layer) is not expected:
        raise AssertionError(f"GatedDeltaNetAttention(...) built {type(layer).__qualname__}, expected {expected}")
    return layer


def randomize_parameters_(layer: Any, seed: int) -> None:
    """Deterministic random weights (generated on the CPU, so every device gets the same values).

    Scales keep the GDN recurrence in its working range: exp(A_log) in [0.37, 4.5] like trained models,
    conv outputs of order one.
    """
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in layer.named_parameters():
            shape = tuple(param.shape)
            if name == "A_log":
                value = torch.empty(shape).uniform_(-1.0, 1.5, generator=gen)
            elif name == "dt_bias":
                value = torch.empty(shape).uniform_(-1.0, 1.0, generator=gen)
            elif name == "conv1d.weight":
                value = torch.randn(shape, generator=gen) * 0.5
            elif name.startswith("norm."):
                value = 1.0 + 0.1 * torch.randn(shape, generator=gen)
            else:  # projections
                value = torch.randn(shape, generator=gen) * shape[-1] ** -0.5
            param.copy_(value)


@dataclass
class MambaCache:
    """One layer's cache as vLLM lays it out: ``raw`` holds both states, page after page."""

    raw: torch.Tensor  # int8, num_blocks * page_size_bytes
    conv: torch.Tensor  # (num_blocks, L, conv_dim) or (num_blocks, conv_dim, L) if dim-first; page-strided
    ssm: torch.Tensor  # (num_blocks, HV, V, K); page-strided

    @property
    def num_blocks(self) -> int:
        return self.conv.shape[0]

    def fill_random_(self, seed: int) -> None:
        gen = torch.Generator().manual_seed(seed)
        self.raw.zero_()
        self.conv.copy_(torch.randn(self.conv.shape, generator=gen).to(self.conv.dtype))
        self.ssm.copy_((0.5 * torch.randn(self.ssm.shape, generator=gen)).to(self.ssm.dtype))

    def copy_from_(self, other: MambaCache) -> None:
        self.raw.copy_(other.raw)

    def snapshot(self) -> tuple[torch.Tensor, torch.Tensor]:
        return self.conv.clone(), self.ssm.clone()


def _contiguous_strides(shape: Sequence[int]) -> tuple[int, ...]:
    strides, step = [], 1
    for size in reversed(shape):
        strides.append(step)
        step *= size
    return tuple(reversed(strides))


def allocate_cache(layer: Any, vllm_config: Any, num_blocks: int, device: torch.device) -> MambaCache:
    """``GPUModelRunner._reshape_kv_cache_tensors``, MambaSpec branch, for one layer (zero-filled)."""
    spec = layer.get_kv_cache_spec(vllm_config)
    raw = torch.zeros(num_blocks * spec.page_size_bytes, dtype=torch.int8, device=device)
    states, offset_bytes = [], 0
    for shape, dtype in zip(spec.shapes, spec.dtypes, strict=True):
        itemsize = torch.tensor([], dtype=dtype).element_size()
        target_shape = (num_blocks, *shape)
        strides = _contiguous_strides(target_shape)
        if offset_bytes % itemsize:
            raise AssertionError(f"state offset {offset_bytes} not aligned to {dtype}")
        states.append(
            torch.as_strided(
                raw.view(dtype),
                size=target_shape,
                stride=(spec.page_size_bytes // itemsize, *strides[1:]),
                storage_offset=offset_bytes // itemsize,
            )
        )
        offset_bytes += strides[0] * itemsize
    conv, ssm = states
    return MambaCache(raw=raw, conv=conv, ssm=ssm)


def bind_cache(layer: Any, cache: MambaCache) -> None:
    """What ``bind_kv_cache`` does: the layer reads ``self.kv_cache[0]`` (conv) and ``[1]`` (SSM)."""
    layer.kv_cache = [cache.conv, cache.ssm]


def allocate_and_bind_cache(layer: Any, vllm_config: Any, num_blocks: int, device: torch.device) -> MambaCache:
    cache = allocate_cache(layer, vllm_config, num_blocks, device)
    bind_cache(layer, cache)
    return cache


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
    from vllm.v1.attention.backends.gdn_attn import GDNAttentionMetadataBuilder

    compilation = vllm_config.compilation_config
    saved = compilation.cudagraph_mode, compilation.max_cudagraph_capture_size
    compilation.cudagraph_mode = CUDAGraphMode.FULL_AND_PIECEWISE if full_cuda_graph else CUDAGraphMode.NONE
    if full_cuda_graph and not compilation.max_cudagraph_capture_size:
        # 0 means this config resolved CUDA graphs off (the buffers would be empty); None means no cap.
        compilation.max_cudagraph_capture_size = None
    try:
        builder = GDNAttentionMetadataBuilder(layer.get_kv_cache_spec(vllm_config), layer_names, vllm_config, device)
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


@dataclass(frozen=True)
class Request:
    """One scheduled request, as GPUModelRunner describes it to the attention builders."""

    query_len: int  # tokens scheduled this step (0: CUDA-graph padding request)
    context_len: int  # tokens computed before this step
    draft_tokens: int  # num_decode_draft_tokens: drafts being verified, -1 for none (prefill / padding)
    num_accepted: int  # tokens the previous step accepted (vLLM keeps 1 for requests without drafts)
    blocks: tuple[int, ...]  # block-table row: 1 + num_spec block ids, NULL_BLOCK_ID = no block


def spec_request(model: TinyGdnModel, blocks: Sequence[int], num_accepted: int, context_len: int = 40) -> Request:
    t = model.tokens_per_spec_request
    if not 1 <= num_accepted <= t:
        raise ValueError(f"spec_request: num_accepted={num_accepted} outside 1..{t}")
    return Request(t, context_len, model.num_spec, num_accepted, tuple(blocks))


def prefill_request(model: TinyGdnModel, blocks: Sequence[int], query_len: int, context_len: int) -> Request:
    return Request(query_len, context_len, -1, 1, tuple(blocks))


def padding_request(model: TinyGdnModel) -> Request:
    return Request(0, 0, -1, 1, (NULL_BLOCK_ID,) * model.tokens_per_spec_request)


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
    NULL_BLOCK_ID block-table row; ``num_tokens_padded`` rows are scheduled in total.
    """
    from vllm.v1.attention.backend import CommonAttentionMetadata

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
        _seq_lens_cpu=seq_lens,
        _num_computed_tokens_cpu=seq_lens - query_lens,
    )
    return Batch(
        common=common,
        num_accepted_tokens=torch.tensor([r.num_accepted for r in requests], dtype=torch.int32).to(device),
        num_decode_draft_tokens_cpu=torch.tensor([r.draft_tokens for r in requests], dtype=torch.int32),
        num_tokens=num_tokens,
    )


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


@dataclass
class CoreInputs:
    """``mixed_qkv``, ``b``, ``a`` as ``forward_cuda`` hands them to the core.

    Qwen3.5 (gqa_interleaved_layout=False) splits ``mixed_qkv`` off the front of the in_proj_qkvz output, so its
    rows are strided by qkv+z channels; Qwen3-Next concatenates q, k, v into a contiguous tensor.  ``b``/``a``
    are contiguous in both (``.contiguous()`` / ``reshape`` copies).
    """

    qkv_buffer: torch.Tensor
    qkv_width: int
    b: torch.Tensor
    a: torch.Tensor

    @property
    def mixed_qkv(self) -> torch.Tensor:
        return self.qkv_buffer[:, : self.qkv_width]

    def clone(self) -> CoreInputs:
        return CoreInputs(self.qkv_buffer.clone(), self.qkv_width, self.b.clone(), self.a.clone())

    def copy_(self, other: CoreInputs) -> None:
        self.qkv_buffer.copy_(other.qkv_buffer)
        self.b.copy_(other.b)
        self.a.copy_(other.a)


def random_core_inputs(model: TinyGdnModel, num_tokens: int, seed: int, device: torch.device) -> CoreInputs:
    gen = torch.Generator().manual_seed(seed)
    z_width = 0 if model.gqa_interleaved_layout else model.num_v_heads * model.head_dim
    buffer = torch.randn(num_tokens, model.conv_dim + z_width, generator=gen)
    b = torch.randn(num_tokens, model.num_v_heads, generator=gen)
    a = torch.randn(num_tokens, model.num_v_heads, generator=gen)
    to = {"device": device, "dtype": model.dtype}
    return CoreInputs(buffer.to(**to), model.conv_dim, b.to(**to), a.to(**to))


def new_core_output(model: TinyGdnModel, num_tokens: int, device: torch.device) -> torch.Tensor:
    # forward_cuda allocates core_attn_out with torch.zeros (see vLLM PR 28182).
    return torch.zeros(num_tokens, model.num_v_heads, model.head_dim, dtype=model.dtype, device=device)


def run_core(layer: Any, metadata: Any, vllm_config: Any, inputs: CoreInputs, out: torch.Tensor) -> None:
    """One ``_forward_core`` call inside the forward context the model runner sets for a step."""
    from vllm.forward_context import set_forward_context

    with set_forward_context({layer.prefix: metadata}, vllm_config):
        layer._forward_core(inputs.mixed_qkv, inputs.b, inputs.a, out)


def reference_arguments(
    layer: Any,
    metadata: Any,
    inputs: CoreInputs,
    conv_state_stored: torch.Tensor,
    ssm_state: torch.Tensor,
    out: torch.Tensor,
    token_index: torch.Tensor | None,
) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """Arguments of ``gdn_spec_decode`` / ``gdn_spec_decode_reference`` for the spec part of a step.

    Written from the kernel API contract and vLLM's ``_forward_core`` (not copied from caovan's layer), so a
    mistake in the layer's argument assembly shows up as a disagreement with the reference.
    """
    from vllm.model_executor.layers.mamba.mamba_utils import is_conv_state_dim_first

    conv_state = conv_state_stored if is_conv_state_dim_first() else conv_state_stored.transpose(-1, -2)
    weight = layer.conv1d.weight  # (conv_dim, 1, width)
    n = metadata.num_spec_decodes
    args = (
        inputs.mixed_qkv,
        inputs.a,
        inputs.b,
        layer.A_log,
        layer.dt_bias,
        weight.view(weight.shape[0], weight.shape[2]),
        layer.conv1d.bias,
        conv_state,
        ssm_state,
        metadata.spec_query_start_loc[: n + 1],
        metadata.spec_state_indices_tensor,
        metadata.num_accepted_tokens,
        out,
    )
    kwargs = {
        "num_k_heads": layer.num_k_heads // layer.tp_size,
        "head_k_dim": layer.head_k_dim,
        "head_v_dim": layer.head_v_dim,
        "ssm_layout": "vk",
        "null_slot_max": NULL_BLOCK_ID,
        "token_index": token_index,
    }
    return args, kwargs


def live_spec_rows(metadata: Any) -> torch.Tensor:
    """Activation rows of spec tokens whose output vLLM defines.

    vLLM leaves garbage in the rows of a spec sequence whose column-0 block or initial block (column
    ``num_accepted_tokens - 1``) is the null block, and in padding rows past the last sequence; those rows are
    left out.  Rows are batch rows: in mixed batches spec token i lives at ``spec_token_indx[i]``.
    """
    n = metadata.num_spec_decodes
    starts = metadata.spec_query_start_loc[: n + 1].cpu().tolist()
    slots = metadata.spec_state_indices_tensor[:n].cpu()
    accepted = metadata.num_accepted_tokens[:n].cpu().tolist()
    rows: list[int] = []
    for i in range(n):
        if slots[i, 0] > NULL_BLOCK_ID and slots[i, accepted[i] - 1] > NULL_BLOCK_ID:
            rows.extend(range(starts[i], starts[i + 1]))
    spec_rows = torch.tensor(rows, dtype=torch.long)
    if metadata.num_prefills or metadata.num_decodes:
        spec_rows = metadata.spec_token_indx.cpu().long()[spec_rows]
    return spec_rows


def non_spec_rows(metadata: Any) -> torch.Tensor:
    if metadata.spec_sequence_masks is None:
        raise ValueError("non_spec_rows: batch has no spec sequences; every row is non-spec")
    return metadata.non_spec_token_indx.cpu().long()


def spec_blocks(metadata: Any) -> list[int]:
    """Blocks the spec sequences of this step may write (their real state slots)."""
    n = metadata.num_spec_decodes
    slots = metadata.spec_state_indices_tensor[:n].cpu()
    return sorted({int(s) for s in slots.flatten().tolist() if s > NULL_BLOCK_ID})


@contextlib.contextmanager
def fla_autotune_first_config_only() -> Iterator[int]:
    """Restrict vLLM's FLA chunk kernels (the prefill path) to the first of their autotune configs.

    Why: the chunked prefill kernels are autotuned over ~100 configurations per shape; compiling and timing
    them all takes about a minute per shape on a fresh machine, for code that is not under test here (caovan
    hands prefill tokens to vLLM's own core in both the reference and the caovan run, which then use the same
    single configuration).  Yields how many autotuners were restricted; restores them on exit.
    """
    import vllm.model_executor.layers.fla.ops as fla_ops

    restricted: list[tuple[Any, list[Any]]] = []
    for info in pkgutil.iter_modules(fla_ops.__path__):
        module = importlib.import_module(f"{fla_ops.__name__}.{info.name}")
        for value in list(vars(module).values()):
            seen = 0
            while value is not None and seen < 4:  # heuristics(autotune(jit)) wrappers nest through .fn
                if type(value).__name__ == "Autotuner" and isinstance(getattr(value, "configs", None), list):
                    if len(value.configs) > 1 and all(value is not r[0] for r in restricted):
                        restricted.append((value, value.configs))
                        value.configs = value.configs[:1]
                    break
                value = getattr(value, "fn", None)
                seen += 1
    try:
        yield len(restricted)
    finally:
        for autotuner, configs in restricted:
            autotuner.configs = configs
