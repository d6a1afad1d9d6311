"""GDN + MTP model folders for engines run with dummy weights: ``config.json`` (and a tokenizer, for servers).

vLLM builds the model from the config alone when asked for dummy weights, so a folder holding just
``config.json`` is enough for ``vllm.LLM(model=folder, load_format="dummy", skip_tokenizer_init=True)``:
no tokenizer, no weights, no network. The tiny folders of the serve tier keep everything caovan's spec-decode
kernels care about (K = V = 128 by default, HV/H = 2 or 3, conv width 4, the 3-GDN-then-1-attention layer pattern
of the released models, one MTP layer) and shrink everything else (hidden size, experts, vocabulary) so start-up is
quick. :data:`ARCHITECTURES` holds the released shapes the end-to-end records serve
(``caovan bench model-folder``), from their public configs.

Field names follow vLLM 0.21.0's config classes
(``vllm/transformers_utils/configs/qwen3_next.py``, ``qwen3_5.py``) and its model code:

* Qwen3-Next (``Qwen3NextForCausalLM``): fields at the top level; the MTP draft
  (``qwen3_next_mtp.py``) reads ``num_nextn_predict_layers``.  Every decoder layer, the MTP layer included,
  must be a sparse-MoE layer: ``QwenNextMixtureOfExperts.set_moe_parameters`` raises when a model has none,
  and the MTP layer (index 0) picks MoE from ``num_experts > 0`` and ``decoder_sparse_step``.  So MoE stays
  on with 4 small experts instead of being switched off.
* Qwen3.5 / Qwen3.6 (``Qwen3_5ForConditionalGeneration``): text fields under ``text_config`` plus a
  ``vision_config`` (vLLM always builds the vision tower of this class; it is kept tiny here, as text-only
  serving never runs it); the MTP draft reads ``mtp_num_hidden_layers``.
* Qwen3 dense (``Qwen3ForCausalLM``): no GDN layer at all, for require mode's "no GDN layer" refusal.

A tokenizer for servers that take text prompts: :mod:`caovan.bench.model_tokenizer`. Qwen3.5 folders also get the
public image and video processor settings, so that the multimodal processor vLLM builds at start-up loads offline.

Importable without vLLM or a GPU (standard library only; the tokenizer writer imports ``tokenizers``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

CONFIG_FILE_NAME = "config.json"
GDN_LAYER_TYPE = "linear_attention"
FULL_ATTENTION_LAYER_TYPE = "full_attention"
#: The released Qwen3-Next / Qwen3.5 models put one full-attention layer after every three GDN layers.
FULL_ATTENTION_INTERVAL = 4
DTYPES = ("float16", "bfloat16", "float32")


def _check_positive(name: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(f"model folder: {name} must be a positive int, got {value!r}")


def _check_dtype(torch_dtype: str) -> None:
    if torch_dtype not in DTYPES:
        raise ValueError(f"model folder: torch_dtype must be one of {DTYPES}, got {torch_dtype!r}")


def _check_gdn_shape(
    num_hidden_layers: int,
    linear_num_key_heads: int,
    linear_num_value_heads: int,
    linear_key_head_dim: int,
    linear_value_head_dim: int,
    torch_dtype: str,
) -> None:
    for name, value in (
        ("num_hidden_layers", num_hidden_layers),
        ("linear_num_key_heads", linear_num_key_heads),
        ("linear_num_value_heads", linear_num_value_heads),
        ("linear_key_head_dim", linear_key_head_dim),
        ("linear_value_head_dim", linear_value_head_dim),
    ):
        _check_positive(name, value)
    if num_hidden_layers % FULL_ATTENTION_INTERVAL:
        raise ValueError(
            f"model folder: num_hidden_layers={num_hidden_layers} must be a multiple of {FULL_ATTENTION_INTERVAL} "
            "(three GDN layers then one full-attention layer, as in the released models)"
        )
    if linear_num_value_heads % linear_num_key_heads:
        raise ValueError(
            f"model folder: linear_num_value_heads={linear_num_value_heads} must be a multiple of "
            f"linear_num_key_heads={linear_num_key_heads} (value head hv reads key head hv // (HV // H))"
        )
    _check_dtype(torch_dtype)


def layer_types(num_hidden_layers: int) -> list[str]:
    """The released pattern: ``linear_attention`` x3 then ``full_attention``, repeated."""
    return [
        FULL_ATTENTION_LAYER_TYPE if (i + 1) % FULL_ATTENTION_INTERVAL == 0 else GDN_LAYER_TYPE
        for i in range(num_hidden_layers)
    ]


def _hybrid_text_fields(
    *,
    num_hidden_layers: int,
    hidden_size: int,
    intermediate_size: int,
    vocab_size: int,
    num_attention_heads: int,
    num_key_value_heads: int,
    head_dim: int,
    linear_num_key_heads: int,
    linear_num_value_heads: int,
    linear_key_head_dim: int,
    linear_value_head_dim: int,
    max_position_embeddings: int = 4096,
) -> dict[str, Any]:
    """The text fields Qwen3-Next and Qwen3.5 configs share: layer pattern, attention and GDN shapes, norms."""
    return {
        "attention_bias": False,
        "attention_dropout": 0.0,
        "full_attention_interval": FULL_ATTENTION_INTERVAL,
        "head_dim": head_dim,
        "hidden_act": "silu",
        "hidden_size": hidden_size,
        "initializer_range": 0.02,
        "intermediate_size": intermediate_size,
        "layer_types": layer_types(num_hidden_layers),
        "linear_conv_kernel_dim": 4,
        "linear_key_head_dim": linear_key_head_dim,
        "linear_num_key_heads": linear_num_key_heads,
        "linear_num_value_heads": linear_num_value_heads,
        "linear_value_head_dim": linear_value_head_dim,
        "max_position_embeddings": max_position_embeddings,
        "mlp_only_layers": [],
        "num_attention_heads": num_attention_heads,
        "num_hidden_layers": num_hidden_layers,
        "num_key_value_heads": num_key_value_heads,
        "partial_rotary_factor": 0.25,
        "rms_norm_eps": 1e-06,
        "tie_word_embeddings": False,
        "use_cache": True,
        "vocab_size": vocab_size,
    }


def tiny_qwen3_next_config(
    *,
    num_hidden_layers: int = 4,
    hidden_size: int = 256,
    vocab_size: int = 2048,
    linear_num_key_heads: int = 2,
    linear_num_value_heads: int = 4,
    linear_key_head_dim: int = 128,
    linear_value_head_dim: int = 128,
    num_nextn_predict_layers: int = 1,
    torch_dtype: str = "bfloat16",
    num_attention_heads: int = 4,
    num_key_value_heads: int = 2,
    head_dim: int = 128,
    intermediate_size: int | None = None,
    num_experts: int = 4,
    num_experts_per_tok: int = 2,
    moe_intermediate_size: int = 128,
    shared_expert_intermediate_size: int = 128,
    max_position_embeddings: int = 4096,
) -> dict[str, Any]:
    """``config.json`` content of a Qwen3-Next (GDN + gated attention + MoE + MTP), tiny by default: 4 query heads
    (the gate doubles q_proj), 2 KV heads, head_dim 128 (FlashAttention and Triton attention both take it), 4
    small experts."""
    _check_gdn_shape(
        num_hidden_layers,
        linear_num_key_heads,
        linear_num_value_heads,
        linear_key_head_dim,
        linear_value_head_dim,
        torch_dtype,
    )
    for name, value in (
        ("hidden_size", hidden_size),
        ("vocab_size", vocab_size),
        ("num_nextn_predict_layers", num_nextn_predict_layers),
        ("num_attention_heads", num_attention_heads),
        ("num_key_value_heads", num_key_value_heads),
        ("num_experts", num_experts),
        ("num_experts_per_tok", num_experts_per_tok),
        ("moe_intermediate_size", moe_intermediate_size),
        ("max_position_embeddings", max_position_embeddings),
    ):
        _check_positive(name, value)
    return {
        "architectures": ["Qwen3NextForCausalLM"],
        "model_type": "qwen3_next",
        **_hybrid_text_fields(
            num_hidden_layers=num_hidden_layers,
            hidden_size=hidden_size,
            intermediate_size=2 * hidden_size if intermediate_size is None else intermediate_size,
            vocab_size=vocab_size,
            num_attention_heads=num_attention_heads,
            num_key_value_heads=num_key_value_heads,
            head_dim=head_dim,
            linear_num_key_heads=linear_num_key_heads,
            linear_num_value_heads=linear_num_value_heads,
            linear_key_head_dim=linear_key_head_dim,
            linear_value_head_dim=linear_value_head_dim,
            max_position_embeddings=max_position_embeddings,
        ),
        "decoder_sparse_step": 1,
        "moe_intermediate_size": moe_intermediate_size,
        "norm_topk_prob": True,
        "num_experts": num_experts,
        "num_experts_per_tok": num_experts_per_tok,
        "num_nextn_predict_layers": num_nextn_predict_layers,
        "output_router_logits": False,
        "rope_scaling": None,
        "rope_theta": 10000000,
        "router_aux_loss_coef": 0.001,
        "shared_expert_intermediate_size": shared_expert_intermediate_size,
        "torch_dtype": torch_dtype,
        "use_sliding_window": False,
    }


#: mRoPE sections of the rotary half-dimension (head_dim * 0.25 / 2) per head_dim, as the released configs have them.
MROPE_SECTIONS = {128: [6, 5, 5], 256: [11, 11, 10]}


def tiny_qwen3_5_config(
    *,
    num_hidden_layers: int = 4,
    hidden_size: int = 256,
    intermediate_size: int | None = None,
    vocab_size: int = 2048,
    num_attention_heads: int = 4,
    num_key_value_heads: int = 2,
    head_dim: int = 128,
    linear_num_key_heads: int = 2,
    linear_num_value_heads: int = 6,
    linear_key_head_dim: int = 128,
    linear_value_head_dim: int = 128,
    mtp_num_hidden_layers: int = 1,
    torch_dtype: str = "bfloat16",
    mamba_ssm_dtype: str | None = "float32",
    max_position_embeddings: int = 4096,
    quantization_config: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """``config.json`` content of a dense Qwen3.5 / Qwen3.6 (``Qwen3_5ForConditionalGeneration``), tiny by default.

    HV/H defaults to 3 (the 27B ratio: 48/16); ``intermediate_size`` defaults to twice the hidden size. The vision
    tower is shrunk but present; its special token ids are placed at the top of the vocabulary.
    ``mamba_ssm_dtype`` float32 is what the released configs ask for (fp32 SSM state); ``None`` leaves it out.
    ``mtp_num_hidden_layers`` 0: a model without MTP. ``quantization_config`` goes to the top level, as a quantized
    checkpoint's does.
    """
    intermediate_size = 2 * hidden_size if intermediate_size is None else intermediate_size
    for name, value in (
        ("intermediate_size", intermediate_size),
        ("num_attention_heads", num_attention_heads),
        ("num_key_value_heads", num_key_value_heads),
    ):
        _check_positive(name, value)
    if head_dim not in MROPE_SECTIONS:
        raise ValueError(f"model folder: head_dim must be one of {sorted(MROPE_SECTIONS)}, got {head_dim!r}")
    if num_attention_heads % num_key_value_heads:
        raise ValueError(
            f"model folder: num_attention_heads={num_attention_heads} must be a multiple of "
            f"num_key_value_heads={num_key_value_heads}"
        )
    _check_gdn_shape(
        num_hidden_layers,
        linear_num_key_heads,
        linear_num_value_heads,
        linear_key_head_dim,
        linear_value_head_dim,
        torch_dtype,
    )
    for name, value in (
        ("hidden_size", hidden_size),
        ("vocab_size", vocab_size),
        ("max_position_embeddings", max_position_embeddings),
    ):
        _check_positive(name, value)
    if (
        isinstance(mtp_num_hidden_layers, bool)
        or not isinstance(mtp_num_hidden_layers, int)
        or mtp_num_hidden_layers < 0
    ):
        raise ValueError(f"model folder: mtp_num_hidden_layers must be an int >= 0, got {mtp_num_hidden_layers!r}")
    if vocab_size < 16:
        raise ValueError(f"model folder: vocab_size={vocab_size} leaves no room for the vision special tokens")
    if mamba_ssm_dtype is not None and mamba_ssm_dtype not in DTYPES:
        raise ValueError(f"model folder: mamba_ssm_dtype must be one of {DTYPES} or None, got {mamba_ssm_dtype!r}")
    image_token_id, video_token_id = vocab_size - 4, vocab_size - 3
    vision_start_token_id, vision_end_token_id = vocab_size - 2, vocab_size - 1
    text_config: dict[str, Any] = {
        "model_type": "qwen3_5_text",
        **_hybrid_text_fields(
            num_hidden_layers=num_hidden_layers,
            hidden_size=hidden_size,
            intermediate_size=intermediate_size,
            vocab_size=vocab_size,
            num_attention_heads=num_attention_heads,
            num_key_value_heads=num_key_value_heads,
            head_dim=head_dim,
            linear_num_key_heads=linear_num_key_heads,
            linear_num_value_heads=linear_num_value_heads,
            linear_key_head_dim=linear_key_head_dim,
            linear_value_head_dim=linear_value_head_dim,
            max_position_embeddings=max_position_embeddings,
        ),
        "attn_output_gate": True,
        "dtype": torch_dtype,
        "mtp_num_hidden_layers": mtp_num_hidden_layers,
        "mtp_use_dedicated_embeddings": False,
        "rope_parameters": {
            "mrope_interleaved": True,
            "mrope_section": MROPE_SECTIONS[head_dim],
            "partial_rotary_factor": 0.25,
            "rope_theta": 10000000,
            "rope_type": "default",
        },
    }
    if mamba_ssm_dtype is not None:
        text_config["mamba_ssm_dtype"] = mamba_ssm_dtype
    quantization = {} if quantization_config is None else {"quantization_config": dict(quantization_config)}
    return {
        **quantization,
        "architectures": ["Qwen3_5ForConditionalGeneration"],
        "model_type": "qwen3_5",
        "image_token_id": image_token_id,
        "video_token_id": video_token_id,
        "vision_start_token_id": vision_start_token_id,
        "vision_end_token_id": vision_end_token_id,
        "text_config": text_config,
        "vision_config": {
            "model_type": "qwen3_5",
            "depth": 1,
            "hidden_size": 64,
            "hidden_act": "gelu_pytorch_tanh",
            "intermediate_size": 128,
            "num_heads": 2,
            "in_channels": 3,
            "patch_size": 16,
            "spatial_merge_size": 2,
            "temporal_patch_size": 2,
            "out_hidden_size": hidden_size,
            "num_position_embeddings": 2304,
            "initializer_range": 0.02,
        },
        "tie_word_embeddings": False,
        "torch_dtype": torch_dtype,
    }


def tiny_qwen3_dense_config(
    *, num_hidden_layers: int = 2, hidden_size: int = 256, vocab_size: int = 2048, torch_dtype: str = "bfloat16"
) -> dict[str, Any]:
    """``config.json`` content of a tiny Qwen3 dense model: attention layers only, no GDN layer, no MTP."""
    for name, value in (
        ("num_hidden_layers", num_hidden_layers),
        ("hidden_size", hidden_size),
        ("vocab_size", vocab_size),
    ):
        _check_positive(name, value)
    _check_dtype(torch_dtype)
    return {
        "architectures": ["Qwen3ForCausalLM"],
        "model_type": "qwen3",
        "attention_bias": False,
        "attention_dropout": 0.0,
        "head_dim": 128,  # as the GDN models' attention layers: FlashAttention and Triton attention take it
        "hidden_act": "silu",
        "hidden_size": hidden_size,
        "initializer_range": 0.02,
        "intermediate_size": 2 * hidden_size,
        "max_position_embeddings": 4096,
        "num_attention_heads": 4,
        "num_hidden_layers": num_hidden_layers,
        "num_key_value_heads": 2,
        "rms_norm_eps": 1e-06,
        "rope_scaling": None,
        "rope_theta": 1000000,
        "tie_word_embeddings": False,
        "torch_dtype": torch_dtype,
        "use_cache": True,
        "use_sliding_window": False,
        "vocab_size": vocab_size,
    }


#: The ``transformers_version`` a saved config carries, as released configs do: without it, Hugging Face's tokenizer
#: loader takes a local folder for a Mistral one and warns that the tokenization is wrong (transformers 4.57.3+).
CONFIG_TRANSFORMERS_VERSION = "4.57.1"


def _write_config(directory: str | Path, config: dict[str, Any]) -> Path:
    folder = Path(directory)
    if folder.exists() and not folder.is_dir():
        raise ValueError(f"model folder: {folder} exists and is not a directory")
    folder.mkdir(parents=True, exist_ok=True)
    config = {"transformers_version": CONFIG_TRANSFORMERS_VERSION, **config}
    (folder / CONFIG_FILE_NAME).write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
    return folder


def write_tiny_qwen3_next(directory: str | Path, **overrides: Any) -> Path:
    """Write ``config.json`` of a tiny Qwen3-Next GDN + MTP model into ``directory``; returns the folder.

    ``overrides`` are the keyword arguments of :func:`tiny_qwen3_next_config`.
    """
    return _write_config(directory, tiny_qwen3_next_config(**overrides))


def write_tiny_qwen3_5(directory: str | Path, **overrides: Any) -> Path:
    """Write ``config.json`` of a tiny Qwen3.5 GDN + MTP model and its image/video processor configs into
    ``directory``; returns the folder.

    ``overrides`` are the keyword arguments of :func:`tiny_qwen3_5_config`.
    """
    folder = _write_config(directory, tiny_qwen3_5_config(**overrides))
    _write_vision_processor_configs(folder)
    return folder


#: The public Qwen3.5 / Qwen3.6 image and video processor settings (their preprocessor_config.json and
#: video_preprocessor_config.json), so that Hugging Face's Qwen3VLProcessor loads from the folder offline.
_VISION_PROCESSOR = {
    "patch_size": 16,
    "temporal_patch_size": 2,
    "merge_size": 2,
    "image_mean": [0.5, 0.5, 0.5],
    "image_std": [0.5, 0.5, 0.5],
    "processor_class": "Qwen3VLProcessor",
}
VISION_PROCESSOR_FILES = {
    "preprocessor_config.json": {
        "image_processor_type": "Qwen2VLImageProcessorFast",
        "size": {"shortest_edge": 65536, "longest_edge": 16777216},
    },
    "video_preprocessor_config.json": {
        "video_processor_type": "Qwen3VLVideoProcessor",
        "size": {"shortest_edge": 4096, "longest_edge": 25165824},
    },
}


def _write_vision_processor_configs(folder: Path) -> None:
    # Text serving never runs the vision tower (serve with --limit-mm-per-prompt '{"image": 0, "video": 0}'), but a
    # vLLM that builds the multimodal processor anyway must find these rather than reach for the network.
    for name, fields in VISION_PROCESSOR_FILES.items():
        (folder / name).write_text(json.dumps({**_VISION_PROCESSOR, **fields}, indent=2, sort_keys=True) + "\n")


def vision_special_tokens(config: dict[str, Any]) -> dict[str, int]:
    """The vision tokens a Qwen3.5 config names, with their ids (empty for a text-only config)."""
    names = {
        "image_token_id": "<|image_pad|>",
        "video_token_id": "<|video_pad|>",
        "vision_start_token_id": "<|vision_start|>",
        "vision_end_token_id": "<|vision_end|>",
    }
    return {token: config[key] for key, token in names.items() if key in config}


def write_tiny_qwen3_dense(directory: str | Path, **overrides: Any) -> Path:
    """Write ``config.json`` of a tiny Qwen3 dense model (no GDN layer) into ``directory``; returns the folder.

    ``overrides`` are the keyword arguments of :func:`tiny_qwen3_dense_config`.
    """
    return _write_config(directory, tiny_qwen3_dense_config(**overrides))


#: Released text architectures the end-to-end records serve, as keyword arguments of :func:`tiny_qwen3_5_config`,
#: from the public ``config.json`` (its ``text_config``) of each model.
_QWEN36_27B = dict(
    num_hidden_layers=64,
    hidden_size=5120,
    intermediate_size=17408,
    vocab_size=248320,
    num_attention_heads=24,
    num_key_value_heads=4,
    head_dim=256,
    linear_num_key_heads=16,
    linear_num_value_heads=48,
    linear_key_head_dim=128,
    linear_value_head_dim=128,
    mtp_num_hidden_layers=1,
    torch_dtype="bfloat16",
    mamba_ssm_dtype="float32",
    max_position_embeddings=262144,
)

#: Released architectures, from their public config.json files: name -> (family, keyword arguments of that family's
#: config function). ``write_architecture_config`` writes one.
ARCHITECTURES: dict[str, tuple[str, dict[str, Any]]] = {
    # Qwen/Qwen3.6-27B: 64 layers, full attention every 4th (48 GDN layers), GDN H=16 / HV=48 / K=V=128.
    "qwen3.6-27b": ("qwen3_5", _QWEN36_27B),
    # Its AWQ int4 checkpoints (4-bit weights, group 128, fp16 activations, as 2080 Ti users serve it).
    "qwen3.6-27b-awq": (
        "qwen3_5",
        {
            **_QWEN36_27B,
            "torch_dtype": "float16",
            "quantization_config": {
                "quant_method": "awq",
                "bits": 4,
                "group_size": 128,
                "zero_point": True,
                "version": "gemm",
            },
        },
    ),
    # Qwen/Qwen3-Next-80B-A3B: 48 layers (36 GDN), GDN H=16 / HV=32 / K=V=128, 512 experts of 512, 10 per token.
    "qwen3-next-80b": (
        "qwen3_next",
        dict(
            num_hidden_layers=48,
            hidden_size=2048,
            intermediate_size=5120,
            vocab_size=151936,
            num_attention_heads=16,
            num_key_value_heads=2,
            head_dim=256,
            linear_num_key_heads=16,
            linear_num_value_heads=32,
            linear_key_head_dim=128,
            linear_value_head_dim=128,
            num_experts=512,
            num_experts_per_tok=10,
            moe_intermediate_size=512,
            shared_expert_intermediate_size=512,
            max_position_embeddings=262144,
        ),
    ),
}


def write_architecture_config(name: str, directory: str | Path) -> Path:
    """Write ``config.json`` of a released architecture (:data:`ARCHITECTURES`) into ``directory``; returns it."""
    if name not in ARCHITECTURES:
        raise ValueError(f"model folder: unknown architecture {name!r} (known: {', '.join(ARCHITECTURES)})")
    family, fields = ARCHITECTURES[name]
    writer = write_tiny_qwen3_5 if family == "qwen3_5" else write_tiny_qwen3_next
    return writer(directory, **fields)
