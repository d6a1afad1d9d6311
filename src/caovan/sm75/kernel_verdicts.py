"""Can each Triton kernel of the row's GDN path run on a 2080 Ti? The ``kernels`` part of the sm75 tier.

Every distinct call the row's layer makes (``gdn_launches``) is compiled for sm_75 with the row's Triton, config by
config in the order vLLM lists them, until one compiles and fits: Triton's autotuner gives a config that fails with
out-of-resources an infinite time, so a launch on the device fails only when none fits. The verdict of a call:

* ``runs``: the first config that fits is named, with its shared memory, registers and spills (``ptxas -v``);
* ``cannot``: no config fits (each one's reason summarised: shared memory over the limit, a compiler error, bf16
  instructions in an fp16 build);
* ``unchecked``: no config compiled, and the first does not compile for sm_80 either — a failure of this harness or
  of the kernel everywhere, not a finding about Turing;
* a step the rig could not drive leaves its kernels ``unreached``, reported with the error, never counted as fine.

``--deep`` compiles every config of every call (the full table). caovan's own kernels (spec decode, and the prefill's
fused and chunked paths) are compiled for their ``sm75`` launch entries at the same shapes (``caovan.kernels.*.aot``).

    python -m caovan.sm75.kernel_verdicts --out kernels.json [--deep]
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import json
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ..jsonfile import write_text_atomic
from .device_view import RTX_2080_TI, DeviceFacts, sm75_device_view
from .gdn_launches import (
    MAMBA_OPS_PACKAGE,
    SHAPES,
    SSM_STATE_DTYPES,
    LayerLaunches,
    import_kernel_packages_for_device,
    imported_kernel_modules,
    kernel_packages,
    record_all,
)
from .kernel_compile import CompileOutcome, cache_dir, cache_key, compile_launch, fits
from .launch_recorder import KernelLaunch

#: The device a config that compiles nowhere is checked against: an A100's target and shared memory.
CONTROL_DEVICE = DeviceFacts(name="NVIDIA A100", capability=(8, 0), max_shared_mem=166912, multiprocessor_count=108)
#: Worst first: a kernel's verdict is the worst of its calls', the part's the worst of its kernels'.
VERDICT_ORDER = ("cannot", "unreached", "unchecked", "runs")


@dataclass
class KernelCall:
    """One distinct call of one kernel: its configs (one launch each, in vLLM's order) and where it was made."""

    configs: list[KernelLaunch]
    configs_declared: int
    seen_in: set[str] = field(default_factory=set)
    steps: set[str] = field(default_factory=set)

    @property
    def kernel_id(self) -> str:
        return f"{self.configs[0].module}.{self.configs[0].name}"


def _calls_of(launches: Sequence[KernelLaunch]) -> list[tuple[list[KernelLaunch], int]]:
    calls, seen = [], set()
    for launch in launches:
        if launch.autotuned is None:
            calls.append(([launch], 1))
        elif id(launch.autotuned) not in seen:
            seen.add(id(launch.autotuned))
            calls.append((launch.autotuned.launches, launch.autotuned.pruned_from))
    return calls


def group_calls(recorded: Sequence[LayerLaunches]) -> dict[str, list[KernelCall]]:
    """Distinct calls per kernel (``module.name``), in first-launch order; equal calls are merged."""
    by_kernel: dict[str, list[KernelCall]] = {}
    index: dict[tuple[str, int], KernelCall] = {}
    for combination in recorded:
        where = f"{combination.shape.id}, {combination.ssm_dtype} state"
        for configs, declared in _calls_of(combination.launches):
            if not configs:
                continue
            call = KernelCall(configs, declared)
            key = (cache_key(configs[0], RTX_2080_TI), len(configs))
            known = index.setdefault(key, call)
            if known is call:
                by_kernel.setdefault(call.kernel_id, []).append(call)
            known.seen_in.add(f"{where}, {configs[0].step}")
            known.steps.add(configs[0].step)  # an equal call in another step is merged: its step is kept
    return by_kernel


def describe_config(launch: KernelLaunch) -> dict[str, Any]:
    """The config as vLLM wrote it (its constexprs) with the launch options Triton compiles with."""
    described: dict[str, Any] = {}
    if launch.autotuned is not None and launch.config_index is not None:
        described.update(launch.autotuned.configs[launch.config_index].kwargs)
    for name in ("num_warps", "num_stages", "num_ctas", "maxnreg"):
        if launch.options.get(name) is not None:
            described[name] = launch.options[name]
    return described


def _config_text(config: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in config.items())


def _why_none_fits(tried: list[tuple[KernelLaunch, CompileOutcome, str]], facts: DeviceFacts) -> str:
    limit = facts.max_shared_mem
    too_big = [o.shared_bytes for _, o, _ in tried if o.compiled and o.shared_bytes and o.shared_bytes > limit]
    errors = [o.error for _, o, _ in tried if not o.compiled]
    bf16 = [why for _, _, why in tried if why.startswith("bf16")]
    parts = []
    if too_big:
        parts.append(f"{len(too_big)} need more shared memory than {limit} B (the least {min(too_big)} B)")
    if errors:
        parts.append(f"{len(errors)} do not compile ({errors[0]})")
    if bf16:
        parts.append(f"{len(bf16)} put bf16 instructions into an fp16 build")
    return f"none of its {len(tried)} configs fits sm_{facts.arch}: " + "; ".join(parts)


def judge_call(call: KernelCall, *, deep: bool, facts: DeviceFacts = RTX_2080_TI) -> dict[str, Any]:
    """The call's verdict (see the module docstring), with what was compiled for it."""
    tried: list[tuple[KernelLaunch, CompileOutcome, str | None]] = []
    for launch in call.configs:
        outcome = compile_launch(launch, facts)
        tried.append((launch, outcome, fits(outcome, launch, facts)))
        if tried[-1][2] is None and not deep:
            break
    keys = sorted({key for launch in call.configs for key in describe_config(launch)})
    record: dict[str, Any] = {
        "seen_in": sorted(call.seen_in),
        "config_family": f"{len(call.configs)} config(s) over {', '.join(keys) or 'its launch options'}",
        "configs_offered": len(call.configs),
        "configs_declared": call.configs_declared,
        "configs_compiled": len(tried),
    }
    if deep:
        record["table"] = [
            {"config": describe_config(launch), **outcome.to_json(), "fits": why is None, "why_not": why}
            for launch, outcome, why in tried
        ]
    first_fit = next(((i, item) for i, item in enumerate(tried) if item[2] is None), None)
    if first_fit is not None:
        index, (launch, outcome, _) = first_fit
        return {
            **record,
            "verdict": "runs",
            "config_index": index,
            "config": describe_config(launch),
            "shared_bytes": outcome.shared_bytes,
            "registers": outcome.registers,
            "spill_bytes": outcome.spill_bytes,
            "reason": None,
        }
    if not any(outcome.compiled for _, outcome, _ in tried):
        control = compile_launch(call.configs[0], CONTROL_DEVICE)
        if not control.compiled:
            reason = f"its first config does not compile for sm_80 either: {control.error}"
            return {**record, "verdict": "unchecked", "reason": reason}
    return {**record, "verdict": "cannot", "reason": _why_none_fits(tried, facts)}  # type: ignore[arg-type]


def _worst(verdicts: Sequence[str]) -> str:
    return min(verdicts, key=VERDICT_ORDER.index) if verdicts else "unreached"


def judge_kernels(calls: dict[str, list[KernelCall]], *, deep: bool, log=print) -> list[dict[str, Any]]:
    kernels = []
    for kernel_calls in calls.values():
        first = kernel_calls[0].configs[0]
        judged = []
        for call in kernel_calls:
            started = time.perf_counter()
            judged.append(judge_call(call, deep=deep))
            log(f"sm75: {first.name}: {judged[-1]['verdict']} ({time.perf_counter() - started:.1f} s)")
        steps = sorted(set().union(*(c.steps for c in kernel_calls)))
        kernels.append(
            {
                "kernel": first.name,
                "module": first.module,
                "steps": steps,
                "verdict": _worst([c["verdict"] for c in judged]),
                "calls": judged,
            }
        )
    return kernels


def _cached_infos(key_data: list, compile_infos) -> list[dict[str, Any]]:
    """A compile's figures and gate problems, from the part cache when this exact compile was judged before."""
    path = cache_dir() / f"caovan-{hashlib.sha256(json.dumps(key_data).encode()).hexdigest()[:32]}.json"
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        infos = compile_infos()
        path.parent.mkdir(parents=True, exist_ok=True)
        write_text_atomic(path, json.dumps(infos, sort_keys=True) + "\n")
        return infos


def _judged(compile_kernels, gate_problems) -> list[dict[str, Any]]:
    """Each kernel's figures with its problems, judged once, with its gate's own rules."""
    return [{**vars(i), "problems": gate_problems([i])} for i in compile_kernels(capability=(7, 5))]


def _caovan_verdict(info: dict[str, Any], seen_in: str) -> dict[str, Any]:
    # Spills (and fewer resident programs than wanted) cost speed, not correctness: only the other rules are fatal.
    fatal = [p for p in info["problems"] if "spill" not in p and "per RTX 2080 Ti SM" not in p]
    return {
        "kernel": info["kernel"],
        "seen_in": seen_in,
        "config": f"sm75 entry: num_warps={info['num_warps']}, num_stages={info['num_stages']}",
        "verdict": "cannot" if fatal else "runs",
        "shared_bytes": info["shared_bytes"],
        "registers": info["registers"],
        "spill_bytes": info["spill_bytes"],
        "reason": "; ".join(info["problems"]) or None,
    }


def caovan_kernels(ssm_layout: str) -> list[dict[str, Any]]:
    """caovan's own kernels, spec decode and prefill, compiled with this row's Triton for their ``sm75`` launch
    entries at every shape and SSM dtype, judged by their gates' rules (cached)."""
    import triton

    from ..kernels.gdn_prefill import aot as prefill_aot
    from ..kernels.gdn_prefill.launch_configs import LAUNCH_CONFIGS as PREFILL_CONFIGS
    from ..kernels.gdn_spec_decode import aot
    from ..kernels.gdn_spec_decode.launch_configs import LAUNCH_CONFIGS

    entry, prefill_entry = LAUNCH_CONFIGS["sm75"], PREFILL_CONFIGS["sm75"]
    layout = aot.LayoutVariant(ssm_layout=ssm_layout)
    prefill_variant = prefill_aot.LaunchVariant(ssm_layout=ssm_layout)
    sources = [aot._caovan_sm75_prepare_qk_conv_spec_decode_kernel, aot._caovan_sm75_fused_v_gdn_spec_decode_kernel]
    prefill_sources = prefill_aot.KERNEL_SOURCES
    results = []
    for shape in SHAPES:
        model_shape = aot.ModelShape(shape.num_k_heads, shape.num_v_heads, shape.head_dim, shape.head_dim)
        prefill_shape = prefill_aot.ModelShape(shape.id, shape.num_k_heads, shape.num_v_heads)
        for ssm_dtype in SSM_STATE_DTYPES:
            combo = aot.DtypeCombo("float16", "float16", ssm_dtype)
            key_data = [triton.__version__, [k.cache_key for k in sources], repr(entry), repr(combo), repr(layout)]
            key_data.append(repr(model_shape))
            compile_spec = functools.partial(aot.compile_spec_decode_kernels, entry, combo, layout, model_shape)
            infos = _cached_infos(key_data, functools.partial(_judged, compile_spec, aot.gate_problems))
            prefill_combo = prefill_aot.DtypeCombo("float16", ssm_dtype)
            prefill_key = [triton.__version__, [k.cache_key for k in prefill_sources], repr(prefill_entry)]
            prefill_key += [repr(prefill_combo), repr(prefill_variant), repr(prefill_shape)]
            compile_prefill = functools.partial(
                prefill_aot.compile_prefill_kernels, prefill_entry, prefill_combo, prefill_variant, prefill_shape
            )
            infos += _cached_infos(prefill_key, functools.partial(_judged, compile_prefill, prefill_aot.gate_problems))
            results += [_caovan_verdict(info, f"{shape.id}, {ssm_dtype} state") for info in infos]
    return results


def kernels_part(*, deep: bool = False, log=print) -> dict[str, Any]:
    """The whole ``kernels`` part for the installed vLLM (imports it; run in a fresh process)."""
    import triton

    from ..adapters.registry import recognised_family

    started = time.perf_counter()
    # The family probe imports the GDN module and with it the kernels it uses: under the 7.5 view, as a 2080 Ti
    # process imports them. Then the rest of that family's kernel packages (lazily imported ones), under the view
    # too. Only the family's own FLA package: 0.27 - 0.31 ship two, and importing both registers ops twice.
    already = imported_kernel_modules(kernel_packages())
    with sm75_device_view():
        family, refusal = recognised_family()  # RuntimeError where the release lands in no family: the tier fails
    not_imported = import_kernel_packages_for_device([family.fla_ops_module, MAMBA_OPS_PACKAGE])
    # The layer rig builds the layers of the families caovan serves: a refused one's kernels are not reached.
    recorded = [] if refusal else record_all()
    calls = group_calls(recorded)
    log(f"sm75: {sum(len(r.launches) for r in recorded)} launches recorded, {len(calls)} kernels")
    kernels = judge_kernels(calls, deep=deep, log=log)
    ours = caovan_kernels(family.ssm_layout)
    combinations = [
        {
            "shape": r.shape.id,
            "ssm_dtype": r.ssm_dtype,
            "layout": r.layout,
            "launches": len(r.launches),
            "error": r.error,
        }
        for r in recorded
    ]
    unreached = [f"{c['shape']}, {c['ssm_dtype']} state: {c['error']}" for c in combinations if c["error"]]
    if refusal:
        unreached.append(f"every shape: the layer rig builds served families only, and {refusal}")
    verdicts = [k["verdict"] for k in kernels] + [k["verdict"] for k in ours] + ["unreached"] * bool(unreached)
    return {
        "target": {"device": RTX_2080_TI.name, "arch": f"sm_{RTX_2080_TI.arch}", "max_shared_mem": 65536},
        "triton": triton.__version__,
        "family": family.family_id,
        # What the tier's tests check the recording against, from the family record (no vLLM import there).
        "family_refusal": refusal,
        "family_spec_path": [function for function, _ in family.spec_path],
        "combinations": combinations,
        "unreached": unreached,
        "imported_before_the_device_view": already,
        "not_importable": not_imported,
        "kernels": kernels,
        "caovan": ours,
        "deep": deep,
        "verdict": _worst(verdicts) if kernels else "unreached",
        "seconds": round(time.perf_counter() - started, 1),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m caovan.sm75.kernel_verdicts", description=__doc__.split("\n")[0])
    parser.add_argument("--out", required=True, help="where to write the kernels part (JSON)")
    parser.add_argument("--deep", action="store_true", help="compile every config of every call (slow)")
    args = parser.parse_args(argv)
    document = kernels_part(deep=args.deep, log=lambda line: print(line, file=sys.stderr, flush=True))
    write_text_atomic(args.out, json.dumps(document, indent=2, sort_keys=True) + "\n")
    print(f"sm75 kernels: {document['verdict']} ({len(document['kernels'])} kernels, {document['seconds']} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
