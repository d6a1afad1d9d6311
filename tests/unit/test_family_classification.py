"""Each vLLM release lands in its own family by probing alone: the facts that tell a family from its neighbours.

The releases are stand-ins built from what each vLLM wheel's source shows (module paths, class names, what the
layer's ``__init__`` assigns, the metadata fields, where the FLA ops live), written out here apart from the
family records, so that a record that claims a neighbour's release, or misses its own, fails here. The
discovery tier checks the same against the real vLLM of each matrix row.
"""

from __future__ import annotations

import dataclasses
import sys
import types

import pytest

from caovan.adapters import registry
from caovan.adapters.families import FAMILIES

OLD_GDN = "vllm.model_executor.layers.mamba.gdn_linear_attn"
QWEN_GDN = "vllm.model_executor.layers.mamba.gdn.qwen_gdn_linear_attn"
QWEN3_NEXT = "vllm.model_executor.models.qwen3_next"
OLD_FLA = "vllm.model_executor.layers.fla.ops"
NEW_FLA = "vllm.third_party.flash_linear_attention.ops"
V1_UTILS = "vllm.v1.attention.backends.utils"
METADATA = (
    "num_prefills num_prefill_tokens num_decodes num_decode_tokens num_spec_decodes num_spec_decode_tokens "
    "num_actual_tokens has_initial_state spec_query_start_loc non_spec_query_start_loc spec_state_indices_tensor "
    "non_spec_state_indices_tensor spec_sequence_masks spec_token_indx non_spec_token_indx num_accepted_tokens"
).split()
#: Before vLLM 0.12: the spec tokens of a mixed batch as a boolean mask.
MASK_METADATA = [f for f in METADATA if f not in ("spec_token_indx", "non_spec_token_indx")] + ["spec_token_masks"]
PREFILL = ["prefill_query_start_loc", "prefill_state_indices", "prefill_has_initial_state"]
INIT = ["conv1d", "A_log", "dt_bias", "norm"]
#: The spec kernels a GDN module has, by release: the fused sigmoid-gating update (0.18 on), or gating first and
#: the recurrent kernel on g/beta (before), with gating's and the conv's parameters as they were.
SIGMOID = "sigmoid"
GATED = "gated"


@dataclasses.dataclass(frozen=True)
class Release:
    version: str
    gdn_module: str
    gdn_class: str
    fla_module: str
    metadata: tuple[str, ...]
    init_assigns: tuple[str, ...] = tuple(INIT)
    methods: tuple[str, ...] = ("_forward_core",)
    #: The GDN module has is_conv_state_dim_first (vLLM 0.20 on).
    dim_first: bool = True
    #: PAD_SLOT_ID everywhere, NULL_BLOCK_ID from vLLM 0.20; in the v1 utils module from 0.11.
    slot_ids: tuple[tuple[str, int], ...] = (("PAD_SLOT_ID", -1), ("NULL_BLOCK_ID", 0))
    slot_module: str = V1_UTILS
    #: The layer is a PluggableLayer (vLLM 0.19 on); before, a plain class whose __init__ caovan wraps.
    pluggable: bool = True
    spec_kernels: str = SIGMOID
    #: fused_gdn_gating's parameters (0.12 on: with b; before: g only).
    gating: tuple[str, ...] = ("A_log", "a", "b", "dt_bias")
    #: The spec conv is varlen (query_start_loc) from vLLM 0.11.
    varlen_conv: bool = True
    core: tuple[str, ...] = ("_forward_core", "mixed_qkv", "b", "a", "core_attn_out")
    #: What MambaStateShapeCalculator.gated_delta_net_state_shape(1, 1, 1, K=2, V=3, 4) gives: (HV, V, K) from 0.16.
    ssm_shape: tuple[int, ...] = (1, 3, 2)
    #: ForwardContext.virtual_engine (kv_cache holds one [conv, ssm] per engine), before vLLM 0.19.
    virtual_engine: bool = False


def _old(version: str, **facts: object) -> Release:
    """A release before vLLM 0.19: Qwen3NextGatedDeltaNet in models/qwen3_next.py, a plain class."""
    base = dict(
        dim_first=False,
        slot_ids=(("PAD_SLOT_ID", -1),),
        pluggable=False,
        spec_kernels=GATED,
        virtual_engine=True,
    )
    return Release(version, QWEN3_NEXT, "Qwen3NextGatedDeltaNet", OLD_FLA, **{**base, **facts})


