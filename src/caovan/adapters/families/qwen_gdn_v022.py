"""F8a, vLLM 0.22: ``QwenGatedDeltaNetAttention`` in ``layers/mamba/gdn/qwen_gdn_linear_attn.py``."""

from __future__ import annotations

from ..family import GdnFamily, PatchNote

FAMILY = GdnFamily(
    family_id="qwen-gdn-v022",
    label="F8",
    version_hint=">=0.22.0,<0.23",
    differs=(
        "the layer is renamed QwenGatedDeltaNetAttention and moves to layers/mamba/gdn/ (op "
        "vllm::qwen_gdn_attention_core); its _forward_core is unchanged"
    ),
    gdn_module="vllm.model_executor.layers.mamba.gdn.qwen_gdn_linear_attn",
    gdn_class="QwenGatedDeltaNetAttention",
    core_op="vllm::qwen_gdn_attention_core",
    fla_ops_module="vllm.model_executor.layers.fla.ops",
    # vLLM 0.23 adds these for its split of plain decodes off prefills, which this family's core does not make.
    metadata_fields_absent=("prefill_state_indices",),
    patch=PatchNote(
        why="as for gdn-linear-attn-v020: two Triton kernels in place of vLLM's spec-decode launches",
        how="PluggableLayer.register_oot('QwenGatedDeltaNetAttention'); _forward_core bound on taken-over layers",
        upstream="vllm/model_executor/layers/mamba/gdn/qwen_gdn_linear_attn.py, "
        "QwenGatedDeltaNetAttention._forward_core, the spec branch, vLLM 0.22.0",
        remove_when="this family leaves the matrix",
    ),
)
