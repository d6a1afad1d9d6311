"""F10, vLLM 0.29 - 0.31: a fused CUDA MTP decode path that bypasses ``_forward_core``."""

from __future__ import annotations

from ..family import SPEC_METADATA_FIELDS, GdnFamily, PatchNote
from .qwen_gdn_v027 import PREFILL_METADATA_FIELDS

FAMILY = GdnFamily(
    family_id="qwen-gdn-v029",
    label="F10",
    version_hint=">=0.29.0,<0.33",
    differs=(
        "a fused CUDA MTP path (switch enable_fused_gdn_decode) takes pure-spec batches past _forward_core; "
        "spec a/b are gathered; metadata may lack the layer"
    ),
    gdn_module="vllm.model_executor.layers.mamba.gdn.qwen_gdn_linear_attn",
    gdn_class="QwenGatedDeltaNetAttention",
    core_op="vllm::qwen_gdn_attention_core",
    fla_ops_module="vllm.third_party.flash_linear_attention.ops",
    metadata_fields=(*SPEC_METADATA_FIELDS, *PREFILL_METADATA_FIELDS),
    fused_path_switches=("enable_fused_gdn_decode",),
    metadata_may_lack_layer=True,
    in_tree_splits_decodes=True,
    spec_gating_selected=True,
    patch=PatchNote(
        why="as for gdn-linear-attn-v020: two Triton kernels in place of vLLM's spec-decode launches",
        how=(
            "as for qwen-gdn-v023, and enable_fused_gdn_decode is set False on each layer caovan takes over (read "
            "per call in forward_cuda), so its spec batches reach _forward_core instead of the fused CUDA op"
        ),
        upstream="vllm/model_executor/layers/mamba/gdn/qwen_gdn_linear_attn.py, "
        "QwenGatedDeltaNetAttention._forward_core and forward_cuda's fused-path switch, vLLM 0.29.0 - 0.31.0",
        remove_when="this family leaves the matrix",
    ),
)
