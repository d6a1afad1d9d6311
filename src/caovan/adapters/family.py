"""A vLLM GDN family as data: where its layer lives, how caovan's override goes in, what its spec path reads.

One frozen :class:`GdnFamily` record per family (``caovan.adapters.families``). The probes, the override, the test
rig and the bench baseline read these records; what differs between two families that differ only in data is
the record, nothing else.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

#: The spec-decode core every family from vLLM 0.12 on calls through its custom op, by keyword.
CORE_ARGUMENTS: tuple[str, ...] = ("mixed_qkv", "b", "a", "core_attn_out")
#: ``GDNAttentionMetadata`` fields caovan's spec-decode dispatch reads.
SPEC_METADATA_FIELDS: tuple[str, ...] = (
    "num_prefills",
    "num_decodes",
    "num_spec_decodes",
    "num_actual_tokens",
    "spec_query_start_loc",
    "spec_state_indices_tensor",
    "spec_sequence_masks",
    "spec_token_indx",
    "non_spec_token_indx",
    "num_accepted_tokens",
)
#: vLLM's two spec-path kernels, as the GDN module imports them, with the keywords caovan relies on.
CONV_UPDATE = (
    "causal_conv1d_update",
    ("conv_state_indices", "num_accepted_tokens", "query_start_loc", "max_query_len"),
)
RECURRENT_UPDATE = (
    "fused_sigmoid_gating_delta_rule_update",
    ("A_log", "a", "b", "dt_bias", "ssm_state_indices", "num_accepted_tokens"),
)
#: Before vLLM 0.18 the spec path gates every token first (``fused_gdn_gating``, defined in the GDN module), then
#: runs the recurrent kernel on the spec tokens' ``g``/``beta``.
GATING = ("fused_gdn_gating", ("A_log", "a", "b", "dt_bias"))
GATED_RECURRENT = (
    "fused_recurrent_gated_delta_rule",
    ("g", "beta", "initial_state", "ssm_state_indices", "num_accepted_tokens"),
)


@dataclass(frozen=True)
class PatchNote:
    """The patch of upstream behaviour a family's override is, documented where it is declared (vllm-ascend)."""

    why: str
    how: str
    upstream: str
    remove_when: str