_WHOLE_LAYER = ("_forward", "hidden_states", "output")
RELEASES = {
    "qwen3-next-gdn-v010": _old(
        "0.10.2",
        metadata=tuple(f for f in MASK_METADATA if f != "num_actual_tokens"),
        methods=(),
        core=_WHOLE_LAYER,
        gating=("A_log", "a", "dt_bias"),
        varlen_conv=False,
        slot_module="vllm.attention.backends.utils",
        ssm_shape=(1, 2, 3),
    ),
    "qwen3-next-gdn-v011": _old(
        "0.11.0",
        metadata=tuple(MASK_METADATA),
        methods=(),
        core=_WHOLE_LAYER,
        gating=("A_log", "a", "dt_bias"),
        ssm_shape=(1, 2, 3),
    ),  # fmt: skip
    "qwen3-next-gdn-v012": _old("0.14.0", metadata=tuple(METADATA), ssm_shape=(1, 2, 3)),
    "qwen3-next-gdn-v016": _old("0.16.0", metadata=tuple(METADATA)),
    "qwen3-next-gdn-v018": _old("0.18.0", metadata=tuple(METADATA), spec_kernels=SIGMOID),
    "gdn-linear-attn-v019": Release(
        "0.19.0",
        OLD_GDN,
        "GatedDeltaNetAttention",
        OLD_FLA,
        tuple(METADATA),
        dim_first=False,
        slot_ids=(("PAD_SLOT_ID", -1),),
    ),
    "gdn-linear-attn-v020": Release("0.21.0", OLD_GDN, "GatedDeltaNetAttention", OLD_FLA, tuple(METADATA)),
    "qwen-gdn-v022": Release("0.22.0", QWEN_GDN, "QwenGatedDeltaNetAttention", OLD_FLA, tuple(METADATA)),
    "qwen-gdn-v023": Release("0.23.0", QWEN_GDN, "QwenGatedDeltaNetAttention", OLD_FLA, (*METADATA, *PREFILL)),
    "qwen-gdn-v027": Release("0.27.0", QWEN_GDN, "QwenGatedDeltaNetAttention", NEW_FLA, (*METADATA, *PREFILL)),
    "qwen-gdn-v029": Release(
        "0.29.0",
        QWEN_GDN,
        "QwenGatedDeltaNetAttention",
        NEW_FLA,
        (*METADATA, *PREFILL),
        (*INIT, "enable_fused_gdn_decode", "gdn_decode_kernel"),
        ("_forward_core", "_forward_core_decode_spec_fused_norm"),
    ),
    "qwen-gdn-v033": Release(
        "0.33.0",
        QWEN_GDN,
        "QwenGatedDeltaNetAttention",
        NEW_FLA,
        (*METADATA, *PREFILL, "checkpoint", "aiter_prefill_metadata"),
        (*INIT, "enable_fused_gdn_spec_decode", "gdn_decode_kernel"),
        ("_forward_core", "_forward_core_decode_spec_fused_norm"),
    ),
}


def _module(name: str, **attrs: object) -> types.ModuleType:
    module = types.ModuleType(name)
    module.__dict__.update(attrs)
    return module


def _function(name: str, parameters: tuple[str, ...]) -> types.FunctionType:
    namespace: dict[str, object] = {}
    exec(f"def {name}({', '.join(parameters)}):\n    return None\n", namespace)
    return namespace[name]


def _layer_class(release: Release, pluggable: type) -> type:
    namespace: dict[str, object] = {}
    body = "\n".join(f"    self.{name} = None" for name in release.init_assigns)
    exec(f"def __init__(self):\n{body}\n", namespace)  # its code's co_names are what the probe reads
    core_name, *core_args = release.core
    core = _function(core_name, ("self", *core_args))
    methods = {name: core for name in (*release.methods, core_name)}
    bases = (pluggable,) if release.pluggable else ()
    return type(release.gdn_class, bases, {"__init__": namespace["__init__"], **methods})


