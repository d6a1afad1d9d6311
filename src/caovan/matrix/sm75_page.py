"""The SM75 column of docs/compat.md and the page docs/sm75.md, both from the sm75 tier's findings in result files.

Nothing here is typed by hand: each release's section of docs/sm75.md is :func:`caovan.sm75.readiness.assess` of the
findings its result file recorded, and vLLM's refusals are quoted from there. ``nox -s compat`` writes both docs;
``python -m caovan.matrix.compat --check`` (``nox -s lint``) fails when either drifts.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from packaging.version import Version
from tabulate import tabulate

from ..sm75.readiness import Readiness, assess

MARK_START = "<!-- START sm75-releases -->"
MARK_END = "<!-- END sm75-releases -->"
HEADER = "SM75 (2080 Ti)"
CELLS = {"ready": "✅ ready", "limited": "🟡 ready", "cannot": "❌ cannot", "unknown": "❔ unknown"}
NOT_CHECKED = "➖ not checked"
LEGEND = (
    f"**{HEADER}** is what the row's `sm75` tier found out, without a 2080 Ti, about running that vLLM on a 7.5 "
    "device (its kernels compiled for sm_75 with the row's Triton, vLLM's own checks asked about a 7.5 device, "
    "the compiled extensions' sm_75 code): ✅ ready · 🟡 ready, with the flags it names refused · ❌ cannot, with "
    "what fails · ❔ unknown, with what could not be checked · ➖ not checked (no sm75 findings on that line). "
    "Flags and vLLM's messages per release: [sm75.md](sm75.md)."
)


def sm75_record(doc: Mapping[str, Any]) -> Mapping[str, Any] | None:
    record = doc.get("tiers", {}).get("sm75")
    return record if isinstance(record, Mapping) and record.get("findings") else None


def table_cell(doc: Mapping[str, Any], note: Callable[[str], str]) -> str:
    """The compat table's cell for one result; ``note`` turns a text into a note reference."""
    record = sm75_record(doc)
    if record is None:
        return NOT_CHECKED
    readiness = assess(record["findings"])
    cell = CELLS[readiness.status]
    if readiness.headline and readiness.status != "ready":
        cell += f": {readiness.headline}"
    details = readiness.problems if readiness.status in ("cannot", "unknown") else readiness.refusals
    if details:
        cell += " " + note(f"SM75: {'; '.join(details)}")
    return cell


def _pick(results: Sequence[Any]) -> dict[str, Any]:
    """Per row id, the newest result that has sm75 findings (a GPU line and a CPU line check the same software)."""
    picked: dict[str, Any] = {}
    for result in results:
        if sm75_record(result.doc) is None:
            continue
        row = result.doc["row"]["id"]
        if row not in picked or result.doc["finished_at"] > picked[row].doc["finished_at"]:
            picked[row] = result
    return picked


def _table(rows: list[list[str]], headers: list[str]) -> str:
    cleaned = [[str(cell).replace("|", "\\|").replace("\n", " ") for cell in row] for row in rows]
    return tabulate(cleaned, headers=headers, tablefmt="github", disable_numparse=True)


def _kernel_rows(kernels: Mapping[str, Any]) -> list[list[str]]:
    rows = []
    for kernel in kernels.get("kernels", []):
        calls = kernel.get("calls", [])
        shown = next((c for c in calls if c.get("verdict") == kernel.get("verdict")), calls[0] if calls else {})
        if kernel.get("verdict") == "runs":
            config = ", ".join(f"{k}={v}" for k, v in (shown.get("config") or {}).items())
            detail = f"#{shown.get('config_index', 0) + 1} of {shown.get('configs_offered')}: {config}"
        else:
            detail = shown.get("reason") or ""
        spills = max((c.get("spill_bytes") or 0 for c in calls), default=0)
        shared = max((c.get("shared_bytes") or 0 for c in calls), default=0)
        registers = max((c.get("registers") or 0 for c in calls), default=0)
        rows.append(
            [
                f"`{kernel['kernel']}`",
                ", ".join(kernel.get("steps", [])),
                kernel.get("verdict", "?"),
                detail,
                str(shared),
                str(registers or "?"),
                str(spills),
            ]
        )
    for name in sorted({item["kernel"] for item in kernels.get("caovan", [])}):
        items = [i for i in kernels["caovan"] if i["kernel"] == name]
        verdict = "cannot" if any(i["verdict"] == "cannot" for i in items) else "runs"
        rows.append(
            [
                f"`{name}` (caovan)",
                "spec-decode",
                verdict,
                items[0].get("config", ""),
                str(max(i.get("shared_bytes") or 0 for i in items)),
                str(max(i.get("registers") or 0 for i in items)),
                str(max(i.get("spill_bytes") or 0 for i in items)),
            ]
        )
    return rows


