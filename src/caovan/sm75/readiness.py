"""From a row's sm75 findings to what a 2080 Ti owner reads: a verdict, the flags to use, what will be refused.

Plain data in, plain data out (no vLLM, no torch): ``docs/compat.md``'s SM75 column and ``docs/sm75.md`` are made
from result files alone. The verdict:

* ``cannot`` — something the model needs cannot run on a 7.5 device: a kernel of the GDN path fits none of its
  configs, vLLM's compiled extensions carry no sm_75 code, vLLM refuses fp16 or every attention backend there;
* ``unknown`` — a part of the tier is missing or could not answer (named; never read as fine);
* ``limited`` — it runs, but some flag a Turing owner might pass is refused (e.g. fp8 KV cache): "ready with ...";
* ``ready`` — nothing found that stops it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

#: Turbo3's published deployment command line (shared/reference/turbo3-features.md), flag by flag, as checked
#: against each release: (flag, value, what the check reads).
TURBO3_COMMAND_LINE: tuple[tuple[str, str], ...] = (
    ("--dtype", "half"),
    ("--kv-cache-dtype", "fp8"),
    ("--attention-backend", "FLASHINFER"),
    ("--compilation-config", '{"cudagraph_mode":"PIECEWISE"}'),
    ("--quantization", "compressed-tensors (W4A16, Marlin)"),
)
#: The quantization method behind Turbo3's Qwen3.6-27B-AWQ-INT4 checkpoint.
TURBO3_QUANTIZATION = "compressed-tensors"


@dataclass
class Readiness:
    status: str  # cannot / unknown / limited / ready
    headline: str  # the table cell's words after the status
    problems: list[str] = field(default_factory=list)  # why cannot / unknown: one sentence each
    headlines: list[str] = field(default_factory=list)  # each problem in a few words, for the table cell
    refusals: list[str] = field(default_factory=list)  # flags vLLM refuses on 7.5, with its message
    notes: list[str] = field(default_factory=list)
    flags: list[tuple[str, str, str]] = field(default_factory=list)  # (flag, value, why)
    turbo3: list[tuple[str, str, str, str]] = field(default_factory=list)  # (flag, value, ok / refused / ?, why)


def _kernel_problems(kernels: Mapping[str, Any]) -> tuple[list[tuple[str, str]], list[str], list[str]]:
    """(cannot as (headline, sentence), unknown, notes) from the kernels part."""
    cannot, unknown, notes = [], [], []
    for kernel in kernels.get("kernels", []):
        verdict = kernel.get("verdict")
        bad = [c for c in kernel.get("calls", []) if c.get("verdict") == verdict]
        call = bad[0] if bad else {}
        where = f" (at {call['seen_in'][0]})" if call.get("seen_in") else ""
        if verdict == "cannot":
            family = call.get("config_family") or "its configs"
            sentence = f"kernel {kernel['kernel']} ({family}){where}: {call.get('reason')}"
            cannot.append((f"{kernel['kernel']} fits no config", sentence))
        elif verdict in ("unchecked", "unreached"):
            unknown.append(f"kernel {kernel['kernel']} {verdict}{where}: {call.get('reason')}")
        else:
            spills = max((c.get("spill_bytes") or 0 for c in kernel.get("calls", [])), default=0)
            if spills:
                notes.append(f"{kernel['kernel']} runs with up to {spills} B of register spills at its first config")
    for item in kernels.get("caovan", []):
        if item.get("verdict") == "cannot":
            sentence = f"caovan's {item['kernel']} ({item.get('seen_in')}): {item.get('reason')}"
            cannot.append((f"caovan's {item['kernel']} does not fit", sentence))
    refusal = kernels.get("family_refusal")
    if refusal:  # the rig builds served families only: none of this family's kernels was reached
        unknown.append(f"kernels not reached (family not served): the layer rig builds served families only; {refusal}")
    for reason in kernels.get("unreached", []):
        if not (refusal and reason.startswith("every shape:")):
            unknown.append(f"GDN layer not driven at {reason}")
    # A kernel module imported outside the 7.5 view kept the autotune lists of the machine it ran on.
    for name in kernels.get("imported_before_the_device_view", []):
        notes.append(f"{name} was imported before the 7.5 device view: its import-time choices are this runner's")
    for failure in kernels.get("not_importable", []):
        notes.append(f"not importable under a 7.5 device view: {failure}")
    if not kernels.get("kernels") and not refusal:
        unknown.append("no kernel of the GDN path was recorded")
    return cannot, unknown, notes


def _valid_backends(decisions: Mapping[str, Any]) -> list[str]:
    """The attention backends vLLM accepts on 7.5 and that can run there: FlashInfer only where it is usable (vLLM
    0.10 names it valid without the package installed)."""
    flashinfer = decisions.get("flashinfer", {}).get("attention", {})
    return [
        b["name"]
        for b in decisions.get("attention_backends", [])
        if b.get("valid") and not (b["name"] == "FLASHINFER" and flashinfer.get("usable") is False)
    ]


def _kv_refusal(decisions: Mapping[str, Any], dtype: str, valid: Sequence[str]) -> str | None:
    """vLLM's message where no usable backend takes ``dtype`` as KV-cache dtype; None where one does."""
    for entry in decisions.get("kv_cache_dtypes", []):
        if entry.get("dtype") != dtype:
            continue
        if set(entry.get("accepted_by", [])) & set(valid):
            return None
        own_choice = (entry.get("auto") or {}).get("refusal")  # what vLLM says with no backend named
        if own_choice:
            return own_choice
        refused = [r for r in entry.get("refused_by", []) if r.get("backend") in valid] or entry.get("refused_by", [])
        return refused[0].get("message") if refused else "no attention backend usable on 7.5 accepts it"
    return "not asked"


