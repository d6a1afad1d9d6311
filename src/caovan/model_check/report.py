"""The check's result: verdict, reasons, facts and advice, as the ``--json`` object and as the human report."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

VERDICT_CANDIDATE = "candidate"
VERDICT_NOT_CANDIDATE = "not a candidate"
CANDIDATE_CAVEAT = "a candidate, not a guarantee: the start-up and dispatch logs decide"

STATUS_PASS = "pass"
STATUS_WARN = "warn"
STATUS_FAIL = "fail"

JSON_SCHEMA_ID = "caovan.check-model/1"


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