def _binaries_lines(binaries: Mapping[str, Any]) -> list[str]:
    torch = binaries.get("torch", {})
    summary = binaries.get("summary", {})
    lines = [
        f"- torch {torch.get('version', '?')} is built for {', '.join(torch.get('arch_flags', [])) or '?'}.",
        f"- Extensions without code a 7.5 device can run: {', '.join(summary.get('missing', [])) or 'none'}"
        + (" (vLLM picks these by capability; none is on the start-up path)." if summary.get("ready") else "."),
    ]
    return lines


def _section(result: Any) -> list[str]:
    doc = result.doc
    findings = sm75_record(doc)["findings"]
    readiness: Readiness = assess(findings)
    kernels = findings.get("kernels", {})
    status = CELLS[readiness.status] + (f": {readiness.headline}" if readiness.headline else "")
    lines = [
        f"### vLLM {doc['row']['vllm']} — {status}",
        "",
        f"_From `{result.shown}` (runner `{doc['runner']}`, {doc['finished_at'][:10]}; family "
        f"`{doc['env'].get('family')}`, torch {doc['env'].get('torch')}, Triton {doc['env'].get('triton')})._",
        "",
    ]
    if readiness.problems:
        lines += ["**What fails or could not be checked:**", "", *[f"- {p}" for p in readiness.problems], ""]
    if readiness.flags:
        lines += ["**Flags for a 2080 Ti:**", "", _table([list(f) for f in readiness.flags], ["flag", "value", "why"])]
        lines.append("")
    if readiness.refusals:
        lines += ["**Refused on a 7.5 device** (vLLM's own messages):", ""]
        lines += [f"- {r}" for r in readiness.refusals] + [""]
    if readiness.turbo3:
        lines += ["**Turbo3's published command line on this release:**", ""]
        lines += [_table([list(t) for t in readiness.turbo3], ["flag", "value", "here", "why"]), ""]
    if kernels.get("kernels"):
        lines += [
            f"**The GDN path's Triton kernels, compiled for sm_75** (Triton {kernels.get('triton')}, shapes of "
            "Qwen3.6-27B and Qwen3.6-35B-A3B at TP=1 and 2, fp16, fp32 and fp16 SSM state; the first config in "
            "vLLM's order that compiles within 65536 B of shared memory; bytes and registers are the largest over "
            "the shapes):",
            "",
            _table(
                _kernel_rows(kernels),
                ["kernel", "step", "verdict", "first config that fits / why none", "shared B", "registers", "spill B"],
            ),
            "",
        ]
    if findings.get("binaries"):
        lines += ["**Compiled code:**", "", *_binaries_lines(findings["binaries"]), ""]
    if readiness.notes:
        lines += ["**Notes:**", "", *[f"- {n}" for n in readiness.notes], ""]
    return lines


def render_page_block(results: Sequence[Any], row_ids: Sequence[str]) -> str:
    """The generated part of docs/sm75.md: one section per matrix row, newest release first."""
    picked = _pick(results)
    lines = [
        "<!-- generated by `nox -s compat` from the sm75 tier's findings in matrix/results/; do not edit by hand -->",
        "",
    ]
    ordered = sorted(picked.values(), key=lambda r: (Version(r.doc["row"]["vllm"]), r.doc["row"]["id"]), reverse=True)
    for result in ordered:
        lines += _section(result)
    waiting = [row for row in row_ids if row not in picked]
    if waiting:
        lines.append(f"Rows without sm75 findings yet: {', '.join(f'`{r}`' for r in waiting)}.")
    return "\n".join(lines).rstrip() + "\n"
