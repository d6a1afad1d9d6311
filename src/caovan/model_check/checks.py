"""The check itself: could caovan's GDN spec-decode kernels serve the model in this folder?

Reads ``DIR/config.json`` (and, when present, the safetensors index or headers, to see whether the
checkpoint really ships its MTP head) and answers with a verdict, the reasons behind it, the facts
it read and advice for serving on SM75. It is a *candidate* check, not a guarantee: vLLM's start-up
and dispatch logs decide.

No vLLM or torch import here: the check must run in a second on a machine without a GPU, before the
user downloads tens of gigabytes of weights or starts an engine.

Where the facts come from (vLLM 0.21.0, read from its source):
- Qwen3.5/3.6 (``Qwen3_5ForConditionalGeneration``, ``Qwen3_5MoeForConditionalGeneration``) keep
  the language-model fields in ``text_config``; vLLM's ``Qwen3_5TextConfig`` takes ``layer_types``
  or, when absent, ``full_attention_interval`` (default 4); the MTP depth is
  ``mtp_num_hidden_layers``.
- Qwen3-Next (``Qwen3NextForCausalLM``) keeps them at the top level; vLLM's ``Qwen3NextConfig``
  takes ``layer_types`` or else *always* every 4th layer full attention (it ignores
  ``full_attention_interval``); the MTP depth is ``num_nextn_predict_layers``, which the released
  configs leave out (vLLM's ``Qwen3NextMTP`` then builds one MTP layer from the ``mtp.*`` tensors).
- vLLM loads quantized checkpoints without its strict "every weight initialised" check, so a
  quantized checkpoint whose ``mtp.*`` tensors were dropped gets a randomly initialised drafter:
  acceptance near zero.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from .architectures import (
    FULL_ATTENTION_LAYER_TYPE,
    GDN_ARCHITECTURES,
    GDN_LAYER_TYPE,
    MTP_FIELDS,
    GdnArchitecture,
)
from .config import Fields, ModelCheckError, load_config
from .envelope_checks import check_gdn_heads, read_gdn_heads
from .precision import check_dtypes, check_quantization
from .report import STATUS_FAIL, STATUS_PASS, STATUS_WARN, ModelReport
from .safetensors_headers import inspect_mtp_weights

#: Turbo3's AutoSpec depth on 2 x 22 GB (0.4.33); 4 is avoided there (OOM risk on 22 GB).
DEFAULT_NUM_SPECULATIVE_TOKENS = 3


def check_model_dir(model_dir: str | Path) -> ModelReport:
    """Read the folder and return the report; ModelCheckError when it cannot be read."""
    folder = Path(model_dir)
    config_path, config = load_config(folder)
    top = Fields(config, "", config_path)

    text_config = top.get_obj("text_config")
    text = Fields(text_config, "text_config.", config_path) if text_config is not None else top

    architectures = top.get_str_list("architectures") or []
    architecture = architectures[0] if architectures else None
    family = GDN_ARCHITECTURES.get(architecture) if architecture else None

    report = ModelReport(model_dir=str(folder))
    # Every key is always present (null when not applicable) so --json consumers can rely on it.
    report.facts.update(
        config_file=str(config_path),
        architecture=architecture,
        model_type=top.get_str("model_type") or text.get_str("model_type"),
        fields_from="text_config" if text_config is not None else "top level",
        layers=None,
        mtp=None,
        gdn_heads=None,
        tensor_parallel=[],
        dtype=None,
        mamba_ssm_dtype=None,
        quantization=None,
    )

    gdn_layers = _count_gdn_layers(text, family, report)
    if gdn_layers["gdn_layers"] == 0:
        report._add(
            "gdn_layers",
            STATUS_FAIL,
            "no GatedDeltaNet (linear_attention) layers: the plugin has nothing to act on",
        )
    else:
        report._add(
            "gdn_layers",
            STATUS_PASS,
            f"{gdn_layers['gdn_layers']} of {gdn_layers['total_layers']} layers are GatedDeltaNet "
            f"(from {gdn_layers['source']})",
        )
        _check_architecture(architecture, family, report)
        _check_mtp(folder, text, family, report)
        heads = read_gdn_heads(text, family, report)
        if heads is not None:
            check_gdn_heads(heads, text.get_str("hidden_act"), report)
    check_dtypes(top, text, report)
    check_quantization(top, text, report)
    if not report.is_candidate:
        # A later check can fail after MTP passed: how to serve a model caovan will not accelerate is no advice.
        report.advice = [item for item in report.advice if not item.startswith(SERVE_ADVICE)]
    return report


def _count_gdn_layers(text: Fields, family: GdnArchitecture | None, report: ModelReport) -> dict[str, Any]:
    num_layers = text.get_int("num_hidden_layers", minimum=1)
    layer_types = text.get_str_list("layer_types")
    interval = text.get_int("full_attention_interval", minimum=1)

    if layer_types is not None:
        if num_layers is not None and len(layer_types) != num_layers:
            raise ModelCheckError(
                f"{text.config_path}: {text.where('layer_types')} has {len(layer_types)} entries "
                f"but {text.where('num_hidden_layers')} is {num_layers}"
            )
        types = layer_types
        source = text.where("layer_types")
    elif family is not None or interval is not None:
        # Mirror vLLM's config classes: Qwen3.5 derives layer_types from full_attention_interval
        # (default 4); Qwen3-Next ignores the field and always uses 4.
        used_interval = interval
        if family is not None and (interval is None or not family.honours_full_attention_interval):
            used_interval = family.default_full_attention_interval
            if interval is not None and interval != used_interval:
                report._add(
                    "layer_pattern",
                    STATUS_WARN,
                    f"{text.where('full_attention_interval')}={interval} is ignored by vLLM's "
                    f"config class for {family.name}: it uses every {used_interval}th layer",
                )
        if num_layers is None:
            raise ModelCheckError(
                f"{text.config_path}: {text.where('num_hidden_layers')} missing: needed to count "
                "the GDN layers (no layer_types given)"
            )
        assert used_interval is not None
        types = [
            FULL_ATTENTION_LAYER_TYPE if (i + 1) % used_interval == 0 else GDN_LAYER_TYPE for i in range(num_layers)
        ]
        if interval is not None and used_interval == interval:
            source = f"{text.where('full_attention_interval')}={interval}"
        else:
            source = f"vLLM's default: every {used_interval}th layer full attention"
    else:
        types = []
        source = "no layer_types or full_attention_interval"

    counts = {
        "total_layers": len(types) if types else num_layers,
        "gdn_layers": sum(1 for kind in types if kind == GDN_LAYER_TYPE),
        "full_attention_layers": sum(1 for kind in types if kind == FULL_ATTENTION_LAYER_TYPE),
        "source": source,
        "other_layer_types": sorted(set(types) - {GDN_LAYER_TYPE, FULL_ATTENTION_LAYER_TYPE}),
    }
    report.facts["layers"] = counts
    return counts


def _check_architecture(architecture: str | None, family: GdnArchitecture | None, report: ModelReport) -> None:
    if family is not None and family.served_by_vllm_as is not None:
        report._add(
            "architecture",
            STATUS_WARN,
            f"{architecture}: a text-only variant that vLLM 0.20.2 and 0.21.0 do not register (they serve "
            f"{family.served_by_vllm_as} checkpoints); caovan acts only if your vLLM builds it with "
            "GatedDeltaNetAttention",
        )
        return
    if family is not None:
        report._add(
            "architecture",
            STATUS_PASS,
            f"{architecture}: vLLM builds its linear-attention layers with GatedDeltaNetAttention",
        )
        return
    known = ", ".join(GDN_ARCHITECTURES)
    report._add(
        "architecture",
        STATUS_WARN,
        f"{architecture or 'no architectures field'}: not an architecture caovan knows ({known}); "
        "the plugin acts only if your vLLM builds these layers with GatedDeltaNetAttention",
    )


#: How the advice to serve with MTP speculative decoding starts (dropped when the model is not a candidate).
SERVE_ADVICE = "serve with "


def mtp_speculative_config(num_tokens: int) -> str:
    """vLLM's ``--speculative-config`` value for MTP with ``num_tokens`` draft tokens, as JSON."""
    return json.dumps({"method": "mtp", "num_speculative_tokens": num_tokens}, separators=(",", ":"))


