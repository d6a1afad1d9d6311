"""``caovan doctor``: what is installed, what vLLM will load, which GDN family this vLLM belongs to, and what
this vLLM refuses on the GPUs here (asked with their compute capability, :mod:`caovan.sm75.vllm_decisions`).

caovan's environment settings are judged by the function the plugin's start-up uses
(:func:`caovan.plugin.options.check_environment`): doctor says FAIL where start-up would stop and WARN where it
would log a warning, never PASS for a value vLLM's start-up then refuses.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import sys
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

from .. import PLUGIN_NAME, __version__
from ..matrix.envinfo import distribution_version as _version
from ..plugin.options import FAIL, WARN, check_environment, vllm_plugins_leaves_out
from . import cuda_visible_note
from ._streams import stdout_to_stderr

NAME = "doctor"
HELP = (
    "check Python, torch, Triton, CUDA, GPUs, vLLM, plugin discovery, the GDN interface family and caovan's "
    "environment settings"
)
ALIAS = "caovan-sm75-doctor"
EPILOG = (
    "Exit status: 0 PASS (vLLM will load caovan, a GDN family matches this vLLM, the cache folders are usable, "
    "the kernels compile and start-up accepts every CAOVAN_* setting; a setting start-up only warns about, such as "
    "an unknown CAOVAN_* variable, is a WARN on the result line); 1 FAIL, the result line (result.verdict in --json) "
    "says why; 2 a command line that cannot be parsed (an unknown option), with a usage message."
)
ENTRY_POINT_GROUP = "vllm.general_plugins"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    parser.add_argument("--verbose", "-v", action="store_true", help="list every hook point probed")


def gpu_facts() -> dict[str, Any]:
    """GPUs as torch sees them; 'none' is a valid answer on a CPU machine."""
    try:
        import torch
    except Exception as exc:
        return {"available": False, "reason": f"torch not importable: {exc}", "devices": []}
    if not torch.cuda.is_available():
        reason = "no CUDA device visible" + cuda_visible_note().replace("; ", ": ", 1)
        return {"available": False, "reason": reason, "devices": [], "cuda": torch.version.cuda}
    devices = []
    for i in range(torch.cuda.device_count()):
        major, minor = torch.cuda.get_device_capability(i)
        devices.append({"index": i, "name": torch.cuda.get_device_name(i), "capability": f"{major}.{minor}"})
    sm75 = sum(d["capability"] == "7.5" for d in devices)
    return {
        "available": True,
        "devices": devices,
        "cuda": torch.version.cuda,
        "sm75": f"{sm75}/{len(devices)}",
    }


def plugin_discovery(environ: dict[str, str] | None = None) -> dict[str, Any]:
    env = os.environ if environ is None else environ
    eps = [ep for ep in entry_points(group=ENTRY_POINT_GROUP) if ep.name == PLUGIN_NAME]
    left_out = vllm_plugins_leaves_out(PLUGIN_NAME, env)
    filtered = left_out is not None
    if "VLLM_PLUGINS" not in env:
        why = "VLLM_PLUGINS unset: every discovered plugin loads"
    else:
        why = left_out or f"VLLM_PLUGINS lists {PLUGIN_NAME}"
    load_error = None
    if eps:
        # vLLM calls ep.load() and, when it raises, logs the exception and starts without caovan: a stale
        # entry point (a module renamed or gone, a half-removed install) is discovered but never runs.
        try:
            eps[-1].load()
        except Exception as exc:
            load_error = f"{type(exc).__name__}: {exc}"
    # Two distributions registering this name (an older Turbo3 install beside caovan): vLLM keeps one plugin per
    # name, whichever loads last in sys.path order, and calls only that one.
    targets = list(dict.fromkeys(ep.value for ep in eps))
    return {
        "entry_point_group": ENTRY_POINT_GROUP,
        "discovered": bool(eps),
        "target": eps[-1].value if eps else None,
        "targets": targets,
        "loads": bool(eps) and load_error is None,
        "load_error": load_error,
        "filtered_by_vllm_plugins": filtered,
        "vllm_plugins": why,
    }


def _writable(path: Path) -> tuple[bool, str]:
    """A cache folder is usable when it is a writable folder, or the nearest path above it that exists is one."""
    probe = path
    # lexists: a broken link is there (mkdir fails on it), not a folder still to be created
    while not os.path.lexists(probe) and probe != probe.parent:
        probe = probe.parent
    if not probe.is_dir():
        what = f"a broken link to {os.readlink(probe)}" if probe.is_symlink() else "not a directory"
        if probe == path:
            return False, f"exists but is {what}, NOT usable"
        return False, f"cannot be created: {probe} is {what}"
    ok = os.access(probe, os.W_OK)
    where = "exists" if probe == path else f"will be created under {probe}"
    return ok, f"{where}, {'writable' if ok else 'NOT writable'}"


def cache_facts(guards: list[dict[str, Any]]) -> list[dict[str, Any]]:
    from ..plugin.guards import isolated_cache_dir

    triton_guard = next(g for g in guards if g["guard"] == "triton_cache")
    # Triton's own default when neither the user nor the SM75 guard sets TRITON_CACHE_DIR.
    triton_dir = triton_guard["value"] if triton_guard["applies"] else os.environ.get("TRITON_CACHE_DIR")
    folders: dict[str, Path | str] = {
        "caovan (CAOVAN_CACHE_DIR)": isolated_cache_dir(),
        "triton (TRITON_CACHE_DIR)": Path.home() / ".triton" / "cache" if triton_dir is None else triton_dir,
    }
    if "TORCHINDUCTOR_CACHE_DIR" in os.environ:
        folders["inductor (TORCHINDUCTOR_CACHE_DIR)"] = os.environ["TORCHINDUCTOR_CACHE_DIR"]
    out = []
    for label, path in folders.items():
        # Triton and torch take a variable set to "" as the folder "" (which they cannot create), not as unset;
        # Path("") would be ".", a folder that passes.
        ok, detail = _writable(Path(path)) if path != "" else (False, "set but empty, NOT usable")
        out.append({"cache": label, "path": str(path), "writable": ok, "detail": detail})
    return out


def guard_facts(gpus: dict[str, Any]) -> list[dict[str, Any]]:
    from ..plugin.guards import plan_guards

    caps = [tuple(int(x) for x in d["capability"].split(".")) for d in gpus.get("devices", [])]
    # plan_guards' reason already says why a guard does not apply (set by the user, or no SM75 GPU).
    return [
        {"guard": g.name, "env": g.env, "value": g.value, "applies": g.applies, "why": g.why}
        for g in plan_guards(caps, os.environ)
    ]


def kernel_compile_facts(gpus: dict[str, Any]) -> dict[str, Any]:
    """Both kernels compiled ahead of time for this GPU (or sm_75 when there is none), fp16 deployment."""
    caps = [tuple(int(x) for x in d["capability"].split(".")) for d in gpus.get("devices", [])]
    capability = caps[0] if caps else (7, 5)
    target = f"sm_{capability[0]}{capability[1]}" + ("" if caps else " (no GPU here: the SM75 target)")
    try:
        from ..kernels.gdn_spec_decode import aot
        from ..kernels.gdn_spec_decode.launch_configs import config_for

        config = config_for(capability)
        infos = aot.compile_spec_decode_kernels(config, aot.SUPPORTED_DTYPE_COMBOS[0], capability=capability)
    except Exception as exc:  # doctor reports; it never raises
        return {"target": target, "ok": False, "detail": f"{type(exc).__name__}: {exc}"}
    problems = aot.gate_problems(infos) if capability == (7, 5) else []
    # Registers decide how many programs an SM holds (the V/GDN grid should fit in one wave): worth a line.
    detail = ", ".join(
        f"{i.kernel} shared={i.shared_bytes}B regs={'?' if i.registers is None else i.registers}" for i in infos
    )
    return {
        "target": target,
        "ok": not problems,
        "launch_config": config.arch,
        "detail": "; ".join(problems) if problems else detail,
    }


def family_reports() -> list[Any]:
    from ..adapters import probe_all
    from ..adapters.base import installed_vllm_version

    return list(probe_all()) if installed_vllm_version() else []


def _closest(reports: list[Any]) -> str | None:
    from ..adapters.registry import closest

    return closest(reports)


def _refusals() -> dict[str, Any]:
    """Family id -> record, for the families caovan recognises but leaves to vLLM."""
    from ..adapters.families import FAMILIES

    return {f.family_id: f for f in FAMILIES if f.refusal is not None}


def _refused_facts(vllm_version: str | None, family: Any) -> dict[str, str]:
    from ..adapters.registry import refusal_message

    return {"family": family.family_id, "reason": family.refusal, "message": refusal_message(vllm_version, family)}


def full_graph_facts(vllm_installed: bool) -> dict[str, Any]:
    """Whether FULL CUDA graphs with MTP decode right with this vLLM, caovan on and off (information: it does not
    change the verdict, as a server may run PIECEWISE graphs)."""
    if not vllm_installed:
        return {"with_caovan": None, "without_caovan": None, "line": "not judged (vLLM is not installed)"}
    try:
        from ..adapters.registry import installed_full_graph_safety

        safety = installed_full_graph_safety()
    except Exception as exc:  # doctor reports; it never raises
        return {"with_caovan": None, "without_caovan": None, "line": f"not judged ({type(exc).__name__}: {exc})"}
    return {
        "with_caovan": safety.with_caovan,
        "without_caovan": safety.without_caovan,
        "line": safety.summary(),
    }


def profiling_facts(vllm_installed: bool) -> dict[str, Any]:
    """Whether ``caovan bench e2e --profile`` can count this vLLM's decode steps (information, as the full-graph
    line: the verdict is about caovan)."""
    if not vllm_installed:
        return {"usable": None, "line": "not judged (vLLM is not installed)"}
    try:
        from ..bench.e2e import profiler_problem, step_range_sources

        problem = profiler_problem()
    except Exception as exc:  # doctor reports; it never raises
        return {"usable": None, "line": f"not judged ({type(exc).__name__}: {exc})"}
    if problem is not None:
        return {"usable": False, "line": f"refused: {problem.removeprefix('--profile: ')}"}
    return {"usable": True, "line": f"usable (steps counted by the range {', '.join(step_range_sources())} opens)"}


def prefill_facts(family_id: str | None, gpus: dict[str, Any]) -> dict[str, Any]:
    """Which GDN prefill a server with ``"caovan_prefill": true`` runs (Turbo3's ``GDNCore backend=...``) and
    where caovan's goes in; information, as the full-graph line (the option is the user's choice)."""
    if family_id is None:
        return {"backend": None, "line": "not judged (no vLLM family caovan serves)"}
    from ..adapters.families import FAMILIES
    from ..adapters.layer_support import gpu_reason
    from ..adapters.prefill_hook import PREFILL_NAME, hook_problem

    family = next((f for f in FAMILIES if f.family_id == family_id), None)
    if family is None:
        return {"backend": None, "line": f"not judged (no record of family {family_id})"}
    try:
        reasons = [hook_problem(family)]
    except Exception as exc:  # doctor reports; it never raises
        return {"backend": None, "line": f"not judged ({type(exc).__name__}: {exc})"}
    for device in gpus.get("devices", []) if gpus.get("available") else []:
        major, minor = (int(x) for x in device["capability"].split("."))
        reasons.append(gpu_reason((major, minor)))
    reasons = [r for r in reasons if r]
    if reasons:
        return {"backend": "vllm_fla", "line": f"GDNCore backend=vllm_fla: {'; '.join(reasons)}"}
    where = (
        f"{family.gdn_module}.{PREFILL_NAME}"
        if family.prefill_route == "module_function"
        else f"{family.gdn_class}.{PREFILL_NAME}"
    )
    return {
        "backend": "caovan_gdncore",
        "line": f'GDNCore backend=caovan_gdncore with "caovan_prefill": true (in place of {where}); '
        "vLLM's FLA prefill without it",
    }


def device_decision_facts(gpus: dict[str, Any], vllm_installed: bool) -> dict[str, Any]:
    """What this vLLM refuses on each kind of GPU here (its own decisions, asked with the GPU's compute capability:
    :mod:`caovan.sm75.vllm_decisions`).  Information, as the full-graph line: the verdict is about caovan."""
    if not vllm_installed:
        return {"judged": False, "line": "not judged (vLLM is not installed)", "gpus": []}
    if not gpus.get("available"):
        return {
            "judged": False,
            "line": f"not judged: no GPU to ask vLLM about ({gpus.get('reason')}); the matrix's sm75 tier asks it "
            "about a 7.5 device without one",
            "gpus": [],
        }
    from ..serving.device_refusals import refusals
    from ..sm75.vllm_decisions import probe_vllm_decisions

    judged = []
    kinds = {d["capability"]: d["name"] for d in gpus["devices"]}  # one vLLM answer per compute capability
    for capability, name in kinds.items():
        major, minor = (int(x) for x in capability.split("."))
        try:
            doc = probe_vllm_decisions((major, minor), device_name=name, real_device=True)
        except Exception as exc:  # doctor reports; it never raises
            judged.append(
                {"capability": capability, "name": name, "refusals": [], "error": f"{type(exc).__name__}: {exc}"}
            )
            continue
        judged.append(
            {"capability": capability, "name": name, "refusals": refusals(doc), "unanswered": doc["unanswered"]}
        )
    return {"judged": True, "line": None, "gpus": judged}


def collect() -> dict[str, Any]:
    reports = family_reports()
    refusals = _refusals()
    passing = [r for r in reports if r.ok and r.family_id not in refusals]
    refused = [r for r in reports if r.ok and r.family_id in refusals]
    gpus = gpu_facts()
    guards = guard_facts(gpus)
    facts = {
        "plugin": {"name": PLUGIN_NAME, "version": __version__},
        "python": f"{platform.python_version()} ({sys.implementation.name}, {platform.system().lower()} "
        f"{platform.machine()})",
        "torch": _version("torch"),
        "triton": _version("triton"),
        "vllm": _version("vllm"),
        "gpus": gpus,
        "discovery": plugin_discovery(),
        "guards": guards,
        "caches": cache_facts(guards),
        "kernels": kernel_compile_facts(gpus),
        "full_graphs": full_graph_facts(bool(reports)),
        "profiling": profiling_facts(bool(reports)),
        "vllm_on_gpu": device_decision_facts(gpus, bool(reports)),
        "settings": [dataclasses.asdict(finding) for finding in check_environment()],
        "families": [r.as_dict() for r in reports],
        "closest_family": _closest(reports),
        "family": passing[0].family_id if passing else None,
        "family_ok": bool(passing),
        # Start-up's verdict on such a release too: the plugin stays inert and says this.
        "family_refused": (
            None if passing or not refused else _refused_facts(_version("vllm"), refusals[refused[0].family_id])
        ),
    }
    facts["prefill"] = prefill_facts(facts["family"], gpus)
    ok, text = verdict(facts)
    facts["result"] = {"ok": ok, "verdict": text}
    facts["ok"] = ok  # the overall result, as the exit code and the text's result line say
    return facts


def verdict(facts: dict[str, Any]) -> tuple[bool, str]:
    """Doctor's one verdict (text, JSON and exit code all use it): PASS only when vLLM will load a working caovan."""
    problems = []
    refused = facts.get("family_refused")
    if refused:
        problems.append(refused["message"])
    elif not facts["family_ok"]:
        # The result line is what a user reads (and greps): it names why, e.g. a vLLM that is there but fails to
        # import (a torch of another CUDA build), not only that no family passed.
        # The family this vLLM's version points at says best what broke (a vLLM that fails to import, say); a
        # release outside every hint is named by the family it comes closest to, and what moved.
        tried = [f for f in facts["families"] if f["hint_matches"]]
        if tried:
            why = f"{tried[0]['family']}: {tried[0]['reason']}"
        else:
            why = facts.get("closest_family") or "vLLM is not installed"
        problems.append(f"no GDN family passes ({why})")
    disc = facts["discovery"]
    if not disc["discovered"]:
        problems.append(
            f"entry point {PLUGIN_NAME} not discovered in {disc['entry_point_group']}: vLLM will not load caovan"
        )
    elif len(disc["targets"]) > 1:
        problems.append(
            f"{len(disc['targets'])} entry points named {PLUGIN_NAME} ({', '.join(disc['targets'])}): vLLM calls "
            f"only the last that loads; uninstall the one that is not caovan's"
        )
    elif disc["load_error"]:
        problems.append(f"entry point {PLUGIN_NAME} = {disc['target']} does not load ({disc['load_error']})")
    elif disc["filtered_by_vllm_plugins"]:
        problems.append(disc["vllm_plugins"])
    problems += [
        f"cache folder {c['path'] or 'of ' + c['cache']} is not usable ({c['detail']})"  # no path: set but empty
        for c in facts["caches"]
        if not c["writable"]
    ]
    if not facts["kernels"]["ok"]:
        problems.append(f"caovan's kernels do not compile for {facts['kernels']['target']}")
    problems += [f"{s['message']} (vLLM's start-up stops on it)" for s in facts["settings"] if s["level"] == FAIL]
    if problems:
        return False, "FAIL: " + "; ".join(problems)
    warnings = [s["message"] for s in facts["settings"] if s["level"] == WARN]
    return True, f"PASS family={facts['family']}" + "".join(f"; {WARN}: {w}" for w in warnings)


