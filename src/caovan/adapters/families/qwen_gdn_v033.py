"""F11, vLLM 0.33 - 0.34: the fused MTP path's switch is renamed and is on only with speculative decoding.

vLLM 0.34 lands here by probing alone: same class, core, op, switch and metadata; it hands ``b``/``a`` to the core
as strided views of ``ba`` (caovan's kernels take their strides) and gathers/scatters prefill states with two new
Triton kernels (``ops/gather_initial_states.py``, ``ops/scatter_states.py``), which the sm75 tier records too.
"""

from __future__ import annotations

from ..family import SPEC_METADATA_FIELDS, GdnFamily, PatchNote
from .qwen_gdn_v027 import PREFILL_METADATA_FIELDS

FAMILY = GdnFamily(
    family_id="qwen-gdn-v033",
    label="F11",
    version_hint=">=0.33.0",
    differs=(
        "the fused MTP switch becomes enable_fused_gdn_spec_decode (on only with speculative decoding); the "
        "metadata builder counts plain decodes as prefills whenever spec decodes are present"
    ),
    gdn_module="vllm.model_executor.layers.mamba.gdn.qwen_gdn_linear_attn",
    gdn_class="QwenGatedDeltaNetAttention",
    core_op="vllm::qwen_gdn_attention_core",
    fla_ops_module="vllm.third_party.flash_linear_attention.ops",
    metadata_fields=(*SPEC_METADATA_FIELDS, *PREFILL_METADATA_FIELDS),
    fused_path_switches=("enable_fused_gdn_spec_decode",),
    metadata_may_lack_layer=True,
    spec_gating_selected=True,
    patch=PatchNote(
        why="as for gdn-linear-attn-v020: two Triton kernels in place of vLLM's spec-decode launches",
        how="as for qwen-gdn-v029, with the switch enable_fused_gdn_spec_decode",
        upstream="vllm/model_executor/layers/mamba/gdn/qwen_gdn_linear_attn.py, "
        "QwenGatedDeltaNetAttention._forward_core and forward_cuda's fused-path switch, vLLM 0.33.0 and 0.34.0",
        remove_when="this family leaves the matrix",
    ),
)
