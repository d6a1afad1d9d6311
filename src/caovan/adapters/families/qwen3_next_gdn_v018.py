"""F5, vLLM 0.18: ``Qwen3NextGatedDeltaNet`` in ``models/qwen3_next.py``, an ``nn.Module`` Qwen3.5 subclasses."""

from __future__ import annotations

from ..family import GdnFamily, PatchNote

FAMILY = GdnFamily(
    family_id="qwen3-next-gdn-v018",
    label="F5",
    version_hint=">=0.18.0,<0.19",
    differs=(
        "one fused kernel, fused_sigmoid_gating_delta_rule_update, gates and updates the spec tokens from the raw "
        "a/b; Qwen3.5's layer arrives as a subclass of the Qwen3-Next one"
    ),
    gdn_module="vllm.model_executor.models.qwen3_next",
    gdn_class="Qwen3NextGatedDeltaNet",
    core_op="vllm::gdn_attention_core",
    fla_ops_module="vllm.model_executor.layers.fla.ops",
    install_route="class_patch",
    # vLLM 0.18's kernels skip a slot < 0 (the conv kernel == PAD_SLOT_ID, the recurrent one < 0).
    null_slot_max=-1,
    conv_dim_first_function=None,
    kv_cache_per_virtual_engine=True,
    a_log_dtype="model",
    patch=PatchNote(
        why="as for gdn-linear-attn-v020: two Triton kernels in place of vLLM's spec-decode launches",
        how=(
            "Qwen3NextGatedDeltaNet.__init__ wrapped in place (Qwen3_5GatedDeltaNet inherits it): the in-tree "
            "__init__, then _forward_core bound on the layers caovan takes; uninstall restores the original"
        ),
        upstream="vllm/model_executor/models/qwen3_next.py, Qwen3NextGatedDeltaNet._forward_core, the spec branch "
        "(spec_sequence_masks is not None), vLLM 0.18.0",
        remove_when="this family leaves the matrix (vLLM 0.19 made the layer a PluggableLayer)",
    ),
)