def _spec_kernels(release: Release) -> dict[str, object]:
    conv = ("x", "conv_state", "weight", "conv_state_indices=None", "num_accepted_tokens=None")
    if release.varlen_conv:
        conv += ("query_start_loc=None", "max_query_len=-1")
    kernels = {"causal_conv1d_update": _function("causal_conv1d_update", conv)}
    if release.spec_kernels == SIGMOID:
        parameters = ("A_log", "a", "b", "dt_bias", "q", "k", "v", "ssm_state_indices=None", "num_accepted_tokens=None")
        kernels["fused_sigmoid_gating_delta_rule_update"] = _function(
            "fused_sigmoid_gating_delta_rule_update", parameters
        )
    else:
        recurrent = ("q", "k", "v", "g", "beta=None", "initial_state=None", "ssm_state_indices=None",
                     "num_accepted_tokens=None")  # fmt: skip
        kernels["fused_gdn_gating"] = _function("fused_gdn_gating", release.gating)
        kernels["fused_recurrent_gated_delta_rule"] = _function("fused_recurrent_gated_delta_rule", recurrent)
    return kernels


def install_release(monkeypatch: pytest.MonkeyPatch, release: Release | None) -> None:
    """``release`` as the modules the probes import; every other module a family probes is absent (all of them for
    ``None``: a vLLM with no GDN at all)."""

    class PluggableLayer:
        @classmethod
        def register_oot(cls, _decorated_layer_cls=None, name=None):
            return _decorated_layer_cls

    class BaseModelLoader:
        def load_model(self, vllm_config, model_config, prefix=""):
            return None

    class MambaStateShapeCalculator:
        @staticmethod
        def gated_delta_net_state_shape(tp, num_k_heads, num_v_heads, head_k_dim, head_v_dim, width, num_spec=0):
            return (width - 1 + num_spec, 2 * head_k_dim + head_v_dim), release.ssm_shape

    present: dict[str, types.ModuleType] = {}
    if release is not None:
        metadata = dataclasses.make_dataclass("GDNAttentionMetadata", [(name, object) for name in release.metadata])
        context = dataclasses.make_dataclass(
            "ForwardContext",
            [("attn_metadata", object)] + ([("virtual_engine", int)] if release.virtual_engine else []),
        )
        present = {
            "vllm.model_executor.custom_op": _module("c", PluggableLayer=PluggableLayer, op_registry_oot={}),
            release.gdn_module: _module(
                release.gdn_module,
                **{release.gdn_class: _layer_class(release, PluggableLayer)},
                **_spec_kernels(release),
                get_forward_context=lambda: None,
                **({"is_conv_state_dim_first": lambda: False} if release.dim_first else {}),
            ),
            release.fla_module: _module(release.fla_module),
            "vllm.v1.attention.backends.gdn_attn": _module("m", GDNAttentionMetadata=metadata),
            "vllm.model_executor.model_loader.base_loader": _module("l", BaseModelLoader=BaseModelLoader),
            release.slot_module: _module("u", **dict(release.slot_ids)),
            "vllm.model_executor.layers.mamba.mamba_utils": _module(
                "mu", MambaStateShapeCalculator=MambaStateShapeCalculator
            ),
            "vllm.forward_context": _module("fc", ForwardContext=context),
        }
    probed = {
        m
        for f in FAMILIES
        for m in (f.gdn_module, f.metadata_module, f.fla_ops_module, f.slot_constants_module)
    } | set(present) | {"vllm.model_executor.custom_op", "vllm.model_executor.model_loader.base_loader",
                        "vllm.model_executor.layers.mamba.mamba_utils", "vllm.forward_context"}  # fmt: skip
    for name in probed:
        # None in sys.modules makes an import of that name fail, whatever vLLM this test process has installed.
        monkeypatch.setitem(sys.modules, name, present.get(name))


def passing(monkeypatch: pytest.MonkeyPatch, release: Release) -> list[str]:
    install_release(monkeypatch, release)
    return [cls.family_id for cls in registry.ADAPTERS if cls().probe(release.version).ok]


@pytest.mark.parametrize("family_id", list(RELEASES))
def test_each_release_passes_the_probes_of_its_own_family_only(monkeypatch, family_id):
    assert passing(monkeypatch, RELEASES[family_id]) == [family_id]


