"""F8b, vLLM 0.23 - 0.25: the in-tree core splits plain decodes off prefills in non-spec batches."""

from __future__ import annotations

from ..family import SPEC_METADATA_FIELDS, GdnFamily, PatchNote

FAMILY = GdnFamily(
    family_id="qwen-gdn-v023",
    label="F8",
    version_hint=">=0.23.0,<0.27",
    differs=(
        "the core splits plain decodes off prefills (metadata gains prefill_query_start_loc, "
        "prefill_state_indices, prefill_has_initial_state)"
    ),
    gdn_module="vllm.model_executor.layers.mamba.gdn.qwen_gdn_linear_attn",
    gdn_class="QwenGatedDeltaNetAttention",
    core_op="vllm::qwen_gdn_attention_core",
    fla_ops_module="vllm.model_executor.layers.fla.ops",
    metadata_fields=(
        *SPEC_METADATA_FIELDS,
        "prefill_query_start_loc",
        "prefill_state_indices",
        "prefill_has_initial_state",
    ),
    in_tree_splits_decodes=True,
    patch=PatchNote(
        why="as for gdn-linear-attn-v020: two Triton kernels in place of vLLM's spec-decode launches",
        how=(
            "PluggableLayer.register_oot('QwenGatedDeltaNetAttention'); in a mixed batch the in-tree core gets "
            "the other tokens with plain decodes counted as prefills, as its prefill_* metadata was built for them"
        ),
        upstream="vllm/model_executor/layers/mamba/gdn/qwen_gdn_linear_attn.py, "
        "QwenGatedDeltaNetAttention._forward_core, the spec branch, vLLM 0.23.0 - 0.25.0",
        remove_when="this family leaves the matrix",
    ),
)
