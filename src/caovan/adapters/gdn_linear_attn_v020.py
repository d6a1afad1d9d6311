"""Adapter for vLLM 0.20.0 – 0.21.x (family F7 in docs/vllm-gdn-families.md).

What identifies this family, all probed, none taken from the version number:

* ``GatedDeltaNetAttention(PluggableLayer, MambaBase)`` lives in
  ``vllm/model_executor/layers/mamba/gdn_linear_attn.py`` (0.19 introduced it there; 0.22 moved it to
  ``layers/mamba/gdn/qwen_gdn_linear_attn.py`` as ``QwenGatedDeltaNetAttention``).
* The custom op ``vllm::gdn_attention_core`` calls ``layer._forward_core(mixed_qkv, b, a, core_attn_out)``,
  looked up on the instance at every call — the hook caovan overrides.
* The layer is replaceable through ``PluggableLayer.register_oot`` keyed by the in-tree class name; the
  replacement must subclass the in-tree class or its ``__init__`` never runs.
* The spec branch calls ``causal_conv1d_update(..., num_accepted_tokens=, query_start_loc=)`` and
  ``fused_sigmoid_gating_delta_rule_update(A_log, a, b, dt_bias, ..., ssm_state_indices=, num_accepted_tokens=)``
  through names imported into the GDN module (so the module namespace, not the FLA package, is what counts).
* Pad/null state slot sentinel ``NULL_BLOCK_ID == 0`` (0.19 and older used -1) and the conv state may be stored
  dim-first (``is_conv_state_dim_first()``).
"""

from __future__ import annotations

from .base import GdnAdapter, Prober, lookup

GDN_MODULE = "vllm.model_executor.layers.mamba.gdn_linear_attn"
GDN_CLASS = "GatedDeltaNetAttention"

#: Fields of ``GDNAttentionMetadata`` the speculative-decode dispatch reads.
METADATA_FIELDS = (
    "num_prefills",
    "num_decodes",
    "num_spec_decodes",
    "num_actual_tokens",
    "spec_query_start_loc",
    "spec_state_indices_tensor",
    "spec_sequence_masks",
    "spec_token_indx",
    "non_spec_token_indx",
    "num_accepted_tokens",
)


class GdnLinearAttnV020Adapter(GdnAdapter):
    family_id = "gdn-linear-attn-v020"
    version_hint = ">=0.20.0,<0.22"
    description = "GatedDeltaNetAttention in layers/mamba/gdn_linear_attn.py, PluggableLayer OOT, null slot 0"

    def _probe(self, p: Prober) -> None:
        gdn = p.module(GDN_MODULE)
        layer_cls = p.attribute(gdn, GDN_CLASS, f"{GDN_CLASS} class")
        if layer_cls is not None:
            # PluggableLayer.__new__ looks the override up by the instantiated class's __name__: under a
            # compatibility alias of a renamed class, an override registered under GDN_CLASS is never used.
            name = lookup(layer_cls, "__name__")
            p.record(
                f"{GDN_CLASS} is named {GDN_CLASS} (the override's registry key)",
                name == GDN_CLASS,
                "named so" if name == GDN_CLASS else f"it is {name!r}: an alias, vLLM would never use the override",
            )

        custom_op = p.module("vllm.model_executor.custom_op")
        pluggable = p.attribute(custom_op, "PluggableLayer", "PluggableLayer class")
        p.subclass(layer_cls, pluggable, f"{GDN_CLASS} is a PluggableLayer")
        p.arguments(
            lookup(pluggable, "register_oot"),
            ("_decorated_layer_cls", "name"),
            "PluggableLayer.register_oot(_decorated_layer_cls, name)",
        )
        registry = p.attribute(custom_op, "op_registry_oot", "custom_op.op_registry_oot")
        if registry is not None:
            p.record(
                "op_registry_oot is a dict",
                isinstance(registry, dict),
                type(registry).__name__,
            )

        p.arguments(
            lookup(layer_cls, "_forward_core"),
            ("mixed_qkv", "b", "a", "core_attn_out"),
            f"{GDN_CLASS}._forward_core(mixed_qkv, b, a, core_attn_out)",
            leading=True,  # caovan's core hands them back to the in-tree one by position
        )
        for attr in ("conv1d", "A_log", "dt_bias"):
            # nn.Module attributes exist on instances only; their assignment shows in __init__'s code.
            init_code = lookup(lookup(layer_cls, "__init__"), "__code__")
            names = init_code.co_names if init_code is not None else ()
            p.record(
                f"{GDN_CLASS}.{attr} set in __init__", attr in names, "assigned" if attr in names else "not assigned"
            )

        p.arguments(
            lookup(gdn, "causal_conv1d_update"),
            ("conv_state_indices", "num_accepted_tokens", "query_start_loc", "max_query_len"),
            "gdn_linear_attn.causal_conv1d_update(spec args)",
        )
        p.arguments(
            lookup(gdn, "fused_sigmoid_gating_delta_rule_update"),
            ("A_log", "a", "b", "dt_bias", "ssm_state_indices", "num_accepted_tokens"),
            "gdn_linear_attn.fused_sigmoid_gating_delta_rule_update(spec args)",
        )
        p.attribute(gdn, "is_conv_state_dim_first", "gdn_linear_attn.is_conv_state_dim_first")
        p.attribute(gdn, "get_forward_context", "gdn_linear_attn.get_forward_context")

        meta_mod = p.module("vllm.v1.attention.backends.gdn_attn")
        p.fields(
            p.attribute(meta_mod, "GDNAttentionMetadata", "GDNAttentionMetadata class"),
            METADATA_FIELDS,
            "GDNAttentionMetadata spec-decode fields",
        )
        loader = p.module("vllm.model_executor.model_loader.base_loader")
        p.arguments(
            lookup(p.attribute(loader, "BaseModelLoader", "BaseModelLoader class"), "load_model"),
            ("vllm_config", "model_config"),
            "BaseModelLoader.load_model(vllm_config, model_config) (require-mode check)",
            leading=True,  # the check's wrapper binds them by position
        )
        utils = p.module("vllm.v1.attention.backends.utils")
        p.equals(lookup(utils, "NULL_BLOCK_ID"), 0, "NULL_BLOCK_ID (null/pad state slot)")

    def install(self) -> str:
        from . import gdn_linear_attn_v020_layer

        return gdn_linear_attn_v020_layer.install()

    def uninstall(self) -> bool:
        from . import gdn_linear_attn_v020_layer

        return gdn_linear_attn_v020_layer.uninstall()