def render(facts: dict[str, Any], verbose: bool = False) -> str:
    gpus = facts["gpus"]
    if gpus["available"]:
        gpu_line = "; ".join(
            f"{d['index']}: {d['name']} (sm_{d['capability'].replace('.', '')})" for d in gpus["devices"]
        )
        gpu_line += f"; sm75={gpus['sm75']}"
    else:
        gpu_line = f"none ({gpus['reason']})"
    disc = facts["discovery"]
    refused = {facts["family_refused"]["family"]} if facts.get("family_refused") else set()
    lines = [
        f"{facts['plugin']['name']} {facts['plugin']['version']} doctor",
        f"python        {facts['python']}",
        f"torch         {facts['torch'] or 'not installed'}"
        + (f" (CUDA {gpus.get('cuda')})" if gpus.get("cuda") else ""),
        f"triton        {facts['triton'] or 'not installed'}",
        f"vllm          {facts['vllm'] or 'not installed'}",
        f"gpus          {gpu_line}",
        "entry point   "
        + (
            f"discovered: {', '.join(disc['targets'])}"
            + (f", does NOT load: {disc['load_error']}" if disc["load_error"] else "")
            if disc["discovered"]
            else f"NOT discovered in {disc['entry_point_group']} (is the wheel installed in this environment?)"
        ),
        f"plugins       {disc['vllm_plugins']}",
    ]
    if not facts["families"]:
        lines.append("GDN interface check: FAIL (vLLM is not installed)")
    for fam in facts["families"]:
        verdict = ("REFUSED" if fam["family"] in refused else "PASS") if fam["ok"] else "SKIP"
        hint = "matches" if fam["hint_matches"] else "does not match"
        lines.append(
            f"GDN interface check: {verdict} family={fam['family']} "
            f"(version hint {fam['version_hint']} {hint} vLLM {fam['vllm_version']}): {fam['reason']}"
        )
        if verbose:
            for h in fam["hook_points"]:
                lines.append(f"    [{'x' if h['found'] else ' '}] {h['name']}: {h['detail']}")
    for g in facts["guards"]:
        state = f"{g['env']}={g['value']} would be set" if g["applies"] else "not applied"
        lines.append(f"guard         {g['guard']}: {state} ({g['why']})")
    for c in facts["caches"]:
        lines.append(f"cache         {c['cache']}: {c['path'] or repr(c['path'])} ({c['detail']})")
    k = facts["kernels"]
    lines.append(f"kernels       compile for {k['target']}: {'PASS' if k['ok'] else 'FAIL'} ({k['detail']})")
    lines.append(f"full graphs   {facts['full_graphs']['line']}")
    lines.append(f"profiling     caovan bench e2e --profile: {facts['profiling']['line']}")
    lines.append(f"prefill       {facts['prefill']['line']}")
    lines += _device_decision_lines(facts["vllm_on_gpu"])
    for setting in facts["settings"]:
        lines.append(f"settings      {setting['level']} {setting['setting']}: {setting['message']}")
    if not facts["settings"]:
        lines.append("settings      PASS: vLLM's start-up accepts every CAOVAN_* variable set here")
    lines.append(f"result        {facts['result']['verdict']}")
    return "\n".join(lines)


