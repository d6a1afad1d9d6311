"""caovan's out-of-tree GDN layer, one class factory for every family: what differs comes from the family record.

Patch of upstream behaviour, documented in place (each family's record, ``families/*.py``, names the upstream code
it replaces and when to remove it):

* Why: vLLM's speculative-decode (MTP verify) core for GDN runs the conv update, a split/cat rearrange and the
  recurrent kernel as separate launches with a lot of Python around them; caovan does the same maths in two Triton
  kernels (shared Q/K conv prep, fused V-conv + GDN update) writing straight into vLLM's buffers.
* How: the family's ``install_route`` says how caovan's code runs right after the in-tree ``__init__``, untouched:
  ``register_oot`` (vLLM 0.19 on, the layer is a ``PluggableLayer``) registers a subclass keyed by the layer class,
  which vLLM then builds wherever it builds the in-tree layer; ``class_patch`` (before 0.19, a plain ``nn.Module``)
  wraps the class's own ``__init__`` in place, which its subclasses (vLLM 0.18's Qwen3.5 layer) inherit, and
  ``uninstall`` puts the original back. Either way, only when caovan is enabled and the layer is supported, it binds
  ``_forward_core`` on the instance (and switches off the family's fused decode path for that layer, so that its
  spec batches reach the core). The custom op looks ``_forward_core`` up on the instance at every call, so a
  disabled or unsupported layer keeps the in-tree method with zero overhead.
  Everything else (prefill, plain decode, warm-up/profile calls without metadata) still runs the in-tree code; in
  mixed prefill + spec batches the spec tokens are ours and the rest is handed to the in-tree core. With
  ``"caovan_prefill": true`` the in-tree prefill branch's FLA call is caovan's too (``prefill_hook.py``).

A second, smaller patch serves a model without any GDN layer, which never builds this class, so nothing here would
notice that caovan cannot act: ``install()`` wraps vLLM's model loader (``plugin/model_loader.py``) so that, after
the *target* model is built, require mode fails start-up when no layer of the model was taken over. Remove together
with the layer override.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
from collections.abc import Callable
from types import MethodType
from typing import Any

from ..plugin import counters, graph_padding_patch, model_loader, uniform_decode_guard
from . import prefill_hook
from .family import GdnFamily
from .layer_support import announce_once, check_required_model, kernel_tensors, plan_for_layer, prefill_plan_for_layer


def in_tree_class(family: GdnFamily) -> type:
    return getattr(importlib.import_module(family.gdn_module), family.gdn_class)


def build_take_over(base: type, family: GdnFamily) -> Callable[[Any], None]:
    """``take_over(layer)``, run right after the in-tree ``__init__``: decides once whether caovan takes this
    layer's spec-decode core and, if so, binds caovan's core on the instance. Written once for both routes."""
    from vllm.forward_context import get_forward_context

    from ..kernels.gdn_spec_decode import KERNEL_NAMES, gdn_spec_decode

    in_tree_core = getattr(base, family.core_method)
    family_id = family.family_id
    per_engine = family.kv_cache_per_virtual_engine

    def spec(layer: Any, context: Any, md: Any, mixed_qkv: Any, b: Any, a: Any, out: Any, token_index: Any) -> None:
        plan = layer._caovan_plan
        engine = context.virtual_engine if per_engine else None
        A_log, dt_bias, conv_weight, conv_bias, conv_state, ssm_state = kernel_tensors(
            layer, plan.conv_dim_first, engine
        )
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

    def mixed(layer: Any, context: Any, md: Any, mixed_qkv: Any, b: Any, a: Any, core_attn_out: Any) -> None:
        """Spec tokens through caovan (gathered by index), the rest through the in-tree core."""
        spec(layer, context, md, mixed_qkv, b, a, core_attn_out, md.spec_token_indx)
        raw = context.attn_metadata
        idx = md.non_spec_token_indx
        non_spec_md = non_spec_metadata(md, family)
        out = core_attn_out.new_zeros((non_spec_md.num_actual_tokens, *core_attn_out.shape[1:]))
        raw[layer.prefix] = non_spec_md
        try:
            in_tree_core(layer, mixed_qkv.index_select(0, idx), b.index_select(0, idx), a.index_select(0, idx), out)
        finally:
            raw[layer.prefix] = md
        core_attn_out.index_copy_(0, idx, out)

    def caovan_forward_core(self: Any, mixed_qkv: Any, b: Any, a: Any, core_attn_out: Any) -> None:
        context = get_forward_context()
        raw = context.attn_metadata
        md = None if raw is None else raw.get(self.prefix) if family.metadata_may_lack_layer else raw[self.prefix]
        if md is None:
            counters.record_fallback("no-metadata")  # warm-up / profile run
            return in_tree_core(self, mixed_qkv, b, a, core_attn_out)
        if md.spec_sequence_masks is None:
            counters.record_fallback("no-spec-tokens")  # prefill / plain decode batch
            return in_tree_core(self, mixed_qkv, b, a, core_attn_out)
        if md.num_prefills == 0 and md.num_decodes == 0:
            spec(self, context, md, mixed_qkv, b, a, core_attn_out, None)
            counters.record_dispatch("spec", family_id, KERNEL_NAMES, self.prefix)
            return None
        mixed(self, context, md, mixed_qkv, b, a, core_attn_out)
        counters.record_dispatch("mixed", family_id, KERNEL_NAMES, self.prefix)
        return None

    def take_over(layer: Any) -> None:
        layer._caovan_family = family  # read by the model-loader check (layer_support.check_required_model)
        if getattr(type(layer), family.core_method) is not in_tree_core:
            # A subclass with a core of its own: binding caovan's would replace code caovan never read.
            layer._caovan_plan = None
            layer._caovan_prefill = False
            subclass_core_log(type(layer), family)
            return
        layer._caovan_prefill = prefill_plan_for_layer(layer, family) and prefill_hook.take_over_layer(layer, family)
        layer._caovan_plan = plan_for_layer(layer, family)
        if layer._caovan_plan is not None:
            setattr(layer, family.core_method, MethodType(caovan_forward_core, layer))
            for switch in family.fused_path_switches:
                setattr(layer, switch, False)  # read per call: the batch then takes the op that calls the core

    return take_over


def build_override_class(base: type, family: GdnFamily) -> type:
    """The subclass registered under the family's key (it must subclass ``base`` for ``__init__`` to run)."""
    take_over = build_take_over(base, family)

    class CaovanGatedDeltaNetAttention(base):  # type: ignore[misc, valid-type]
        _caovan_override = True
        _caovan_family = family

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            take_over(self)

    CaovanGatedDeltaNetAttention.__qualname__ = "CaovanGatedDeltaNetAttention"
    return CaovanGatedDeltaNetAttention


