"""caovan's out-of-tree GDN layer, one class factory for every family: what differs comes from the family record.

Patch of upstream behaviour, documented in place (each family's record, ``families/*.py``, names the upstream code
it replaces and when to remove it):

* Why: vLLM's speculative-decode (MTP verify) core for GDN runs the conv update, a split/cat rearrange and the
  recurrent kernel as separate launches with a lot of Python around them; caovan does the same maths in two Triton
  kernels (shared Q/K conv prep, fused V-conv + GDN update) writing straight into vLLM's buffers.
* How: ``PluggableLayer.register_oot`` keyed by the family's layer class makes vLLM build this subclass wherever it
  builds the in-tree layer; its ``__init__`` runs the in-tree ``__init__`` untouched and then, only when caovan is
  enabled and the layer is supported, binds ``_forward_core`` on the instance (and switches off the family's fused
  decode path for that layer, so that its spec batches reach the core). The custom op looks ``_forward_core`` up on
  the instance at every call, so a disabled or unsupported layer keeps the in-tree method with zero overhead.
  Everything else (prefill, plain decode, warm-up/profile calls without metadata) still runs the in-tree code; in
  mixed prefill + spec batches the spec tokens are ours and the rest is handed to the in-tree core.

A second, smaller patch serves a model without any GDN layer, which never builds this class, so nothing here would
notice that caovan cannot act: ``install()`` wraps vLLM's model loader (``plugin/model_loader.py``) so that, after
the *target* model is built, require mode fails start-up when no layer of the model was taken over. Remove together
with the layer override.
"""

from __future__ import annotations

import dataclasses
import importlib
from typing import Any

from ..plugin import counters, model_loader
from .family import GdnFamily
from .layer_support import check_required_model, kernel_tensors, plan_for_layer


def in_tree_class(family: GdnFamily) -> type:
    return getattr(importlib.import_module(family.gdn_module), family.gdn_class)


def build_override_class(base: type, family: GdnFamily) -> type:
    """The subclass registered under the family's key (it must subclass ``base`` for ``__init__`` to run)."""
    from vllm.forward_context import get_forward_context

    from ..kernels.gdn_spec_decode import KERNEL_NAMES, gdn_spec_decode

    in_tree_core = getattr(base, family.core_method)
    family_id = family.family_id

    class CaovanGatedDeltaNetAttention(base):  # type: ignore[misc, valid-type]
        _caovan_override = True
        _caovan_family = family

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self._caovan_plan = plan_for_layer(self, family)
            if self._caovan_plan is not None:
                setattr(self, family.core_method, self._caovan_forward_core)
                for switch in family.fused_path_switches:
                    setattr(self, switch, False)  # read per call: the batch then takes the op that calls the core

        def _caovan_spec(self, md: Any, mixed_qkv: Any, b: Any, a: Any, out: Any, token_index: Any) -> None:
            plan = self._caovan_plan
            A_log, dt_bias, conv_weight, conv_bias, conv_state, ssm_state = kernel_tensors(self, plan.conv_dim_first)
            n = md.num_spec_decodes
            query_start_loc = md.spec_query_start_loc
            if query_start_loc.shape[0] != n + 1:  # vLLM's pure-spec batches already have n + 1 entries
                query_start_loc = query_start_loc[: n + 1]
            gdn_spec_decode(
                mixed_qkv,
                a,
                b,
                A_log,
                dt_bias,
                conv_weight,
                conv_bias,
                conv_state,
                ssm_state,
                query_start_loc,
                md.spec_state_indices_tensor,
                md.num_accepted_tokens,
                out,
                num_k_heads=plan.num_k_heads,
                head_k_dim=plan.head_k_dim,
                head_v_dim=plan.head_v_dim,
                ssm_layout=family.ssm_layout,
                null_slot_max=family.null_slot_max,
                token_index=token_index,
            )

        def _caovan_forward_core(self, mixed_qkv: Any, b: Any, a: Any, core_attn_out: Any) -> None:
            raw = get_forward_context().attn_metadata
            md = None if raw is None else raw.get(self.prefix) if family.metadata_may_lack_layer else raw[self.prefix]
            if md is None:
                counters.record_fallback("no-metadata")  # warm-up / profile run
                return in_tree_core(self, mixed_qkv, b, a, core_attn_out)
            if md.spec_sequence_masks is None:
                counters.record_fallback("no-spec-tokens")  # prefill / plain decode batch
                return in_tree_core(self, mixed_qkv, b, a, core_attn_out)
            if md.num_prefills == 0 and md.num_decodes == 0:
                self._caovan_spec(md, mixed_qkv, b, a, core_attn_out, None)
                counters.record_dispatch("spec", family_id, KERNEL_NAMES, self.prefix)
                return None
            self._caovan_mixed(raw, md, mixed_qkv, b, a, core_attn_out)
            counters.record_dispatch("mixed", family_id, KERNEL_NAMES, self.prefix)
            return None

        def _caovan_mixed(self, raw: dict, md: Any, mixed_qkv: Any, b: Any, a: Any, core_attn_out: Any) -> None:
            """Spec tokens through caovan (gathered by index), the rest through the in-tree core."""
            self._caovan_spec(md, mixed_qkv, b, a, core_attn_out, md.spec_token_indx)
            idx = md.non_spec_token_indx
            non_spec_md = non_spec_metadata(md, family)
            out = core_attn_out.new_zeros((non_spec_md.num_actual_tokens, *core_attn_out.shape[1:]))
            raw[self.prefix] = non_spec_md
            try:
                in_tree_core(self, mixed_qkv.index_select(0, idx), b.index_select(0, idx), a.index_select(0, idx), out)
            finally:
                raw[self.prefix] = md
            core_attn_out.index_copy_(0, idx, out)

    CaovanGatedDeltaNetAttention.__qualname__ = "CaovanGatedDeltaNetAttention"
    return CaovanGatedDeltaNetAttention