def _speculative_config_flag(num_tokens: int) -> str:
    return f"--speculative-config '{mtp_speculative_config(num_tokens)}'"


def _check_mtp(folder: Path, text: Fields, family: GdnArchitecture | None, report: ModelReport) -> None:
    fields = (family.mtp_field,) if family is not None else MTP_FIELDS
    declared_field = next((name for name in fields if text.has(name)), None)
    declared = text.get_int(declared_field, minimum=0) if declared_field else None
    weights = inspect_mtp_weights(folder)
    facts: dict[str, Any] = {"depth": None, "source": None, "weights": weights}
    report.facts["mtp"] = facts
    no_mtp_advice = (
        "no MTP head: use a checkpoint that ships its mtp.* tensors and declares them, then serve "
        f"with {_speculative_config_flag(DEFAULT_NUM_SPECULATIVE_TOKENS)}"
    )
    weights_where = weights["source"]

    if declared_field is not None and declared == 0:
        facts.update(depth=0, source=text.where(declared_field))
        report._add(
            "mtp",
            STATUS_FAIL,
            f"{text.where(declared_field)}=0: no MTP layers, so there is no speculative-decode "
            "step for the plugin to accelerate",
        )
        report._advise(no_mtp_advice)
        return

    if declared is not None:
        facts.update(depth=declared, source=text.where(declared_field))
        if weights["checked"] and weights["mtp_tensors"] == 0:
            report._add(
                "mtp",
                STATUS_FAIL,
                f"{text.where(declared_field)}={declared} but {weights_where} has no mtp.* "
                "tensors: the checkpoint dropped its MTP head (vLLM would load quantized "
                "checkpoints with a randomly initialised drafter)",
            )
            report._advise(no_mtp_advice)
            return
        message = f"MTP depth {declared} ({text.where(declared_field)})"
        if weights["checked"]:
            message += f"; {weights['mtp_tensors']} mtp.* tensors in {weights_where}"
            if weights["mtp_layers"] != declared:
                report._add(
                    "mtp_weights",
                    STATUS_WARN,
                    f"config declares {declared} MTP layer(s) but {weights_where} holds "
                    f"mtp.layers.* for {weights['mtp_layers']}",
                )
        report._add("mtp", STATUS_PASS, message)
    elif weights["checked"] and weights["mtp_tensors"]:
        depth = max(weights["mtp_layers"], 1)
        facts.update(depth=depth, source=weights_where)
        report._add(
            "mtp",
            STATUS_PASS,
            f"no MTP depth field ({' / '.join(fields)}); {weights_where} holds "
            f"{weights['mtp_tensors']} mtp.* tensors ({weights['mtp_layers']} layer(s)), which "
            "vLLM's drafter loads",
        )
    elif weights["checked"]:
        facts.update(depth=0, source=weights_where)
        report._add(
            "mtp",
            STATUS_FAIL,
            f"no MTP depth field ({' / '.join(fields)}) and no mtp.* tensors in {weights_where}: "
            "no speculative-decode step for the plugin to accelerate",
        )
        report._advise(no_mtp_advice)
        return
    elif family is not None and family.mtp_layers_when_field_absent:
        depth = family.mtp_layers_when_field_absent
        facts.update(depth=depth, source=f"vLLM's default for {family.name}")
        report._add(
            "mtp",
            STATUS_WARN,
            f"no {family.mtp_field} in the config: vLLM builds {depth} MTP layer from the "
            "checkpoint's mtp.* tensors (weights not checked: no safetensors in the folder)",
        )
    else:
        facts.update(depth=0, source=None)
        report._add(
            "mtp",
            STATUS_FAIL,
            f"no MTP depth field ({' / '.join(fields)}): no speculative-decode step for the plugin to accelerate",
        )
        report._advise(no_mtp_advice)
        return

    report._advise(
        f"{SERVE_ADVICE}{_speculative_config_flag(DEFAULT_NUM_SPECULATIVE_TOKENS)} "
        f"({DEFAULT_NUM_SPECULATIVE_TOKENS} on 2 x 22 GB; 2 if memory is tight; 4 risks OOM on "
        "22 GB)"
    )
