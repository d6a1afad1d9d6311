"""F3, vLLM 0.12 - 0.15: ``Qwen3NextGatedDeltaNet._forward_core`` behind ``vllm::gdn_attention_core``, (HV, K, V)."""

from __future__ import annotations

from ..family import CONV_UPDATE, GATED_RECURRENT, GATING, GdnFamily, PatchNote

FAMILY = GdnFamily(
    family_id="qwen3-next-gdn-v012",
    label="F3",
    version_hint=">=0.12.0,<0.16",
    differs=(
        "the op narrows to the core (vllm::gdn_attention_core runs _forward_core) and the metadata lists the spec "
        "tokens by index (spec_token_indx); the recurrent kernel checks no slot, padding rows have no tokens"
    ),
    gdn_module="vllm.model_executor.models.qwen3_next",
    gdn_class="Qwen3NextGatedDeltaNet",
    core_op="vllm::gdn_attention_core",
    fla_ops_module="vllm.model_executor.layers.fla.ops",
    install_route="class_patch",
    prefill_route="module_function",
    spec_path=(CONV_UPDATE, GATING, GATED_RECURRENT),
    spec_gating_selected=True,
    # -1 (PAD_SLOT_ID) is the only negative id vLLM writes; its conv kernel skips it, its recurrent kernel is never
    # given a token of such a row. caovan skips every slot < 0.
    null_slot_max=-1,
    recurrent_skips_null_slots=False,
    ssm_layout="kv",
    conv_dim_first_function=None,
    kv_cache_per_virtual_engine=True,
    a_log_dtype="model",
    patch=PatchNote(
        why="as for gdn-linear-attn-v020: two Triton kernels in place of vLLM's three spec-decode launches",
        how="as for qwen3-next-gdn-v018 (Qwen3NextGatedDeltaNet.__init__ wrapped in place, reversibly)",
        upstream="vllm/model_executor/models/qwen3_next.py, Qwen3NextGatedDeltaNet._forward_core, the spec branch "
        "(spec_sequence_masks is not None), vLLM 0.12.0 and 0.14.0",
        remove_when="this family leaves the matrix",
    ),
)