def _vllm_findings(decisions: Mapping[str, Any], result: Readiness) -> None:
    valid = _valid_backends(decisions)
    if decisions.get("attention_backends") and not valid:
        result.problems.append("vLLM finds no attention backend valid on a 7.5 device")
    for entry in decisions.get("model_dtypes", []):
        if entry.get("dtype") == "float16" and entry.get("ok") is False:
            result.problems.append(f"vLLM refuses fp16 on a 7.5 device: {entry.get('message')}")
        if entry.get("dtype") == "bfloat16" and entry.get("ok") is False:
            result.notes.append(f"--dtype bfloat16 is refused: {entry.get('message')}")
    fp8 = {d: _kv_refusal(decisions, d, valid) for d in ("fp8", "fp8_e4m3", "fp8_e5m2")}
    for dtype, message in fp8.items():
        if message and message != "not asked":
            result.refusals.append(f"--kv-cache-dtype {dtype}: {message}")
    flashinfer = decisions.get("flashinfer", {}).get("attention", {})
    if flashinfer.get("usable") is False:
        result.refusals.append(f"FlashInfer attention: {flashinfer.get('reason')}")
    for item in decisions.get("unanswered", []):
        result.notes.append(f"not answered by this vLLM: {item.get('question')} ({item.get('why')})")
    kv = next((d for d, m in fp8.items() if m is None), None)
    result.flags.append(("--dtype", "half", "Turing has no bf16 arithmetic; fp16 is the model dtype it runs"))
    result.flags.append(
        ("--kv-cache-dtype", kv or "auto", "accepted on 7.5" if kv else "fp16 KV: no backend valid on 7.5 takes fp8")
    )
    if valid:
        chosen = (decisions.get("attention", {}).get("auto") or {}).get("backend")
        why = "the backends vLLM accepts on 7.5" + (f"; with none named it picks {chosen}" if chosen else "")
        result.flags.append(("--attention-backend", " or ".join(valid), why))
    prefill = decisions.get("gdn_prefill_backend", {})
    if prefill.get("chosen"):
        result.flags.append(("GDN prefill backend", str(prefill["chosen"]), prefill.get("how") or "vLLM's choice"))