#: The class attribute that holds caovan's ``__init__`` wrapper on a class-patched layer class: the wrapper is known
#: by identity (``functools.wraps`` copies attributes, so a marker on it would also mark another plugin's wrapper).
INIT_WRAPPER_ATTRIBUTE = "_caovan_init_wrapper"


def build_init_wrapper(base: type, family: GdnFamily) -> Callable[..., None]:
    """The class-patch route's ``__init__``: the in-tree one, untouched, then ``take_over``."""
    original = base.__dict__["__init__"]
    take_over = build_take_over(base, family)

    @functools.wraps(original)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        take_over(self)

    __init__._caovan_original = original  # type: ignore[attr-defined]
    return __init__


def subclass_core_log(cls: type, family: GdnFamily) -> None:
    announce_once(
        f"subclass-core:{cls.__qualname__}",
        f"{cls.__qualname__} defines its own {family.core_method}: caovan leaves its layers to vLLM",
    )


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
    """Put the override in, once per process; returns what happened (for the status line)."""
    if family.refusal is not None:
        raise RuntimeError(f"caovan does not serve {family.family_id}: {family.refusal}")
    # All or nothing: the plugin reports a failed install as inert, so nothing of it may stay behind (a loader
    # left with this family's check would fail a require-mode start-up with "no GDN layer caovan can take over"
    # instead of the install error, and would outlive the plugin's own inert check should installing that fail).
    try:
        if _layer_override_in_place(family):
            return "already installed"
        if not model_loader.install(after=check_required_model):
            raise RuntimeError(f"{model_loader.LOADER_CLASS}.load_model(vllm_config, model_config) not found")
        base = in_tree_class(family)
        if family.install_route == "class_patch":
            wrapper = build_init_wrapper(base, family)
            type.__setattr__(base, INIT_WRAPPER_ATTRIBUTE, wrapper)
            type.__setattr__(base, "__init__", wrapper)
        else:
            base.register_oot(build_override_class(base, family), name=family.oot_key)
    except BaseException:
        uninstall(family)
        raise
    return "installed"


def _layer_override_in_place(family: GdnFamily) -> bool:
    """Whether caovan's layer override is in place already; RuntimeError when another plugin's is (register_oot:
    vLLM keeps one class per key; a wrapper of ``__init__`` on top of caovan's chains, and counts as in place)."""
    base = in_tree_class(family)
    if family.install_route == "class_patch":
        return base.__dict__.get(INIT_WRAPPER_ATTRIBUTE) is not None
    from vllm.model_executor.custom_op import op_registry_oot

    existing = op_registry_oot.get(family.oot_key)
    if existing is not None and not getattr(existing, "_caovan_override", False):
        raise RuntimeError(
            f"{family.oot_key} is already replaced by {existing.__module__}.{existing.__qualname__}; "
            "two plugins cannot both replace it"
        )
    return existing is not None


def uninstall(family: GdnFamily) -> bool:
    """Remove the override (tests; ``pip uninstall`` needs nothing: vLLM then never loads caovan)."""
    model_loader.uninstall()
    uniform_decode_guard.uninstall()
    graph_padding_patch.uninstall(family)
    prefill_hook.uninstall_module_function(family)
    return uninstall_layer(family)


def uninstall_layer(family: GdnFamily) -> bool:
    """Take out the layer part of the override alone (the model-loader checks stay); True when it was in place."""
    if family.install_route == "class_patch":
        base = in_tree_class(family)
        wrapper = base.__dict__.get(INIT_WRAPPER_ATTRIBUTE)
        if wrapper is None or base.__dict__.get("__init__") is not wrapper:
            return False  # not installed, or another wrapper sits on top of caovan's: leave it as it is
        type.__setattr__(base, "__init__", wrapper._caovan_original)
        type.__delattr__(base, INIT_WRAPPER_ATTRIBUTE)
        return True
    from vllm.model_executor.custom_op import op_registry_oot

    existing = op_registry_oot.get(family.oot_key)
    if existing is not None and getattr(existing, "_caovan_override", False):
        del op_registry_oot[family.oot_key]
        return True
    return False
