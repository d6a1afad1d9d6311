"""F6, vLLM 0.19: ``GatedDeltaNetAttention`` becomes a ``PluggableLayer`` in ``layers/mamba/gdn_linear_attn.py``."""

from __future__ import annotations

from ..family import GdnFamily, PatchNote

FAMILY = GdnFamily(
    family_id="gdn-linear-attn-v019",
    label="F6",
    version_hint=">=0.19.0,<0.20",
    differs=(
        "the layer moves to layers/mamba/gdn_linear_attn.py as GatedDeltaNetAttention, a PluggableLayer; "
        "a state slot < 0 (PAD_SLOT_ID, -1) is the null one and block 0 is a real block"
    ),
    gdn_module="vllm.model_executor.layers.mamba.gdn_linear_attn",
    gdn_class="GatedDeltaNetAttention",
    core_op="vllm::gdn_attention_core",
    fla_ops_module="vllm.model_executor.layers.fla.ops",
    # vLLM 0.19's kernels skip a slot < 0 (the conv kernel == PAD_SLOT_ID, the recurrent one < 0; ids are >= -1).
    null_slot_max=-1,
    # The conv state is always stored (L, dim) and transposed by the core: no dim-first switch before 0.20.
    conv_dim_first_function=None,
    patch=PatchNote(
        why="as for gdn-linear-attn-v020: two Triton kernels in place of vLLM's spec-decode launches",
        how="as for gdn-linear-attn-v020 (PluggableLayer.register_oot('GatedDeltaNetAttention'))",
        upstream="vllm/model_executor/layers/mamba/gdn_linear_attn.py, GatedDeltaNetAttention._forward_core, "
        "the spec branch (spec_sequence_masks is not None), vLLM 0.19.0",
        remove_when="this family leaves the matrix",
    ),
)
