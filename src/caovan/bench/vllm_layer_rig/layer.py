"""The tiny model, the vLLM config around it and vLLM's GatedDeltaNet layer built from both (in-tree or caovan's
override)."""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from unittest import mock

import torch

MAX_MODEL_LEN = 512
FAMILIES = ("qwen3_next", "qwen3_5")

DTYPE_NAMES = {torch.float16: "float16", torch.bfloat16: "bfloat16", torch.float32: "float32"}


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
        if self.dtype not in DTYPE_NAMES:
            raise ValueError(f"TinyGdnModel.dtype: expected one of {list(DTYPE_NAMES)}, got {self.dtype}")

    @property
    def id(self) -> str:
        return (
            f"{self.family}-h{self.num_k_heads}-hv{self.num_v_heads}-k{self.head_dim}-mtp{self.num_spec}"
            f"-{DTYPE_NAMES[self.dtype]}-ssm_{self.ssm_cache_dtype}"
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
                "torch_dtype": DTYPE_NAMES[self.dtype],
                "moe_intermediate_size": 32,
                "shared_expert_intermediate_size": 32,
                "num_experts": 4,
                "num_experts_per_tok": 2,
                **text,
            }
        text.update(
            model_type="qwen3_5_text",
            dtype=DTYPE_NAMES[self.dtype],
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


def null_block_id() -> int:
    """The block id vLLM gives padded requests, which kernels skip: the installed family's null slot
    (``NULL_BLOCK_ID`` = 0 from vLLM 0.20, block 0 reserved; ``PAD_SLOT_ID`` = -1 before)."""
    from caovan.adapters.registry import installed_family

    return installed_family().null_slot_max


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
        dtype=DTYPE_NAMES[model.dtype],
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
    from vllm.config import set_current_vllm_config
    from vllm.distributed import ensure_model_parallel_initialized, init_distributed_environment
    from vllm.distributed.parallel_state import model_parallel_is_initialized

    from caovan.serving.server_process import free_port

    if model_parallel_is_initialized():
        return False
    with set_current_vllm_config(vllm_config):
        init_distributed_environment(
            world_size=1,
            rank=0,
            local_rank=0,
            distributed_init_method=f"tcp://127.0.0.1:{free_port()}",
            backend="gloo",  # one process: no collective ever runs, and gloo works on every machine
        )
        ensure_model_parallel_initialized(1, 1)
    return True


def shutdown_distributed() -> None:
    from vllm.distributed import destroy_distributed_environment, destroy_model_parallel

    destroy_model_parallel()
    destroy_distributed_environment()


@contextlib.contextmanager
def cpu_device_plumbing() -> Iterator[None]:
    """Keep a rig built on ``device="cpu"`` on the CPU, undone on exit.

    The layer asks the platform for its device and vLLM's builders pin host memory where a GPU would take the copy:
    both answer for the CPU. FLA's ``input_guard`` (vLLM's copy up to 0.1x) enters
    ``torch.cuda.device(tensor.device.index)``, which a CPU tensor's index (None) cannot enter without CUDA: a no-op.
    """
    import vllm.v1.attention.backends.gdn_attn  # noqa: F401  (loads the modules whose PIN_MEMORY is read)
    from vllm.platforms import current_platform

    cpu = torch.device("cpu")
    with contextlib.ExitStack() as patches:
        patches.enter_context(
            mock.patch.object(type(current_platform), "current_device", staticmethod(lambda: cpu), create=True)
        )
        patches.enter_context(mock.patch.object(torch.cuda, "device", lambda device=None: contextlib.nullcontext()))
        for name, module in list(sys.modules.items()):
            if name.startswith("vllm") and getattr(module, "PIN_MEMORY", None) is True:
                patches.enter_context(mock.patch.object(module, "PIN_MEMORY", False))
        yield


@contextlib.contextmanager
def _oot_entry(layer_cls: type | None) -> Iterator[None]:
    """vLLM's PluggableLayer registry entry for the family's GDN layer set to ``layer_cls`` (None: no entry)."""
    from vllm.model_executor.custom_op import op_registry_oot

    from caovan.adapters.registry import installed_family

    IN_TREE_NAME = installed_family().oot_key
    saved = op_registry_oot.pop(IN_TREE_NAME, None)
    try:
        if layer_cls is not None:
            op_registry_oot[IN_TREE_NAME] = layer_cls
        yield
    finally:
        op_registry_oot.pop(IN_TREE_NAME, None)
        if saved is not None:
            op_registry_oot[IN_TREE_NAME] = saved


@contextlib.contextmanager
def _init_entry(base: type, family: Any, *, caovan: bool) -> Iterator[None]:
    """The class-patch route's counterpart: ``base.__init__`` set to vLLM's own, or to caovan's wrapper built over
    vLLM's own. Where ``install()`` already wrapped it in this process, its wrapper is set aside first, so the
    take-over never runs twice."""
    from caovan.adapters.override import build_init_wrapper

    saved = base.__dict__["__init__"]
    type.__setattr__(base, "__init__", getattr(saved, "_caovan_original", saved))
    try:
        if caovan:
            type.__setattr__(base, "__init__", build_init_wrapper(base, family))
        yield
    finally:
        type.__setattr__(base, "__init__", saved)


_override_class: type | None = None


def caovan_override_class() -> type:
    """The class a layer caovan builds has: its OOT subclass, built once per process like ``install()`` does, or
    the in-tree class itself where caovan wraps ``__init__`` (class-patch families, before vLLM 0.19)."""
    global _override_class
    if _override_class is None:
        from caovan.adapters.override import build_override_class, in_tree_class
        from caovan.adapters.registry import installed_family

        family = installed_family()
        base = in_tree_class(family)
        _override_class = base if family.install_route == "class_patch" else build_override_class(base, family)
    return _override_class


def _constructor_arguments(in_tree: type, vllm_config: Any, model: TinyGdnModel, prefix: str) -> dict[str, Any]:
    """What the model code passes: ``(config, vllm_config, prefix, gqa_interleaved_layout)`` from vLLM 0.19, the
    config pieces one by one before (no layout flag where Qwen3.5 has its own subclass)."""
    from caovan.signatures import has_argument

    arguments: dict[str, Any] = {"config": vllm_config.model_config.hf_text_config, "prefix": prefix}
    pieces = {
        "vllm_config": vllm_config,
        "model_config": vllm_config.model_config,
        "cache_config": vllm_config.cache_config,
        "quant_config": vllm_config.quant_config,
        "speculative_config": vllm_config.speculative_config,
        "gqa_interleaved_layout": model.gqa_interleaved_layout,
    }
    arguments.update({name: value for name, value in pieces.items() if has_argument(in_tree.__init__, name)})
    return arguments


def build_gdn_layer(vllm_config: Any, model: TinyGdnModel, prefix: str, device: torch.device, *, caovan: bool) -> Any:
    """Construct the layer through the family's in-tree class (``GatedDeltaNetAttention(...)`` in vLLM 0.21) as
    the model code does.

    ``caovan=True``: caovan's override is put in as ``install()`` does in a serving process (its class registered
    as the OOT replacement, so PluggableLayer.__new__ hands back caovan's subclass; or, for the class-patch
    families, its ``__init__`` wrapper on the in-tree class); ``caovan=False``: vLLM's own class, unpatched.  The
    registry or class is restored afterwards either way.
    """
    from vllm.config import set_current_vllm_config
    from vllm.utils.torch_utils import set_default_torch_dtype

    from caovan.adapters.override import in_tree_class
    from caovan.adapters.registry import installed_family

    family = installed_family()
    in_tree = in_tree_class(family)
    if family.install_route == "class_patch":
        entry = _init_entry(in_tree, family, caovan=caovan)
        expected = in_tree
    else:
        replacement = caovan_override_class() if caovan else None
        entry = _oot_entry(replacement)
        expected = replacement or in_tree
    with (
        entry,
        set_current_vllm_config(vllm_config),
        set_default_torch_dtype(vllm_config.model_config.dtype),
        torch.device(device),
    ):
        layer = in_tree(**_constructor_arguments(in_tree, vllm_config, model, prefix))
    if type(layer) is not expected:
        raise AssertionError(f"{in_tree.__name__}(...) built {type(layer).__qualname__}, expected {expected}")
    if caovan and not hasattr(layer, "_caovan_plan"):
        raise AssertionError(f"{in_tree.__name__}(...) did not run caovan's take-over")
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
