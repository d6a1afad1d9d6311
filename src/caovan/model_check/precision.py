"""Weight dtype, SSM-state dtype and quantization method, judged for SM75 (no bf16, no native FP8)."""

from __future__ import annotations

from typing import Any

from caovan.kernels.gdn_spec_decode import envelope

from .config import Fields, ModelCheckError, json_type_name
from .report import STATUS_FAIL, STATUS_PASS, STATUS_WARN, ModelReport

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


def _normalise_dtype(value: str) -> str:
    lowered = value.strip().lower().removeprefix("torch.")
    return _DTYPE_ALIASES.get(lowered, lowered)


def check_dtypes(top: Fields, text: Fields, report: ModelReport) -> None:
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


def check_quantization(top: Fields, text: Fields, report: ModelReport) -> None:
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
            f"{top.config_path}: {quant_where}.quant_method must be a string, got {json_type_name(method_value)}"
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
