"""What the start-up profiles need to know of a model folder: shapes from ``config.json``, bytes from the weights.

The layer pattern, MTP depth, GDN heads, dtypes and quantization come from ``caovan check-model``'s reading of the
config (:func:`caovan.model_check.check_model_dir`, which mirrors vLLM's config classes); the attention shape and the
longest context from the same config. The weights are the bytes of every tensor in the folder's safetensors headers
(``data_offsets``, nothing else is read); a folder without weights (served with ``--load-format dummy``) gets an
estimate from the config, said as such.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from caovan.model_check import ModelCheckError, check_model_dir
from caovan.model_check.config import Fields, load_config
from caovan.model_check.safetensors_headers import safetensors_weight_bytes

DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2, "fp8": 1, "fp8_e4m3": 1, "fp8_e5m2": 1, "int8": 1}


@dataclass(frozen=True)
class ModelFacts:
    folder: str
    architecture: str | None
    dtype: str
    ssm_dtype: str
    quantization: str | None
    layers: int
    gdn_layers: int
    full_attention_layers: int
    mtp_layers: int
    num_attention_heads: int
    num_kv_heads: int
    head_dim: int
    gdn_key_heads: int
    gdn_value_heads: int
    gdn_key_dim: int
    gdn_value_dim: int
    conv_width: int
    max_positions: int
    weight_bytes: int
    #: Where ``weight_bytes`` comes from: the safetensors headers, or the estimate from config.json.
    weight_source: str

    @property
    def gdn_conv_dim(self) -> int:
        """Channels of the GDN short convolution (q, k and v side by side), as vLLM's layer builds it."""
        return 2 * self.gdn_key_heads * self.gdn_key_dim + self.gdn_value_heads * self.gdn_value_dim


def read_model_facts(model_dir: str | Path) -> ModelFacts:
    """The facts of a local model folder; ModelCheckError naming the file and field when one is missing or wrong."""
    folder = Path(model_dir)
    report = check_model_dir(folder)
    facts = report.facts
    config_path, config = load_config(folder)
    top = Fields(config, "", config_path)
    text_config = top.get_obj("text_config")
    text = Fields(text_config, "text_config.", config_path) if text_config is not None else top
    heads = facts["gdn_heads"]
    if not facts["layers"] or not facts["layers"]["gdn_layers"] or heads is None:
        raise ModelCheckError(f"{config_path}: no GatedDeltaNet layer shape found: the profiles size GDN models only")

    def need(key: str) -> int:
        value = text.get_int(key, minimum=1)
        if value is None:
            raise ModelCheckError(f"{config_path}: {text.where(key)} missing: the profiles need it")
        return value

    attention_heads = need("num_attention_heads")
    dtype = facts["dtype"] or "bfloat16"
    weights = safetensors_weight_bytes(folder)
    facts_without_weights = dict(
        folder=str(folder),
        architecture=facts["architecture"],
        dtype=dtype,
        ssm_dtype=facts["mamba_ssm_dtype"] or dtype,
        quantization=(facts["quantization"] or {}).get("method") if isinstance(facts["quantization"], dict) else None,
        layers=facts["layers"]["total_layers"],
        gdn_layers=facts["layers"]["gdn_layers"],
        full_attention_layers=facts["layers"]["full_attention_layers"],
        mtp_layers=(facts["mtp"] or {}).get("depth") or 0,
        num_attention_heads=attention_heads,
        num_kv_heads=text.get_int("num_key_value_heads", minimum=1) or attention_heads,
        head_dim=text.get_int("head_dim", minimum=1) or need("hidden_size") // attention_heads,
        gdn_key_heads=heads["num_key_heads"],
        gdn_value_heads=heads["num_value_heads"],
        gdn_key_dim=heads["key_head_dim"],
        gdn_value_dim=heads["value_head_dim"],
        conv_width=heads["conv_kernel_width"],
        max_positions=need("max_position_embeddings"),
    )
    if weights is not None:
        source = f"safetensors headers ({weights['tensors']} tensors in {len(weights['files'])} files)"
        return ModelFacts(**facts_without_weights, weight_bytes=weights["bytes"], weight_source=source)
    quant = top.get_obj("quantization_config") or text.get_obj("quantization_config")
    per_weight = linear_weight_bytes(facts_without_weights["quantization"], quant, dtype, folder)
    estimate = estimated_weight_bytes(text, facts_without_weights, per_weight)
    method = facts_without_weights["quantization"]
    how = f"{method} {quant['bits']}-bit, " if method is not None else ""
    return ModelFacts(
        **facts_without_weights,
        weight_bytes=estimate,
        weight_source=f"estimated from config.json ({how}no safetensors in the folder: dummy weights)",
    )


