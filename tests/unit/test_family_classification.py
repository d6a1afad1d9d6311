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
OLD_FLA = "vllm.model_executor.layers.fla.ops"
NEW_FLA = "vllm.third_party.flash_linear_attention.ops"
METADATA = (
    "num_prefills num_prefill_tokens num_decodes num_decode_tokens num_spec_decodes num_spec_decode_tokens "
    "num_actual_tokens has_initial_state spec_query_start_loc non_spec_query_start_loc spec_state_indices_tensor "
    "non_spec_state_indices_tensor spec_sequence_masks spec_token_indx non_spec_token_indx num_accepted_tokens"
).split()
PREFILL = ["prefill_query_start_loc", "prefill_state_indices", "prefill_has_initial_state"]
INIT = ["conv1d", "A_log", "dt_bias", "norm"]


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
    #: vllm.v1.attention.backends.utils: PAD_SLOT_ID everywhere, NULL_BLOCK_ID from vLLM 0.20.
    slot_ids: tuple[tuple[str, int], ...] = (("PAD_SLOT_ID", -1), ("NULL_BLOCK_ID", 0))


RELEASES = {
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


def _layer_class(release: Release, pluggable: type) -> type:
    namespace: dict[str, object] = {}
    body = "\n".join(f"    self.{name} = None" for name in release.init_assigns)
    exec(f"def __init__(self):\n{body}\n", namespace)  # its code's co_names are what the probe reads

    def _forward_core(self, mixed_qkv, b, a, core_attn_out):
        return None

    methods = {name: _forward_core for name in release.methods}
    return type(release.gdn_class, (pluggable,), {"__init__": namespace["__init__"], **methods})


def install_release(monkeypatch: pytest.MonkeyPatch, release: Release) -> None:
    """``release`` as the modules the probes import; every other module a family probes is absent."""

    class PluggableLayer:
        @classmethod
        def register_oot(cls, _decorated_layer_cls=None, name=None):
            return _decorated_layer_cls

    def causal_conv1d_update(x, conv_state, weight, conv_state_indices=None, num_accepted_tokens=None,
                             query_start_loc=None, max_query_len=-1):  # fmt: skip
        return None

    def fused_sigmoid_gating_delta_rule_update(A_log, a, b, dt_bias, q, k, v, ssm_state_indices=None,
                                               num_accepted_tokens=None):  # fmt: skip
        return None

    class BaseModelLoader:
        def load_model(self, vllm_config, model_config, prefix=""):
            return None

    metadata = dataclasses.make_dataclass("GDNAttentionMetadata", [(name, object) for name in release.metadata])
    present = {
        "vllm.model_executor.custom_op": _module("c", PluggableLayer=PluggableLayer, op_registry_oot={}),
        release.gdn_module: _module(
            release.gdn_module,
            **{release.gdn_class: _layer_class(release, PluggableLayer)},
            causal_conv1d_update=causal_conv1d_update,
            fused_sigmoid_gating_delta_rule_update=fused_sigmoid_gating_delta_rule_update,
            get_forward_context=lambda: None,
            **({"is_conv_state_dim_first": lambda: False} if release.dim_first else {}),
        ),
        release.fla_module: _module(release.fla_module),
        "vllm.v1.attention.backends.gdn_attn": _module("m", GDNAttentionMetadata=metadata),
        "vllm.model_executor.model_loader.base_loader": _module("l", BaseModelLoader=BaseModelLoader),
        "vllm.v1.attention.backends.utils": _module("u", **dict(release.slot_ids)),
    }
    probed = {m for f in FAMILIES for m in (f.gdn_module, f.metadata_module, f.fla_ops_module)} | set(present)
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
    assert selection.family_id == family_id, selection.reason
    assert selection.reason.endswith("(outside its version hint; chosen by probing)")


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
