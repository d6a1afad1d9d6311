"""F4, vLLM 0.16 - 0.17: ``Qwen3NextGatedDeltaNet._forward_core``, gating first, SSM state (HV, V, K)."""

from __future__ import annotations

from ..family import CONV_UPDATE, GATED_RECURRENT, GATING, GdnFamily, PatchNote

FAMILY = GdnFamily(
    family_id="qwen3-next-gdn-v016",
    label="F4",
    version_hint=">=0.16.0,<0.18",
    differs="the SSM state per slot turns from (HV, K, V) to (HV, V, K), and the recurrent kernel skips a slot < 0",
    gdn_module="vllm.model_executor.models.qwen3_next",
    gdn_class="Qwen3NextGatedDeltaNet",
    core_op="vllm::gdn_attention_core",
    fla_ops_module="vllm.model_executor.layers.fla.ops",
    install_route="class_patch",
    prefill_route="module_function",
    # Gating for every token first (fused_gdn_gating, defined in qwen3_next), then the recurrent kernel on the spec
    # tokens' g/beta, index-selected in a mixed batch.
    spec_path=(CONV_UPDATE, GATING, GATED_RECURRENT),
    spec_gating_selected=True,
    null_slot_max=-1,
    conv_dim_first_function=None,
    kv_cache_per_virtual_engine=True,
    a_log_dtype="model",
    patch=PatchNote(
        why="as for gdn-linear-attn-v020: two Triton kernels in place of vLLM's three spec-decode launches",
        how="as for qwen3-next-gdn-v018 (Qwen3NextGatedDeltaNet.__init__ wrapped in place, reversibly)",
        upstream="vllm/model_executor/models/qwen3_next.py, Qwen3NextGatedDeltaNet._forward_core, the spec branch "
        "(spec_sequence_masks is not None), vLLM 0.16.0 and 0.17.0",
        remove_when="this family leaves the matrix",
    ),
)
