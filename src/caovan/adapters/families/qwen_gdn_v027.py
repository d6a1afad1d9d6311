"""F9, vLLM 0.27: FLA ops move to ``vllm/third_party/flash_linear_attention`` (no shim left behind)."""

from __future__ import annotations

from ..family import SPEC_METADATA_FIELDS, GdnFamily, PatchNote

PREFILL_METADATA_FIELDS = ("prefill_query_start_loc", "prefill_state_indices", "prefill_has_initial_state")

FAMILY = GdnFamily(
    family_id="qwen-gdn-v027",
    label="F9",
    version_hint=">=0.27.0,<0.29",
    differs=(
        "vLLM's FLA ops move to vllm.third_party.flash_linear_attention.ops; forward returns its output; "
        "_forward_core is unchanged"
    ),
    gdn_module="vllm.model_executor.layers.mamba.gdn.qwen_gdn_linear_attn",
    gdn_class="QwenGatedDeltaNetAttention",
    core_op="vllm::qwen_gdn_attention_core",
    fla_ops_module="vllm.third_party.flash_linear_attention.ops",
    metadata_fields=(*SPEC_METADATA_FIELDS, *PREFILL_METADATA_FIELDS),
    # vLLM 0.29's fused CUDA MTP path, which a spec batch takes without reaching _forward_core.
    methods_absent=("_forward_core_decode_spec_fused_norm",),
    in_tree_splits_decodes=True,
    patch=PatchNote(
        why="as for gdn-linear-attn-v020: two Triton kernels in place of vLLM's spec-decode launches",
        how="as for qwen-gdn-v023",
        upstream="vllm/model_executor/layers/mamba/gdn/qwen_gdn_linear_attn.py, "
        "QwenGatedDeltaNetAttention._forward_core, the spec branch, vLLM 0.27.0",
        remove_when="this family leaves the matrix",
    ),
)
