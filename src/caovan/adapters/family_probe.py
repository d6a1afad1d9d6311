"""The hook points of a :class:`~caovan.adapters.family.GdnFamily`, probed in the installed vLLM.

Written once for every family: each check reads the record, so a family that differs from its neighbour only in
data is told apart by the same code. A fact the record says must be absent (a newer metadata field, a fused decode
method) is a hook point too: it is what keeps an older family from claiming a newer release.
"""

from __future__ import annotations

from .base import Prober, lookup
from .family import GdnFamily


def probe_family(p: Prober, family: GdnFamily) -> None:
    gdn = p.module(family.gdn_module)
    layer_cls = p.attribute(gdn, family.gdn_class, f"{family.gdn_class} class")
    short = family.gdn_module.rsplit(".", 1)[-1]
    if family.install_route == "register_oot":
        _probe_pluggable(p, family, layer_cls)
    else:
        _probe_class_patch(p, family, layer_cls)
    p.arguments(
        lookup(layer_cls, family.core_method),
        family.core_arguments,
        f"{family.gdn_class}.{family.core_method}({', '.join(family.core_arguments)})",
        leading=True,  # caovan's core hands them back to the in-tree one by position
    )
    init = lookup(layer_cls, "__init__")
    # Once caovan wrapped it (class-patch route), the class's own __init__ is the one behind the wrapper.
    init_code = lookup(lookup(init, "_caovan_original") or init, "__code__")
    assigned = init_code.co_names if init_code is not None else ()
    for attr in family.layer_attributes:
        # nn.Module attributes exist on instances only; their assignment shows in __init__'s code.
        p.record(f"{family.gdn_class}.{attr} set in __init__", attr in assigned, _said(attr in assigned, "assigned"))
    for attr in family.fused_path_switches:
        p.record(
            f"{family.gdn_class}.{attr} set in __init__ (fused decode path switch)",
            attr in assigned,
            _said(attr in assigned, "assigned"),
        )
    for method in family.methods_absent:
        present = layer_cls is not None and lookup(layer_cls, method) is not None
        p.record(
            f"{family.gdn_class}.{method} absent",
            layer_cls is not None and not present,
            "absent" if not present else "present: a path this family's override would not see",
        )
    for name, keywords in family.spec_path:
        p.arguments(lookup(gdn, name), keywords, f"{short}.{name}(spec args)")
    # The FLA ops package moved without a shim in vLLM 0.27: where it is tells those families apart, and the
    # bench baseline and the test rig import vLLM's kernels from it.
    p.module(family.fla_ops_module)
    if family.conv_dim_first_function is not None:
        p.attribute(gdn, family.conv_dim_first_function, f"{short}.{family.conv_dim_first_function}")
    p.attribute(gdn, "get_forward_context", f"{short}.get_forward_context")
    _probe_state_layout(p, family)

    meta_mod = p.module(family.metadata_module)
    meta_cls = p.attribute(meta_mod, family.metadata_class, f"{family.metadata_class} class")
    p.fields(meta_cls, family.metadata_fields, f"{family.metadata_class} spec-decode fields")
    if family.metadata_fields_absent:
        declared = set(getattr(meta_cls, "__dataclass_fields__", {})) if meta_cls is not None else set()
        newer = [name for name in family.metadata_fields_absent if name in declared]
        p.record(
            f"{family.metadata_class} without {', '.join(family.metadata_fields_absent)}",
            meta_cls is not None and not newer,
            "absent" if not newer else f"has {', '.join(newer)}: a newer family's metadata",
        )
    loader = p.module("vllm.model_executor.model_loader.base_loader")
    p.arguments(
        lookup(p.attribute(loader, "BaseModelLoader", "BaseModelLoader class"), "load_model"),
        ("vllm_config", "model_config"),
        "BaseModelLoader.load_model(vllm_config, model_config) (require-mode check)",
        leading=True,  # the check's wrapper binds them by position
    )
    utils = p.module(family.slot_constants_module)
    if family.null_slot_max == 0:
        p.equals(lookup(utils, "NULL_BLOCK_ID"), 0, "NULL_BLOCK_ID (null/pad state slot)")
    else:
        # Before vLLM 0.20 the pad slot is PAD_SLOT_ID (-1) and block 0 is real; NULL_BLOCK_ID came with 0.20.
        p.equals(lookup(utils, "PAD_SLOT_ID"), family.null_slot_max, "PAD_SLOT_ID (null/pad state slot)")
        null_block = lookup(utils, "NULL_BLOCK_ID")
        p.record(
            "no NULL_BLOCK_ID (block 0 is a real block)",
            utils is not None and null_block is None,
            "absent" if null_block is None else f"NULL_BLOCK_ID = {null_block!r}: a newer family's null slot",
        )


