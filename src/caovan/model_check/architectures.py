"""The architectures vLLM builds with its GatedDeltaNetAttention layer (the one caovan takes over), and how each
one's config says its layer pattern and MTP depth."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class GdnArchitecture:
    name: str
    #: The config field vLLM reads for the MTP depth of this architecture.
    mtp_field: str
    #: MTP layers vLLM's drafter builds when ``mtp_field`` is absent and the weights were not seen
    #: (None: absent means no MTP). Qwen3-Next's released configs leave the field out.
    mtp_layers_when_field_absent: int | None
    #: Whether vLLM's config class derives layer_types from ``full_attention_interval``.
    honours_full_attention_interval: bool
    #: Interval vLLM's config class uses when neither layer_types nor the interval is given.
    default_full_attention_interval: int = 4
    #: The multimodal class vLLM registers instead, for a text-only variant its registry lacks
    #: (``vllm/model_executor/models/registry.py``, 0.20.2 and 0.21.0); None: vLLM registers this one.
    served_by_vllm_as: str | None = None


GDN_ARCHITECTURES: dict[str, GdnArchitecture] = {
    arch.name: arch
    for arch in (
        GdnArchitecture("Qwen3NextForCausalLM", "num_nextn_predict_layers", 1, False),
        GdnArchitecture("Qwen3_5ForConditionalGeneration", "mtp_num_hidden_layers", None, True),
        GdnArchitecture("Qwen3_5MoeForConditionalGeneration", "mtp_num_hidden_layers", None, True),
        # Text-only variants: the same layer code, but not in vLLM 0.20.2's or 0.21.0's registry.
        GdnArchitecture(
            "Qwen3_5ForCausalLM", "mtp_num_hidden_layers", None, True, 4, "Qwen3_5ForConditionalGeneration"
        ),
        GdnArchitecture(
            "Qwen3_5MoeForCausalLM", "mtp_num_hidden_layers", None, True, 4, "Qwen3_5MoeForConditionalGeneration"
        ),
    )
}

#: MTP depth fields tried, in order, for an architecture caovan does not know.
MTP_FIELDS = ("mtp_num_hidden_layers", "num_nextn_predict_layers")

GDN_LAYER_TYPE = "linear_attention"
FULL_ATTENTION_LAYER_TYPE = "full_attention"

#: config field -> name used in facts and messages.
GDN_HEAD_FIELDS = {
    "linear_num_key_heads": "H",
    "linear_num_value_heads": "HV",
    "linear_key_head_dim": "K",
    "linear_value_head_dim": "V",
    "linear_conv_kernel_dim": "conv width",
}
