"""F7, vLLM 0.20 - 0.21: ``GatedDeltaNetAttention`` in ``layers/mamba/gdn_linear_attn.py``."""

from __future__ import annotations

from ..family import GdnFamily, PatchNote

FAMILY = GdnFamily(
    family_id="gdn-linear-attn-v020",
    label="F7",
    version_hint=">=0.20.0,<0.22",
    differs="null state slot becomes block 0 (<= 0 skips); the conv state may be stored dim-first",
    gdn_module="vllm.model_executor.layers.mamba.gdn_linear_attn",
    gdn_class="GatedDeltaNetAttention",
    core_op="vllm::gdn_attention_core",
    fla_ops_module="vllm.model_executor.layers.fla.ops",
    patch=PatchNote(
        why=(
            "vLLM's spec-decode core runs the conv update, a split/cat rearrange and the recurrent kernel as "
            "separate launches with Python around them; caovan does the same maths in two Triton kernels"
        ),
        how=(
            "PluggableLayer.register_oot('GatedDeltaNetAttention') builds caovan's subclass; its __init__ runs the "
            "in-tree one, then binds _forward_core on the instance where caovan takes the layer"
        ),
        upstream="vllm/model_executor/layers/mamba/gdn_linear_attn.py, GatedDeltaNetAttention._forward_core, "
        "the spec branch (spec_sequence_masks is not None), vLLM 0.21.0",
        remove_when="this family leaves the matrix (vLLM 0.22 moved the class to layers/mamba/gdn/)",
    ),
)