def _device_decision_lines(decided: dict[str, Any]) -> list[str]:
    """One line per setting vLLM refuses on this GPU, its message quoted; one line when there is none or no GPU."""
    if not decided["judged"]:
        return [f"on this gpu   {decided['line']}"]
    lines = []
    for gpu in decided["gpus"]:
        where = f"sm_{gpu['capability'].replace('.', '')} ({gpu['name']})"
        if gpu.get("error"):
            lines.append(f"on this gpu   {where}: not judged ({gpu['error']})")
            continue
        for refusal in gpu["refusals"]:
            lines.append(f'on this gpu   {where}: vLLM refuses {refusal["setting"]}: "{refusal["message"]}"')
        if not gpu["refusals"]:
            lines.append(
                f"on this gpu   {where}: vLLM refuses none of the settings asked (--dtype, --attention-backend, "
                "--kv-cache-dtype, --quantization, the FlashInfer sampler)"
            )
        if gpu.get("unanswered"):
            asked = ", ".join(dict.fromkeys(u["question"] for u in gpu["unanswered"]))
            lines.append(f"on this gpu   {where}: unanswered here: {asked}")
    return lines


def run(args: argparse.Namespace) -> int:
    # Importing vLLM logs to stdout (and its C extensions may write to fd 1): the report alone goes there.
    with stdout_to_stderr():
        facts = collect()
    if args.json:
        print(json.dumps(facts, indent=2, sort_keys=True))
    else:
        print(render(facts, verbose=args.verbose))
    return 0 if facts["result"]["ok"] else 1