@pytest.mark.parametrize("family_id", list(RELEASES))
def test_a_release_outside_every_version_hint_lands_by_probing(monkeypatch, family_id):
    release = dataclasses.replace(RELEASES[family_id], version="0.1.0")
    install_release(monkeypatch, release)
    monkeypatch.setattr(registry, "installed_vllm_version", lambda: "0.1.0")
    selection = registry.select_adapter()
    if selection.refused is not None:  # recognised by probing, then refused with the family's reason
        assert selection.refused.family_id == family_id, selection.reason
        return
    assert selection.family_id == family_id, selection.reason
    assert selection.reason.endswith("(outside its version hint; chosen by probing)")


def test_a_served_release_is_selected_and_a_refused_one_says_why(monkeypatch):
    for family_id in RELEASES:
        release = RELEASES[family_id]
        install_release(monkeypatch, release)
        monkeypatch.setattr(registry, "installed_vllm_version", lambda release=release: release.version)
        selection = registry.select_adapter()
        record = next(f for f in FAMILIES if f.family_id == family_id)
        if record.refusal is None:
            assert selection.family_id == family_id and selection.refused is None, selection.reason
        else:
            # Recognised but not served: no adapter (the plugin stays inert), the family and the refusal named.
            assert selection.adapter is None and selection.refused is record, selection.reason
            assert f"{record.label} {family_id}; caovan does not serve it: " in selection.reason
            assert record.refusal in selection.reason


def test_a_release_with_no_gdn_at_all_is_refused_cleanly(monkeypatch):
    install_release(monkeypatch, None)
    monkeypatch.setattr(registry, "installed_vllm_version", lambda: "0.9.0")
    selection = registry.select_adapter()
    assert selection.adapter is None and selection.refused is None
    assert selection.reason.startswith("no GDN family matches vLLM 0.9.0: closest family "), selection.reason
    assert "import failed" in selection.reason, selection.reason
    with pytest.raises(RuntimeError, match="caovan cannot serve this vLLM: no GDN family matches"):
        registry.installed_family()


def test_every_family_record_has_a_release_here():
    assert sorted(RELEASES) == sorted(f.family_id for f in FAMILIES)


@pytest.mark.parametrize(
    ("family_id", "change", "moved"),
    [
        # 0.29 without its fused path's switch: the override could not keep spec batches on the core.
        ("qwen-gdn-v029", {"init_assigns": tuple(INIT)}, "enable_fused_gdn_decode set in __init__"),
        # the layer class renamed: an override registered under the old name would never be built.
        ("qwen-gdn-v022", {"gdn_class": "QwenGDNAttention"}, "QwenGatedDeltaNetAttention class"),
        # 0.20's null block without its dim-first switch: neither 0.19's slot rule nor 0.20's conv layout holds.
        ("gdn-linear-attn-v020", {"dim_first": False}, "is_conv_state_dim_first"),
        # 0.19 with a null block 0: its kernels would skip block 0, which 0.19 hands out as a real block.
        (
            "gdn-linear-attn-v019",
            {"slot_ids": (("PAD_SLOT_ID", -1), ("NULL_BLOCK_ID", 0))},
            "NULL_BLOCK_ID = 0: a newer family's null slot",
        ),
        # 0.18 with 0.14's SSM layout: caovan's kernel would read every state transposed.
        ("qwen3-next-gdn-v018", {"ssm_shape": (1, 2, 3)}, "SSM state laid out (HV, V, K)"),
        # 0.16 with kv_cache bound as [conv, ssm]: reading kv_cache[virtual_engine] would hand over the conv state.
        ("qwen3-next-gdn-v016", {"virtual_engine": False}, "kv_cache indexed by virtual engine"),
        # a spec-decode metadata field renamed: the dispatch reads it on every spec batch.
        (
            "qwen-gdn-v023",
            {"metadata": tuple(f for f in (*METADATA, *PREFILL) if f != "spec_token_indx")},
            "fields missing: spec_token_indx",
        ),
    ],
)
def test_a_release_that_moved_one_fact_is_refused_naming_it(monkeypatch, family_id, change, moved):
    release = dataclasses.replace(RELEASES[family_id], **change)
    install_release(monkeypatch, release)
    monkeypatch.setattr(registry, "installed_vllm_version", lambda: release.version)
    selection = registry.select_adapter()
    assert selection.adapter is None, selection.reason
    assert f"closest family {family_id} " in selection.reason and moved in selection.reason, selection.reason