@dataclass(frozen=True)
class GdnFamily:
    """What one family of vLLM releases looks like to caovan. Every field is probed or read, none is assumed.

    From vLLM 0.19 the layer is a ``PluggableLayer`` and caovan's subclass goes in through ``register_oot``; before,
    the layer is a plain ``nn.Module`` and caovan wraps its class's ``__init__`` instead (``install_route``).
    """

    #: Shown to users (status line, doctor, docs/compat.md) and recorded in matrix results.
    family_id: str
    #: The family's name in docs/vllm-gdn-families.md (F1 ... F11).
    label: str
    #: PEP 440 range: the order in which families are probed, never the decision.
    version_hint: str
    #: One sentence: what differs from the family before it (docs/compat.md shows it).
    differs: str
    #: The module that defines the GDN layer class and imports its spec-path kernels into its namespace.
    gdn_module: str
    gdn_class: str
    #: The custom op through which a forward pass reaches the core (shown in diagnostics).
    core_op: str
    #: Where vLLM's FLA ops package lives (the bench baseline and the test rig import its kernels from there).
    fla_ops_module: str
    patch: PatchNote
    #: How the override goes in: ``"register_oot"`` (vLLM builds caovan's subclass, keyed by ``gdn_class``) or
    #: ``"class_patch"`` (the in-tree class's ``__init__`` is wrapped, reversibly; its subclasses inherit it).
    install_route: Literal["register_oot", "class_patch"] = "register_oot"
    #: Why caovan does not serve this family although it recognises it (doctor and start-up say so); None: served.
    refusal: str | None = None
    core_method: str = "_forward_core"
    core_arguments: tuple[str, ...] = CORE_ARGUMENTS
    #: nn.Module attributes the override reads, assigned in the layer's ``__init__``.
    layer_attributes: tuple[str, ...] = ("conv1d", "A_log", "dt_bias")
    metadata_module: str = "vllm.v1.attention.backends.gdn_attn"
    #: Where ``PAD_SLOT_ID`` / ``NULL_BLOCK_ID`` are defined (the v1 module has them from vLLM 0.11).
    slot_constants_module: str = "vllm.v1.attention.backends.utils"
    metadata_class: str = "GDNAttentionMetadata"
    metadata_fields: tuple[str, ...] = SPEC_METADATA_FIELDS
    #: Metadata fields this family must not have: they tell it from the family after it.
    metadata_fields_absent: tuple[str, ...] = ()
    #: Layer methods this family must not have (a path caovan would not see, e.g. a fused decode op).
    methods_absent: tuple[str, ...] = ()
    #: The spec path's kernels as the GDN module imports them: (name, keywords probed).
    spec_path: tuple[tuple[str, tuple[str, ...]], ...] = (CONV_UPDATE, RECURRENT_UPDATE)
    #: A state slot id at or below this is null or padding (0 from vLLM 0.20: ``<= 0``; -1 before: ``< 0``).
    null_slot_max: int = 0
    #: Whether vLLM's recurrent kernel skips a null slot itself (from 0.16); before, only CUDA-graph padding rows,
    #: which have no tokens, carry one, and a null column in a live row would be written out of bounds.
    recurrent_skips_null_slots: bool = True
    #: SSM state per slot: ``"vk"`` is (HV, V, K) (vLLM >= 0.16), ``"kv"`` is (HV, K, V).
    ssm_layout: Literal["vk", "kv"] = "vk"
    #: The GDN module's function saying whether the conv state is stored dim-first; None: never dim-first.
    conv_dim_first_function: str | None = "is_conv_state_dim_first"
    #: Layer attributes, assigned in ``__init__``, that switch a fused decode path on; caovan sets them False on
    #: the layers it takes over, so that every spec batch reaches the core it replaced.
    fused_path_switches: tuple[str, ...] = ()
    #: Whether the core may be called with metadata that lacks this layer (vLLM looks it up with ``.get``).
    metadata_may_lack_layer: bool = False
    #: Whether the in-tree core splits plain decodes off prefills in a non-spec batch (vLLM 0.23 - 0.31): the
    #: metadata caovan hands it for a mixed batch's other tokens must then count those decodes as prefills.
    in_tree_splits_decodes: bool = False
    #: Whether vLLM's own spec path gathers the spec tokens' gating inputs ``a``/``b`` in mixed batches.
    spec_gating_selected: bool = False
    #: Whether ``layer.kv_cache`` is a list with one ``[conv, ssm]`` per virtual engine (before vLLM 0.19), read at
    #: ``forward_context.virtual_engine``, rather than ``[conv, ssm]`` itself.
    kv_cache_per_virtual_engine: bool = False
    #: The dtype ``A_log`` is created in: float32, or the model's dtype (vLLM 0.12 - 0.18 give it none).
    a_log_dtype: Literal["float32", "model"] = "float32"
    #: How the layer's prefill branch reaches FLA's ``chunk_gated_delta_rule`` (where caovan's prefill goes in):
    #: ``"layer_attribute"`` (vLLM 0.18 on: ``__init__`` assigns a ``ChunkGatedDeltaRule`` custom op to
    #: ``self.chunk_gated_delta_rule``) or ``"module_function"`` (before: the FLA function, imported into the GDN
    #: module's namespace and called from there).
    prefill_route: Literal["layer_attribute", "module_function"] = "layer_attribute"

    @property
    def oot_key(self) -> str:
        """The name ``PluggableLayer.__new__`` looks an override up by: the instantiated class's ``__name__``."""
        return self.gdn_class