def _turbo3_check(decisions: Mapping[str, Any], graph: Mapping[str, Any] | None) -> list[tuple[str, str, str, str]]:
    valid = _valid_backends(decisions)
    rows = []
    for flag, value in TURBO3_COMMAND_LINE:
        state, why = "?", "not asked of this vLLM"
        if flag == "--dtype":
            entry = next((d for d in decisions.get("model_dtypes", []) if d.get("dtype") == "float16"), None)
            if entry is not None:
                state, why = ("ok", "vLLM accepts fp16 on 7.5") if entry.get("ok") else ("refused", entry["message"])
        elif flag == "--kv-cache-dtype":
            message = _kv_refusal(decisions, value, valid)
            if message != "not asked":
                state, why = ("ok", "a backend valid on 7.5 takes it") if message is None else ("refused", message)
        elif flag == "--attention-backend":
            flashinfer = decisions.get("flashinfer", {}).get("attention")
            if flashinfer:
                state = "ok" if flashinfer.get("usable") else "refused"
                why = flashinfer.get("reason") or ""
        elif flag == "--compilation-config":
            state, why = "ok", "PIECEWISE graphs decode GDN + MTP right on every release"
            if graph is not None and graph.get("with_caovan"):
                why += " (FULL_AND_PIECEWISE is safe too with caovan on)"
        elif flag == "--quantization":
            methods = decisions.get("quantization", [])
            entry = next((q for q in methods if TURBO3_QUANTIZATION in q.get("method", "")), None)
            if entry is not None and entry.get("ok_on_device") is not None:
                state = "ok" if entry["ok_on_device"] else "refused"
                why = entry.get("reason") or f"needs capability {entry.get('min_capability')}"
        rows.append((flag, value, state, why))
    return rows


def assess(findings: Mapping[str, Any] | None) -> Readiness:
    """The verdict and the advice from one result's sm75 findings (None: the tier left none)."""
    if not findings:
        return Readiness("unknown", "not checked", ["the sm75 tier left no findings"])
    result = Readiness("ready", "")
    unknown: list[str] = []
    kernels = findings.get("kernels")
    if kernels is None:
        unknown.append("kernels part missing")
    else:
        cannot, unclear, notes = _kernel_problems(kernels)
        result.headlines += [headline for headline, _ in cannot]
        result.problems += [sentence for _, sentence in cannot]
        unknown += unclear
        result.notes += notes
    binaries = findings.get("binaries")
    if binaries is None:
        unknown.append("binaries part missing")
    elif not binaries.get("summary", {}).get("ready", False):
        missing = ", ".join(binaries.get("summary", {}).get("missing", [])) or "see the binaries part"
        result.problems.append(f"compiled extensions without sm_75 code: {missing}")
    decisions = findings.get("vllm")
    if decisions is None:
        unknown.append("vllm part missing")
    else:
        _vllm_findings(decisions, result)
    graph = findings.get("cudagraph")
    if graph is not None:
        mode = "FULL_AND_PIECEWISE (vLLM's default)" if graph.get("with_caovan") else "PIECEWISE"
        result.flags.append(("cudagraph_mode", mode, f"with caovan on and MTP; {graph.get('reason')}"))
    result.turbo3 = _turbo3_check(decisions or {}, graph)
    if result.problems:
        result.status = "cannot"
        result.headline = result.headlines[0] if result.headlines else result.problems[0].split(":")[0]
    elif unknown:
        result.status, result.headline = "unknown", unknown[0].split(":")[0]
        result.problems += unknown
    elif result.refusals:
        fp8_refused = any(r.startswith("--kv-cache-dtype fp8:") for r in result.refusals)
        result.status, result.headline = "limited", "fp16 KV only" if fp8_refused else "some flags refused"
    else:
        result.status, result.headline = "ready", ""
    return result