def _probe_state_layout(p: Prober, family: GdnFamily) -> None:
    """The SSM layout, asked of vLLM's own shape calculator with K != V (it changed at 0.16 with nothing else to
    show for it), and where the layer's ``kv_cache`` keeps ``[conv, ssm]``."""
    mamba_utils = p.module("vllm.model_executor.layers.mamba.mamba_utils")
    calculator = p.attribute(mamba_utils, "MambaStateShapeCalculator", "MambaStateShapeCalculator class")
    shape_fn = lookup(calculator, "gated_delta_net_state_shape")
    expected = (1, 3, 2) if family.ssm_layout == "vk" else (1, 2, 3)  # HV=1, K=2, V=3
    try:
        ssm_shape = tuple(shape_fn(1, 1, 1, 2, 3, 4)[1]) if shape_fn is not None else None
    except Exception as exc:  # a changed signature is a moved hook point, reported as such
        ssm_shape = f"raised {type(exc).__name__}: {exc}"
    p.record(
        f"SSM state laid out {'(HV, V, K)' if family.ssm_layout == 'vk' else '(HV, K, V)'}",
        ssm_shape == expected,
        f"gated_delta_net_state_shape(HV=1, K=2, V=3) gives {ssm_shape}",
    )
    forward_context = p.module("vllm.forward_context")
    context_cls = p.attribute(forward_context, "ForwardContext", "ForwardContext class")
    fields = set(getattr(context_cls, "__dataclass_fields__", {}))
    per_engine = "virtual_engine" in fields
    p.record(
        "kv_cache " + ("indexed by virtual engine" if family.kv_cache_per_virtual_engine else "is [conv, ssm]"),
        context_cls is not None and per_engine == family.kv_cache_per_virtual_engine,
        f"ForwardContext {'has' if per_engine else 'has no'} virtual_engine",
    )


def _probe_class_patch(p: Prober, family: GdnFamily, layer_cls: object) -> None:
    # caovan wraps __init__ where the class defines it; subclasses (vLLM 0.18's Qwen3.5 layer) inherit the wrapper.
    own_init = isinstance(layer_cls, type) and "__init__" in vars(layer_cls)
    p.record(
        f"{family.gdn_class}.__init__ defined on the class (caovan wraps it)",
        own_init,
        "defined there" if own_init else "inherited or missing: nothing of the class's own to wrap",
    )


def _probe_pluggable(p: Prober, family: GdnFamily, layer_cls: object) -> None:
    if layer_cls is not None:
        # PluggableLayer.__new__ looks the override up by the instantiated class's __name__: under a
        # compatibility alias of a renamed class, an override registered under the record's name is never used.
        name = lookup(layer_cls, "__name__")
        p.record(
            f"{family.gdn_class} is named {family.oot_key} (the override's registry key)",
            name == family.oot_key,
            "named so" if name == family.oot_key else f"it is {name!r}: an alias, vLLM would never use the override",
        )
    custom_op = p.module("vllm.model_executor.custom_op")
    pluggable = p.attribute(custom_op, "PluggableLayer", "PluggableLayer class")
    p.subclass(layer_cls, pluggable, f"{family.gdn_class} is a PluggableLayer")
    p.arguments(
        lookup(pluggable, "register_oot"),
        ("_decorated_layer_cls", "name"),
        "PluggableLayer.register_oot(_decorated_layer_cls, name)",
    )
    registry = p.attribute(custom_op, "op_registry_oot", "custom_op.op_registry_oot")
    if registry is not None:
        p.record("op_registry_oot is a dict", isinstance(registry, dict), type(registry).__name__)


def _said(ok: bool, what: str) -> str:
    return what if ok else f"not {what}"
