"""Static check of a model folder: could caovan's GDN spec-decode kernels serve this model?

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
import os
import re
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .kernels.gdn_spec_decode import envelope

CONFIG_FILE_NAME = "config.json"
SAFETENSORS_INDEX_FILE_NAME = "model.safetensors.index.json"

#: Turbo3's AutoSpec depth on 2 x 22 GB (0.4.33); 4 is avoided there (OOM risk on 22 GB).
DEFAULT_NUM_SPECULATIVE_TOKENS = 3

VERDICT_CANDIDATE = "candidate"
VERDICT_NOT_CANDIDATE = "not a candidate"
CANDIDATE_CAVEAT = "a candidate, not a guarantee: the start-up and dispatch logs decide"

STATUS_PASS = "pass"
STATUS_WARN = "warn"
STATUS_FAIL = "fail"

JSON_SCHEMA_ID = "caovan.check-model/1"


class ModelCheckError(Exception):
    """The model folder or its config cannot be read or is malformed (exit code 2).

    The message is one line naming the file and the field or position.
    """


# --------------------------------------------------------------------------------------------------
# What the kernels accept: their envelope (caovan.kernels.gdn_spec_decode.envelope), which the kernel
# entry and the vLLM adapter check too.
# --------------------------------------------------------------------------------------------------

#: Tensor-parallel sizes reported per rank (Turbo3 targets TP=2 on 2 x RTX 2080 Ti).
REPORTED_TENSOR_PARALLEL_SIZES = (1, 2)

#: The GDN conv activation when the config has no ``hidden_act`` (the default of vLLM's Qwen3-Next and
#: Qwen3.5 config classes).
DEFAULT_HIDDEN_ACT = "silu"

#: The check an envelope problem is reported under, by the envelope parameter it is about.
_ENVELOPE_CHECKS = {
    "num_k_heads": "head_ratio",
    "num_v_heads": "head_ratio",
    "head_k_dim": "key_head_dim",
    "head_v_dim": "value_head_dim",
    "conv_width": "conv_width",
    "activation": "activation",
}


# --------------------------------------------------------------------------------------------------
# Architectures vLLM builds with its GatedDeltaNetAttention layer (the one caovan takes over).
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class GdnArchitecture:
    name: str
    #: The config field vLLM reads for the MTP depth of this architecture.
    mtp_field: str
    #: MTP layers vLLM's drafter builds when ``mtp_field`` is absent and the weights were not seen
    #: (None: absent means no MTP). Qwen3-Next's released configs leave the field out.
    mtp_layers_when_field_absent: int | None
    #: Whether vLLM's config class derives layer_types from ``full_attention_interval``.
    honours_full_attention_interval: bool
    #: Interval vLLM's config class uses when neither layer_types nor the interval is given.
    default_full_attention_interval: int = 4
    #: The multimodal class vLLM registers instead, for a text-only variant its registry lacks
    #: (``vllm/model_executor/models/registry.py``, 0.20.2 and 0.21.0); None: vLLM registers this one.
    served_by_vllm_as: str | None = None


GDN_ARCHITECTURES: dict[str, GdnArchitecture] = {
    arch.name: arch
    for arch in (
        GdnArchitecture("Qwen3NextForCausalLM", "num_nextn_predict_layers", 1, False),
        GdnArchitecture("Qwen3_5ForConditionalGeneration", "mtp_num_hidden_layers", None, True),
        GdnArchitecture("Qwen3_5MoeForConditionalGeneration", "mtp_num_hidden_layers", None, True),
        # Text-only variants: the same layer code, but not in vLLM 0.20.2's or 0.21.0's registry.
        GdnArchitecture(
            "Qwen3_5ForCausalLM", "mtp_num_hidden_layers", None, True, 4, "Qwen3_5ForConditionalGeneration"
        ),
        GdnArchitecture(
            "Qwen3_5MoeForCausalLM", "mtp_num_hidden_layers", None, True, 4, "Qwen3_5MoeForConditionalGeneration"
        ),
    )
}

#: MTP depth fields tried, in order, for an architecture caovan does not know.
MTP_FIELDS = ("mtp_num_hidden_layers", "num_nextn_predict_layers")

GDN_LAYER_TYPE = "linear_attention"
FULL_ATTENTION_LAYER_TYPE = "full_attention"

#: config field -> name used in facts and messages.
GDN_HEAD_FIELDS = {
    "linear_num_key_heads": "H",
    "linear_num_value_heads": "HV",
    "linear_key_head_dim": "K",
    "linear_value_head_dim": "V",
    "linear_conv_kernel_dim": "conv width",
}


# --------------------------------------------------------------------------------------------------
# Dtypes and quantization on SM75.
# --------------------------------------------------------------------------------------------------

_DTYPE_ALIASES = {
    "float16": "float16",
    "half": "float16",
    "fp16": "float16",
    "bfloat16": "bfloat16",
    "bf16": "bfloat16",
    "float32": "float32",
    "float": "float32",
    "fp32": "float32",
}

#: Quantization method (lower case, as vLLM normalises it) -> (status, SM75 note).
QUANTIZATION_NOTES: dict[str, tuple[str, str]] = {
    "awq": (STATUS_PASS, "AWQ INT4: vLLM runs it through AWQ-Marlin on SM75"),
    "awq_marlin": (STATUS_PASS, "AWQ INT4: vLLM runs it through AWQ-Marlin on SM75"),
    "gptq": (STATUS_PASS, "GPTQ: vLLM runs 4/8-bit GPTQ through GPTQ-Marlin on SM75"),
    "gptq_marlin": (STATUS_PASS, "GPTQ: vLLM runs 4/8-bit GPTQ through GPTQ-Marlin on SM75"),
    "auto-round": (
        STATUS_PASS,
        "AutoRound (vLLM's inc path): GPTQ/AWQ-packed INT4 runs through Marlin on SM75",
    ),
    "inc": (STATUS_PASS, "Intel Neural Compressor / AutoRound: INT4 runs through Marlin on SM75"),
    "fp8": (
        STATUS_WARN,
        "FP8 weights: native FP8 needs SM89 or newer; on SM75 vLLM can at best fall back to "
        "weight-only FP8 (Marlin) or refuse: check vLLM support for your release",
    ),
    "fbgemm_fp8": (STATUS_WARN, "FBGEMM FP8 needs SM80 or newer: check vLLM support"),
    "modelopt": (STATUS_WARN, "ModelOpt FP8 needs SM89 or newer: check vLLM support"),
    "modelopt_fp4": (STATUS_WARN, "NVFP4 needs Blackwell-class hardware: check vLLM support"),
    "mxfp4": (STATUS_WARN, "MXFP4 needs SM80 or newer in vLLM: check vLLM support"),
    "bitsandbytes": (
        STATUS_WARN,
        "bitsandbytes runs on SM75 but slowly in vLLM; not a path caovan measured",
    ),
    "gguf": (STATUS_WARN, "GGUF: not a path caovan measured; check vLLM support for this model"),
}

_QUANT_METHOD_ALIASES = {
    "compressed_tensors": "compressed-tensors",
    "autoround": "auto-round",
    "auto_round": "auto-round",
}


# --------------------------------------------------------------------------------------------------
# Report.
# --------------------------------------------------------------------------------------------------


@dataclass
class Check:
    name: str
    status: str
    message: str

    def to_dict(self) -> dict[str, str]:
        return {"check": self.name, "status": self.status, "message": self.message}


@dataclass
class ModelReport:
    model_dir: str
    checks: list[Check] = field(default_factory=list)
    facts: dict[str, Any] = field(default_factory=dict)
    advice: list[str] = field(default_factory=list)

    @property
    def is_candidate(self) -> bool:
        return not any(check.status == STATUS_FAIL for check in self.checks)

    @property
    def verdict(self) -> str:
        return VERDICT_CANDIDATE if self.is_candidate else VERDICT_NOT_CANDIDATE

    def to_dict(self) -> dict[str, Any]:
        """The stable ``--json`` object."""
        return {
            "schema": JSON_SCHEMA_ID,
            "model_dir": self.model_dir,
            "verdict": self.verdict,
            "candidate": self.is_candidate,
            "caveat": CANDIDATE_CAVEAT,
            "reasons": [check.to_dict() for check in self.checks],
            "facts": self.facts,
            "advice": list(self.advice),
        }

    def _add(self, name: str, status: str, message: str) -> None:
        self.checks.append(Check(name, status, message))

    def _advise(self, text: str) -> None:
        if text not in self.advice:
            self.advice.append(text)


# --------------------------------------------------------------------------------------------------
# Reading files.
# --------------------------------------------------------------------------------------------------


def _read_json_file(path: Path) -> Any:
    try:
        raw = path.read_bytes()
    except IsADirectoryError:
        raise ModelCheckError(f"{path} is a folder, not a JSON file") from None
    except OSError as error:
        raise ModelCheckError(f"cannot read {path}: {error.strerror or error}") from None
    return _parse_json_bytes(raw, str(path))


def _parse_json_bytes(raw: bytes, where: str) -> Any:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as error:
        raise ModelCheckError(f"{where}: not UTF-8 text (bad byte at offset {error.start})") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as error:
        raise ModelCheckError(
            f"{where}: invalid JSON at line {error.lineno}, column {error.colno}: {error.msg}"
        ) from None


def find_model_folder(model: str, revision: str | None = None) -> Path | None:
    """A local folder holding ``model``'s ``config.json``: the path itself (as vLLM will read it: no ``~``
    expansion), or the Hugging Face cache snapshot of ``model`` at ``revision`` (the default branch when None)."""
    path = Path(model)
    if path.is_dir():
        return path
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:
        return None
    try:
        cached = try_to_load_from_cache(repo_id=model, filename=CONFIG_FILE_NAME, revision=revision)
    except Exception:  # a name that is not a valid repo id: nothing cached under it
        return None
    return Path(cached).parent if isinstance(cached, str) else None


def load_config(model_dir: str | Path) -> tuple[Path, dict[str, Any]]:
    """Return (path of config.json, its top-level object); ModelCheckError on any problem."""
    folder = Path(model_dir)
    if not folder.exists():
        raise ModelCheckError(f"model folder not found: {folder}")
    if not folder.is_dir():
        raise ModelCheckError(f"not a folder: {folder} (give the model folder holding config.json)")
    config_path = folder / CONFIG_FILE_NAME
    if config_path.is_symlink() and not config_path.exists():
        # exists() follows the link: a dangling one would otherwise read as a missing file
        raise ModelCheckError(f"{config_path}: a broken link to {os.readlink(config_path)}")
    if not config_path.exists():
        raise ModelCheckError(f"no {CONFIG_FILE_NAME} in {folder}")
    config = _read_json_file(config_path)
    if not isinstance(config, dict):
        raise ModelCheckError(f"{config_path}: top level must be a JSON object, got {_json_type_name(config)}")
    return config_path, config


def _json_type_name(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return type(value).__name__


class _Fields:
    """Typed access to one JSON object of the config; a wrong type is a ModelCheckError that names
    the file and the field path. JSON null counts as absent (transformers treats None as unset)."""

    def __init__(self, mapping: dict[str, Any], prefix: str, config_path: Path):
        self.mapping = mapping
        self.prefix = prefix
        self.config_path = config_path

    def where(self, key: str) -> str:
        return f"{self.prefix}{key}"

    def has(self, key: str) -> bool:
        return self.mapping.get(key) is not None

    def _bad(self, key: str, expected: str) -> ModelCheckError:
        value = self.mapping[key]
        shown = json.dumps(value)
        if len(shown) > 40:
            shown = shown[:37] + "..."
        return ModelCheckError(
            f"{self.config_path}: {self.where(key)} must be {expected}, got {shown} ({_json_type_name(value)})"
        )

    def get_int(self, key: str, *, minimum: int) -> int | None:
        value = self.mapping.get(key)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            expected = "a positive integer" if minimum == 1 else f"an integer >= {minimum}"
            raise self._bad(key, expected)
        return value

    def get_str(self, key: str) -> str | None:
        value = self.mapping.get(key)
        if value is None:
            return None
        if not isinstance(value, str):
            raise self._bad(key, "a string")
        return value

    def get_str_list(self, key: str) -> list[str] | None:
        value = self.mapping.get(key)
        if value is None:
            return None
        if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
            raise self._bad(key, "an array of strings")
        return value

    def get_obj(self, key: str) -> dict[str, Any] | None:
        value = self.mapping.get(key)
        if value is None:
            return None
        if not isinstance(value, dict):
            raise self._bad(key, "a JSON object")
        return value


# --------------------------------------------------------------------------------------------------
# Checkpoint weights: does the checkpoint carry the MTP head?
# --------------------------------------------------------------------------------------------------

#: Safetensors headers are a few MB even for 1000-tensor shards; refuse absurd lengths.
_MAX_SAFETENSORS_HEADER_BYTES = 256 * 1024 * 1024
_MTP_LAYER_RE = re.compile(r"^mtp\.layers\.(\d+)\.")


def _safetensors_tensor_names(path: Path) -> list[str]:
    try:
        with path.open("rb") as handle:
            prefix = handle.read(8)
            if len(prefix) < 8:
                raise ModelCheckError(f"{path}: not a safetensors file (shorter than 8 bytes)")
            (header_length,) = struct.unpack("<Q", prefix)
            if header_length > _MAX_SAFETENSORS_HEADER_BYTES:
                raise ModelCheckError(f"{path}: not a safetensors file (header length {header_length} bytes)")
            raw = handle.read(header_length)
    except OSError as error:
        raise ModelCheckError(f"cannot read {path}: {error.strerror or error}") from None
    if len(raw) < header_length:
        raise ModelCheckError(f"{path}: truncated safetensors header")
    header = _parse_json_bytes(raw, f"{path} (safetensors header)")
    if not isinstance(header, dict):
        raise ModelCheckError(f"{path}: safetensors header must be a JSON object")
    return [name for name in header if name != "__metadata__"]


def inspect_mtp_weights(model_dir: Path) -> dict[str, Any]:
    """Count ``mtp.*`` tensors from the safetensors index (what vLLM's loader follows) or, without
    an index, from the headers of ``*.safetensors`` files. Only headers are read, never tensors."""
    index_path = model_dir / SAFETENSORS_INDEX_FILE_NAME
    if index_path.is_file():
        index = _read_json_file(index_path)
        weight_map = index.get("weight_map") if isinstance(index, dict) else None
        if not isinstance(weight_map, dict):
            raise ModelCheckError(f"{index_path}: weight_map must be a JSON object")
        names: list[str] = list(weight_map)
        source = SAFETENSORS_INDEX_FILE_NAME
    else:
        shards = sorted(model_dir.glob("*.safetensors"))
        if not shards:
            return {"checked": False, "source": None, "mtp_tensors": None, "mtp_layers": None}
        names = [name for shard in shards for name in _safetensors_tensor_names(shard)]
        source = ", ".join(shard.name for shard in shards)
    mtp_names = [name for name in names if name.startswith("mtp.")]
    layers = {int(match.group(1)) for name in mtp_names if (match := _MTP_LAYER_RE.match(name))}
    return {
        "checked": True,
        "source": source,
        "mtp_tensors": len(mtp_names),
        "mtp_layers": len(layers),
    }


# --------------------------------------------------------------------------------------------------
# The check.
# --------------------------------------------------------------------------------------------------


def check_model_dir(model_dir: str | Path) -> ModelReport:
    """Read the folder and return the report; ModelCheckError when it cannot be read."""
    folder = Path(model_dir)
    config_path, config = load_config(folder)
    top = _Fields(config, "", config_path)

    text_config = top.get_obj("text_config")
    text = _Fields(text_config, "text_config.", config_path) if text_config is not None else top

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
        heads = _read_gdn_heads(text, family, report)
        if heads is not None:
            _check_gdn_heads(heads, text.get_str("hidden_act"), report)
    _check_dtypes(top, text, report)
    _check_quantization(top, text, report)
    if not report.is_candidate:
        # A later check can fail after MTP passed: how to serve a model caovan will not accelerate is no advice.
        report.advice = [item for item in report.advice if not item.startswith(SERVE_ADVICE)]
    return report


def _count_gdn_layers(text: _Fields, family: GdnArchitecture | None, report: ModelReport) -> dict[str, Any]:
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


def _check_mtp(folder: Path, text: _Fields, family: GdnArchitecture | None, report: ModelReport) -> None:
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


def _read_gdn_heads(text: _Fields, family: GdnArchitecture | None, report: ModelReport) -> dict[str, int] | None:
    missing = [name for name in GDN_HEAD_FIELDS if not text.has(name)]
    if missing and family is not None:
        # A GDN architecture's config must say its head shapes; vLLM's silent defaults would make
        # this check answer for a different model.
        raise ModelCheckError(
            f"{text.config_path}: {text.where(missing[0])} missing: needed for the GDN layers of {family.name}"
        )
    if missing:
        report.facts["gdn_heads"] = None
        report._add(
            "gdn_heads",
            STATUS_FAIL,
            "linear_attention layers without GatedDeltaNet head fields (missing "
            f"{', '.join(text.where(name) for name in missing)}): not the layout the kernels serve",
        )
        return None
    values = {name: text.get_int(name, minimum=1) for name in GDN_HEAD_FIELDS}
    heads = {
        "num_key_heads": values["linear_num_key_heads"],
        "num_value_heads": values["linear_num_value_heads"],
        "key_head_dim": values["linear_key_head_dim"],
        "value_head_dim": values["linear_value_head_dim"],
        "conv_kernel_width": values["linear_conv_kernel_dim"],
    }
    report.facts["gdn_heads"] = dict(heads)
    return heads  # type: ignore[return-value]


def _check_gdn_heads(heads: dict[str, int], activation: str | None, report: ModelReport) -> None:
    num_k, num_v = heads["num_key_heads"], heads["num_value_heads"]
    k_dim, v_dim, width = heads["key_head_dim"], heads["value_head_dim"], heads["conv_kernel_width"]
    activation = activation if activation is not None else DEFAULT_HIDDEN_ACT
    # FAIL lines are the envelope's problems (the adapter would refuse the layer for the same ones).
    failed: dict[str, list[str]] = {}
    for problem in envelope.envelope_problems(
        num_k_heads=num_k,
        num_v_heads=num_v,
        head_k_dim=k_dim,
        head_v_dim=v_dim,
        conv_width=width,
        activation=activation,
    ):
        failed.setdefault(_ENVELOPE_CHECKS[problem.parameter], []).append(problem)

    def fail(check: str) -> bool:
        if check in failed:
            report._add(check, STATUS_FAIL, "; ".join(failed[check]))
        return check in failed

    report.facts["gdn_heads"]["value_heads_per_key_head"] = num_v // num_k if num_v % num_k == 0 else None
    if not fail("head_ratio"):
        report._add("head_ratio", STATUS_PASS, f"HV/H = {num_v}/{num_k} = {num_v // num_k}")

    if "key_head_dim" in failed:
        fail("key_head_dim")
    elif k_dim != envelope.TUNED_KEY_HEAD_DIM:
        report._add(
            "key_head_dim",
            STATUS_WARN,
            f"K={k_dim}: supported, but launch configs were tuned for K={envelope.TUNED_KEY_HEAD_DIM}",
        )
    else:
        report._add("key_head_dim", STATUS_PASS, f"K={k_dim} (the tuned case)")

    if "value_head_dim" in failed:
        fail("value_head_dim")
    elif v_dim % envelope.SM75_VALUE_BLOCK != 0:
        report._add(
            "value_head_dim",
            STATUS_WARN,
            f"V={v_dim}: supported, but the SM75 tile BV={envelope.SM75_VALUE_BLOCK} leaves a masked tail tile",
        )
    elif v_dim != envelope.TUNED_VALUE_HEAD_DIM:
        report._add(
            "value_head_dim",
            STATUS_WARN,
            f"V={v_dim}: supported, but launch configs were tuned for V={envelope.TUNED_VALUE_HEAD_DIM}",
        )
    else:
        report._add("value_head_dim", STATUS_PASS, f"V={v_dim} (the tuned case)")

    if not fail("conv_width"):
        report._add("conv_width", STATUS_PASS, f"conv width {width}")
    if not fail("activation"):
        report._add("activation", STATUS_PASS, f"conv activation {activation}")

    per_rank = []
    impossible = []
    for tp in REPORTED_TENSOR_PARALLEL_SIZES:
        undivided = [f"{label}={count}" for label, count in (("H", num_k), ("HV", num_v)) if count % tp]
        if undivided:
            per_rank.append({"tp": tp, "divisible": False, "not_divisible": undivided})
            impossible.append(f"TP={tp} ({', '.join(undivided)} not divisible by {tp})")
            continue
        per_rank.append(
            {
                "tp": tp,
                "divisible": True,
                "num_key_heads": num_k // tp,
                "num_value_heads": num_v // tp,
                "conv_dim": (2 * num_k * k_dim + num_v * v_dim) // tp,
            }
        )
    report.facts["tensor_parallel"] = per_rank
    if impossible:
        report._add(
            "tensor_parallel",
            STATUS_WARN,
            f"GDN heads do not split for {'; '.join(impossible)}",
        )
    else:
        sizes = ", ".join(str(tp) for tp in REPORTED_TENSOR_PARALLEL_SIZES)
        report._add("tensor_parallel", STATUS_PASS, f"GDN heads split evenly for TP={sizes}")


def _normalise_dtype(value: str) -> str:
    lowered = value.strip().lower().removeprefix("torch.")
    return _DTYPE_ALIASES.get(lowered, lowered)


def _check_dtypes(top: _Fields, text: _Fields, report: ModelReport) -> None:
    # vLLM reads the root config's dtype first, then the text config's (transformers writes
    # "dtype" from 4.56 on, "torch_dtype" before).
    dtype_where = None
    dtype_value = None
    for fields in (top, text):
        for key in ("dtype", "torch_dtype"):
            value = fields.get_str(key)
            if value is not None and dtype_value is None:
                dtype_value, dtype_where = value, fields.where(key)
    dtype = _normalise_dtype(dtype_value) if dtype_value is not None else None
    report.facts["dtype"] = dtype
    if dtype == "float16":
        report._add("dtype", STATUS_PASS, f"float16 ({dtype_where})")
    elif dtype == "bfloat16":
        report._add("dtype", STATUS_WARN, "bfloat16 weights: SM75 has no bf16: run with --dtype half")
        report._advise("run with --dtype half (SM75 has no bf16)")
    elif dtype == "float32":
        report._add(
            "dtype",
            STATUS_WARN,
            "float32 weights: SM75 runs the kernels in fp16: run with --dtype half",
        )
        report._advise("run with --dtype half (SM75 has no bf16; fp32 doubles the memory)")
    elif dtype is None:
        report._add("dtype", STATUS_WARN, "no dtype in the config: run with --dtype half on SM75")
        report._advise("run with --dtype half (SM75 has no bf16)")
    else:
        report._add("dtype", STATUS_WARN, f"unusual dtype {dtype_value!r} ({dtype_where})")
        report._advise("run with --dtype half (SM75 has no bf16)")

    ssm_value = text.get_str("mamba_ssm_dtype")
    ssm_dtype = _normalise_dtype(ssm_value) if ssm_value is not None else None
    report.facts["mamba_ssm_dtype"] = ssm_dtype
    where = text.where("mamba_ssm_dtype")
    if ssm_dtype is None:
        return
    if ssm_dtype == "bfloat16":
        report._add(
            "ssm_state_dtype",
            STATUS_WARN,
            f"{where}=bfloat16: SM75 has no bf16; pass --mamba-ssm-cache-dtype float32",
        )
        report._advise("pass --mamba-ssm-cache-dtype float32 (the config asks for a bf16 SSM state)")
    elif ssm_dtype in ("float32", "float16"):
        report._add(
            "ssm_state_dtype",
            STATUS_PASS,
            f"SSM state {ssm_dtype} ({where}; vLLM uses it unless --mamba-ssm-cache-dtype is set)",
        )
    elif ssm_dtype != "auto" and (problems := envelope.envelope_problems(ssm_state_dtype=ssm_dtype)):
        # vLLM allocates the SSM state in the config's dtype (Qwen3.5) unless --mamba-ssm-cache-dtype is given:
        # the adapter would then leave every GDN layer to vLLM.
        report._add("ssm_state_dtype", STATUS_FAIL, f"{where}: {problems[0]}")
        report._advise("pass --mamba-ssm-cache-dtype float32 (the config asks for an SSM state the kernels refuse)")
    else:
        report._add("ssm_state_dtype", STATUS_WARN, f"{where}={ssm_value!r}: unusual SSM dtype")


def _describe_compressed_tensors(quant: dict[str, Any]) -> tuple[str, str, str]:
    """(detail, status, note) of a compressed-tensors config, from its weight/activation schemes."""
    schemes = []
    groups = quant.get("config_groups")
    if isinstance(groups, dict):
        for group in groups.values():
            if not isinstance(group, dict):
                continue
            weights = group.get("weights") if isinstance(group.get("weights"), dict) else {}
            activations = group.get("input_activations")
            schemes.append(
                (
                    weights.get("type"),
                    weights.get("num_bits"),
                    weights.get("group_size"),
                    isinstance(activations, dict),
                )
            )
    if not schemes:
        return (
            "no config_groups",
            STATUS_WARN,
            "compressed-tensors scheme unknown: check vLLM support",
        )
    parts = []
    status, notes = STATUS_PASS, []
    for kind, bits, group_size, quantized_activations in schemes:
        label = f"{kind or '?'}{bits or '?'}"
        if quantized_activations:
            label += " weights and activations"
        else:
            label += f" weight-only (W{bits or '?'}A16)"
        if isinstance(group_size, int):
            label += f", group {group_size}"
        parts.append(label)
        if kind == "int" and not quantized_activations:
            notes.append("vLLM runs integer weight-only schemes through Marlin on SM75")
        elif kind == "int":
            notes.append(
                f"int{bits} weights with quantized activations (SM75 has INT8 tensor cores): check vLLM support"
            )
            status = STATUS_WARN
        elif kind == "float" and bits == 8:
            notes.append(
                "FP8: native FP8 needs SM89 or newer; on SM75 vLLM falls back (weight-only "
                "Marlin) or refuses: check vLLM support"
            )
            status = STATUS_WARN
        else:
            notes.append(f"{kind}{bits}: check vLLM support on SM75")
            status = STATUS_WARN
    unique_notes = list(dict.fromkeys(notes))
    return "; ".join(parts), status, "; ".join(unique_notes)


def _check_quantization(top: _Fields, text: _Fields, report: ModelReport) -> None:
    # vLLM: quantization_config (or compressed-tensors' compression_config) of the root config,
    # then of text_config.
    quant = None
    quant_where = None
    for fields in (top, text):
        for key in ("quantization_config", "compression_config"):
            value = fields.get_obj(key)
            if value is not None and quant is None:
                quant, quant_where = value, fields.where(key)
    if quant is None:
        report.facts["quantization"] = None
        return
    method_value = quant.get("quant_method")
    if method_value is not None and not isinstance(method_value, str):
        raise ModelCheckError(
            f"{top.config_path}: {quant_where}.quant_method must be a string, got {_json_type_name(method_value)}"
        )
    method = (method_value or "").strip().lower()
    method = _QUANT_METHOD_ALIASES.get(method, method)
    if method == "compressed-tensors":
        detail, status, note = _describe_compressed_tensors(quant)
    else:
        bits = quant.get("bits", quant.get("w_bit"))
        group_size = quant.get("group_size", quant.get("q_group_size"))
        detail_parts = []
        if isinstance(bits, int) and not isinstance(bits, bool):
            detail_parts.append(f"{bits}-bit")
        if isinstance(group_size, int) and not isinstance(group_size, bool):
            detail_parts.append(f"group {group_size}")
        detail = ", ".join(detail_parts)
        status, note = QUANTIZATION_NOTES.get(
            method, (STATUS_WARN, "not a method caovan knows: check vLLM support on SM75")
        )
    report.facts["quantization"] = {
        "method": method or None,
        "detail": detail,
        "source": quant_where,
    }
    label = method or "no quant_method"
    described = f"{label}, {detail}" if detail else label
    report._add("quantization", status, f"{described}: {note}")
    if status == STATUS_WARN:
        report._advise(f"quantization {label}: {note}")


# --------------------------------------------------------------------------------------------------
# Human output.
# --------------------------------------------------------------------------------------------------


def format_report(report: ModelReport) -> str:
    """Compact human report: the facts, then only the checks that warn or fail, the verdict and
    the advice (``--json`` carries every check)."""
    facts = report.facts
    lines = [f"caovan check-model: {report.model_dir}"]

    def row(label: str, value: str) -> None:
        lines.append(f"  {label:<14}{value}")

    arch = facts.get("architecture") or "(no architectures field)"
    row(
        "architecture",
        f"{arch} (model_type {facts.get('model_type') or 'not given'}; fields from {facts.get('fields_from')})",
    )
    layers = facts.get("layers") or {}
    if layers.get("gdn_layers"):
        row(
            "GDN layers",
            f"{layers['gdn_layers']} of {layers['total_layers']} "
            f"({layers['full_attention_layers']} full attention; from {layers['source']})",
        )
    else:
        row("GDN layers", f"none ({layers.get('source')})")
    mtp = facts.get("mtp")
    if mtp is not None:
        weights = mtp["weights"]
        text = f"depth {mtp['depth']} ({mtp['source'] or 'not declared'})"
        if not weights["checked"]:
            text += "; weights not checked (no safetensors in the folder)"
        elif weights["source"] != mtp["source"]:
            text += f"; {weights['mtp_tensors']} mtp.* tensors in {weights['source']}"
        else:
            text += f": {weights['mtp_tensors']} mtp.* tensors"
        row("MTP", text)
    heads = facts.get("gdn_heads")
    if heads:
        ratio = heads.get("value_heads_per_key_head")
        row(
            "GDN heads",
            f"H={heads['num_key_heads']} HV={heads['num_value_heads']} "
            f"(HV/H={ratio if ratio is not None else 'n/a'}) K={heads['key_head_dim']} "
            f"V={heads['value_head_dim']} conv width {heads['conv_kernel_width']}",
        )
    per_rank = []
    for rank in facts.get("tensor_parallel") or []:
        if rank["divisible"]:
            per_rank.append(
                f"TP={rank['tp']}: H={rank['num_key_heads']} HV={rank['num_value_heads']} conv_dim={rank['conv_dim']}"
            )
        else:
            per_rank.append(f"TP={rank['tp']}: impossible ({', '.join(rank['not_divisible'])})")
    if per_rank:
        row("per TP rank", " | ".join(per_rank))
    dtype_text = f"{facts['dtype']} weights" if facts.get("dtype") else "weights' dtype not given"
    if facts.get("mamba_ssm_dtype"):
        dtype_text += f"; SSM state {facts['mamba_ssm_dtype']} (mamba_ssm_dtype)"
    row("dtype", dtype_text)
    quant = facts.get("quantization")
    if quant:
        detail = f": {quant['detail']}" if quant["detail"] else ""
        row("quantization", f"{quant['method'] or 'no quant_method'}{detail}")
    else:
        row("quantization", "none")

    counts = {
        status: sum(1 for check in report.checks if check.status == status)
        for status in (STATUS_PASS, STATUS_WARN, STATUS_FAIL)
    }
    row("checks", ", ".join(f"{count} {status}" for status, count in counts.items()))
    for check in report.checks:
        if check.status != STATUS_PASS:
            lines.append(f"    {check.status.upper()} {check.name}: {check.message}")
    if report.is_candidate:
        lines.append(f"verdict: {report.verdict} ({CANDIDATE_CAVEAT})")
    else:
        lines.append(f"verdict: {report.verdict}")
    if report.advice:
        lines.append("advice:")
        lines.extend(f"  - {item}" for item in report.advice)
    return "\n".join(lines)