def non_spec_metadata(md: Any, family: GdnFamily) -> Any:
    """A mixed batch's metadata for its prefill and plain-decode tokens alone, as the in-tree core reads it.

    Where the in-tree core splits plain decodes off prefills (``in_tree_splits_decodes``), its ``prefill_*`` fields
    were built for every non-spec sequence, decodes included: the decodes are then counted as prefills, as vLLM
    0.33's metadata builder does itself whenever spec decodes are present.
    """
    fold = family.in_tree_splits_decodes
    return dataclasses.replace(
        md,
        num_prefills=md.num_prefills + md.num_decodes if fold else md.num_prefills,
        num_prefill_tokens=md.num_prefill_tokens + md.num_decode_tokens if fold else md.num_prefill_tokens,
        num_decodes=0 if fold else md.num_decodes,
        num_decode_tokens=0 if fold else md.num_decode_tokens,
        num_spec_decodes=0,
        num_spec_decode_tokens=0,
        num_actual_tokens=md.num_prefill_tokens + md.num_decode_tokens,
        spec_query_start_loc=None,
        spec_state_indices_tensor=None,
        spec_sequence_masks=None,
        spec_token_indx=None,
        non_spec_token_indx=None,
        num_accepted_tokens=None,
    )


def install(family: GdnFamily) -> str:
    """Register the override once per process; returns what happened (for the status line)."""
    from vllm.model_executor.custom_op import op_registry_oot

    existing = op_registry_oot.get(family.oot_key)
    if existing is not None:
        if getattr(existing, "_caovan_override", False):
            return "already installed"
        raise RuntimeError(
            f"{family.oot_key} is already replaced by {existing.__module__}.{existing.__qualname__}; "
            "two plugins cannot both replace it"
        )
    # All or nothing: the plugin reports a failed install as inert, so nothing of it may stay behind (a loader
    # left with this family's check would fail a require-mode start-up with "no GDN layer caovan can take over"
    # instead of the install error, and would outlive the plugin's own inert check should installing that fail).
    try:
        if not model_loader.install(after=check_required_model):
            raise RuntimeError(f"{model_loader.LOADER_CLASS}.load_model(vllm_config, model_config) not found")
        base = in_tree_class(family)
        base.register_oot(build_override_class(base, family), name=family.oot_key)
    except BaseException:
        uninstall(family)
        raise
    return "installed"


def uninstall(family: GdnFamily) -> bool:
    """Remove the override (tests; ``pip uninstall`` needs nothing: vLLM then never loads caovan)."""
    from vllm.model_executor.custom_op import op_registry_oot

    model_loader.uninstall()
    existing = op_registry_oot.get(family.oot_key)
    if existing is not None and getattr(existing, "_caovan_override", False):
        del op_registry_oot[family.oot_key]
        return True
    return False