#: Weight-only integer methods whose checkpoints hold ``bits``-bit weights with an fp16 scale and a ``bits``-bit zero
#: point per ``group_size`` weights of a linear layer (embeddings and head unquantized).
_GROUPED_INT_METHODS = ("awq", "awq_marlin", "gptq", "gptq_marlin")


def linear_weight_bytes(method: str | None, quant: dict[str, Any] | None, dtype: str, folder: Path) -> float:
    """Bytes per weight of a linear layer: the dtype's, or a grouped integer method's from its bits and group size;
    ModelCheckError for a method whose size cannot be told from config.json."""
    if method is None:
        return float(DTYPE_BYTES.get(dtype, 2))
    bits, group = (quant or {}).get("bits"), (quant or {}).get("group_size")
    if method in _GROUPED_INT_METHODS and type(bits) is int and type(group) is int and bits > 0 and group > 0:
        return bits / 8 + (2 + bits / 8) / group
    raise ModelCheckError(
        f"{folder}: no safetensors file to measure the {method} weights from, and their size is not told by "
        "config.json (estimated for awq and gptq with bits and group_size only)"
    )


def estimated_weight_bytes(text: Fields, facts: dict[str, Any], linear_bytes: float | None = None) -> int:
    """Bytes of a Qwen3.5/3.6 or Qwen3-Next text model (language model and MTP layers): embeddings and head in the
    dtype; per full-attention layer its gated q/k/v/o projections, per GDN layer its input, gate and output
    projections and convolution, per layer its MLP (dense, or the experts with the shared one), at ``linear_bytes``
    per weight (default: the dtype's). Norms and biases are left out (well under 0.1 %)."""
    config_path = text.config_path
    hidden = text.get_int("hidden_size", minimum=1)
    vocab = text.get_int("vocab_size", minimum=1)
    if hidden is None or vocab is None:
        raise ModelCheckError(f"{config_path}: hidden_size and vocab_size are needed to estimate the weights")
    q = facts["num_attention_heads"] * facts["head_dim"]
    kv = facts["num_kv_heads"] * facts["head_dim"]
    gate = 2 if text.mapping.get("attn_output_gate", True) else 1
    attention = hidden * q * gate + 2 * hidden * kv + q * hidden
    hk = facts["gdn_key_heads"] * facts["gdn_key_dim"]
    hv = facts["gdn_value_heads"] * facts["gdn_value_dim"]
    conv_dim = 2 * hk + hv
    gdn = hidden * (2 * hk + 2 * hv) + hidden * 2 * facts["gdn_value_heads"] + conv_dim * facts["conv_width"]
    gdn += hv * hidden
    experts = text.get_int("num_experts", minimum=0) or 0
    if experts:
        moe = text.get_int("moe_intermediate_size", minimum=1) or 0
        shared = text.get_int("shared_expert_intermediate_size", minimum=0) or 0
        mlp = experts * 3 * hidden * moe + 3 * hidden * shared + hidden * experts
    else:
        intermediate = text.get_int("intermediate_size", minimum=1)
        if intermediate is None:
            raise ModelCheckError(f"{config_path}: {text.where('intermediate_size')} is needed to estimate the weights")
        mlp = 3 * hidden * intermediate
    tied = text.mapping.get("tie_word_embeddings", False)
    embeddings = vocab * hidden * (1 if tied else 2)
    layers = facts["full_attention_layers"] * (attention + mlp) + facts["gdn_layers"] * (gdn + mlp)
    # An MTP layer is a full-attention decoder layer plus the projection of [embedding; hidden] back to hidden.
    mtp = facts["mtp_layers"] * (attention + mlp + 2 * hidden * hidden)
    dtype_bytes = DTYPE_BYTES.get(facts["dtype"], 2)
    per_weight = dtype_bytes if linear_bytes is None else linear_bytes
    return int(embeddings * dtype_bytes + (layers + mtp) * per_weight)
