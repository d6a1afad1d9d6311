"""F1 and F2, vLLM 0.10.2 - 0.11: the op ``vllm::gdn_attention`` runs the whole layer; recognised, not served."""

from __future__ import annotations

from ..family import GATED_RECURRENT, SPEC_METADATA_FIELDS, GdnFamily, PatchNote

#: Why caovan leaves these releases to vLLM (doctor and start-up say it, the matrix row shows it).
REFUSAL = (
    "the op runs the whole layer (_forward) with the spec step inline, and that step hands the recurrent kernel "
    "g/beta already gated for every token; taking over only the spec step would need a copy of _forward's "
    "projections or a kernel that takes g/beta, and caovan has neither"
)
#: Before vLLM 0.12 a mixed batch's spec tokens are a boolean mask, not an index.
_MASK_FIELDS = tuple(f for f in SPEC_METADATA_FIELDS if f not in ("spec_token_indx", "non_spec_token_indx")) + (
    "spec_token_masks",
)
# g only: beta is b.sigmoid(), a tensor method, computed beside it.
_GATING = ("fused_gdn_gating", ("A_log", "a", "dt_bias"))
_NOT_SERVED = PatchNote(
    why="not applied: caovan does not serve this family",
    how="nothing is installed; the plugin stays inert and says why",
    upstream="vllm/model_executor/models/qwen3_next.py, Qwen3NextGatedDeltaNet._forward, the inline spec blocks",
    remove_when="this family leaves the matrix",
)

V011 = GdnFamily(
    family_id="qwen3-next-gdn-v011",
    label="F2",
    version_hint=">=0.11.0,<0.12",
    differs="the spec conv becomes varlen (query_start_loc) and the metadata gains num_actual_tokens",
    gdn_module="vllm.model_executor.models.qwen3_next",
    gdn_class="Qwen3NextGatedDeltaNet",
    core_op="vllm::gdn_attention",
    fla_ops_module="vllm.model_executor.layers.fla.ops",
    patch=_NOT_SERVED,
    install_route="class_patch",
    refusal=REFUSAL,
    core_method="_forward",
    core_arguments=("hidden_states", "output"),
    metadata_fields=_MASK_FIELDS,
    metadata_fields_absent=("spec_token_indx",),
    methods_absent=("_forward_core",),
    spec_path=(
        ("causal_conv1d_update", ("conv_state_indices", "num_accepted_tokens", "query_start_loc")),
        _GATING,
        GATED_RECURRENT,
    ),
    null_slot_max=-1,
    recurrent_skips_null_slots=False,
    ssm_layout="kv",
    conv_dim_first_function=None,
    kv_cache_per_virtual_engine=True,
)

V010 = GdnFamily(
    family_id="qwen3-next-gdn-v010",
    label="F1",
    version_hint=">=0.10.2,<0.11",
    differs=(
        "vLLM's first GDN layer (Qwen3-Next): one op, vllm::gdn_attention, runs the whole layer, and the spec "
        "conv takes equal-length sequences only"
    ),
    gdn_module=V011.gdn_module,
    gdn_class=V011.gdn_class,
    core_op=V011.core_op,
    fla_ops_module=V011.fla_ops_module,
    patch=_NOT_SERVED,
    install_route="class_patch",
    refusal=REFUSAL,
    core_method="_forward",
    core_arguments=("hidden_states", "output"),
    metadata_fields=tuple(f for f in _MASK_FIELDS if f != "num_actual_tokens"),
    metadata_fields_absent=("num_actual_tokens", "spec_token_indx"),
    methods_absent=("_forward_core",),
    spec_path=(("causal_conv1d_update", ("conv_state_indices", "num_accepted_tokens")), _GATING, GATED_RECURRENT),
    slot_constants_module="vllm.attention.backends.utils",
    null_slot_max=-1,
    recurrent_skips_null_slots=False,
    ssm_layout="kv",
    conv_dim_first_function=None,
    kv_cache_per_virtual_engine=True,
)
