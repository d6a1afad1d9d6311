"""``caovan bench kernels``/``prefill``: our spec-decode and prefill kernels vs vLLM's own path, timed and checked.

Not to be confused with Turbo3's ``caovan-sm75-benchmark`` (end-to-end tokens/s through a running
server's OpenAI API); this one times the GDN spec-decode core alone, on synthetic inputs.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import shlex
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from caovan.jsonfile import output_path_problem

if TYPE_CHECKING:
    from caovan.bench.e2e import E2ESettings

from . import cuda_visible_note
from .served_runs import distinct_counts, shared_server_options

NAME = "bench"
HELP = (
    "time caovan's GDN kernels (spec decode, prefill) against vLLM's own path (needs a CUDA GPU), or summarise a record"
)
ALIAS = None
EPILOG = (
    "Exit status: 0 done; 1 kernels: a case failed to run or our error exceeds vLLM's by more than the floor, "
    "tune: no configuration valid, layer: a case failed or caovan's layer did not take the step, prefill: a case "
    "failed to run; 2 the bench cannot run (no CUDA GPU, vLLM missing, caovan's kernels not importable, a bad "
    "option or --json FILE), the record could not be written after the run (the table is printed first) or "
    "summary's record cannot be used; 130 interrupted (Ctrl-C; no record written)."
)


def _json_option(parser: argparse.ArgumentParser) -> None:
    # Kept as given (not a Path): Path("") is ".", a folder that would pass for a place to write to.
    parser.add_argument("--json", metavar="FILE", help="write the full record (JSON) to FILE")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from caovan.bench.cases import BENCH_CASE_SETS
    from caovan.bench.model_folders import ARCHITECTURES

    targets = parser.add_subparsers(dest="bench_target", metavar="TARGET", required=True)
    k = targets.add_parser(
        "kernels",
        help="ours vs vLLM's spec-decode core: eager and CUDA-graph time, DRAM roofline, errors",
        description=(
            "For every case, on copies of the same random inputs: eager host-inclusive time, "
            "CUDA-graph replay time, DRAM roofline (bytes / measured copy bandwidth) and max abs "
            "error vs the float64 reference, for caovan's kernels and for vLLM's own path. "
            "Prints a table; "
            "--json writes the full record. Exit 1 when a case fails to run or our error exceeds "
            "vLLM's by more than the documented floor."
        ),
    )
    _json_option(k)
    k.add_argument(
        "--cases",
        choices=BENCH_CASE_SETS,
        default="all",
        help="small shapes, model shapes (Qwen3.6-27B, Qwen3-Next-80B at TP=2), or all (default)",
    )
    k.add_argument("--quick", action="store_true", help="fewer cases and iterations (a smoke run)")
    t = targets.add_parser(
        "tune",
        help="measure launch configurations of caovan's kernels on this GPU (CUDA-graph time)",
        description=(
            "Sweep the QK kernel's num_warps and the V/GDN kernel's BV x num_warps at the model shapes, each "
            "configuration checked against the float64 reference first; prints the ranking and the best "
            "configuration; --json records every number (the source of an entry in launch_configs.json)."
        ),
    )
    _json_option(t)
    ly = targets.add_parser(
        "layer",
        help="vLLM's GDN layer core vs caovan's override, as a decode step calls them (eager, host-inclusive)",
        description=(
            "Two real GatedDeltaNetAttention layers built by vLLM (in-tree and caovan's, same weights and caches) "
            "at the per-GPU head shapes of Qwen3.6-27B and Qwen3-Next-80B at TP=2; for pure speculative-decode "
            "steps made by vLLM's metadata builder, the eager host-inclusive time of each layer's _forward_core. "
            "--json writes the record. Exit 1 when a case fails or caovan's layer does not take the step."
        ),
    )
    _json_option(ly)
    ly.add_argument("--quick", action="store_true", help="one case, fewer iterations (a smoke run)")
    m = targets.add_parser(
        "summary",
        help="the figures docs quote from a `bench kernels --json` record (no GPU needed)",
        description=(
            "From a record of `caovan bench kernels --json`: time and speedup ranges with geometric means and "
            "threshold counts over the model cases and over all cases, the cases under the targets (2x vLLM's "
            "CUDA-graph time, 3x its eager time) with their DRAM roofline, and with --against how each "
            "implementation's times moved against an older record."
        ),
    )
    # Kept as given (not a Path), as --json is: Path("") is ".", and "'.': cannot read: Is a directory" names a
    # folder the user never wrote.
    m.add_argument("record", help="a JSON file written by `caovan bench kernels --json`")
    m.add_argument("--against", metavar="OLD", help="an older record of the same cases to compare with")
    p = targets.add_parser(
        "prefill",
        help="caovan's GDN prefill vs vLLM's Triton prefill (FLA alone and the whole branch): time and errors",
        description=(
            "For every shape x prompt length x batch (B varlen sequences of B x L tokens in all, half starting from "
            "a cached state): the warm, host-inclusive time per call of caovan's gdn_prefill (reading and writing the "
            "cache slots), of FLA's chunk_gated_delta_rule alone on a gathered initial state (vllm_fla) and of "
            "vLLM's whole prefill branch (gather, FLA, scatter: vllm_branch), caovan's speedup over each, and "
            "caovan's and vLLM's max abs error vs the float64 oracle. Prints a table; --json writes the record. On "
            "a CPU it runs only under TRITON_INTERPRET=1 (tests, --shapes tiny)."
        ),
    )
    _json_option(p)
    add_prefill_arguments(p)
    mf = targets.add_parser(
        "model-folder",
        help="write a released GDN architecture's config and a tokenizer, to serve with dummy weights",
        description=(
            "Writes FOLDER/config.json with the text architecture of a released model, from its public config "
            "(a tiny vision tower beside it, with its processor settings), and a byte-level BPE tokenizer, so that "
            "`caovan-vllm-serve FOLDER --load-format dummy` serves it with no weights and no network (the "
            "end-to-end records). Refuses a FOLDER that exists and is not an empty folder."
        ),
    )
    mf.add_argument("architecture", choices=sorted(ARCHITECTURES), help="which released architecture")
    mf.add_argument("folder", help="the model folder to create")
    e2e = targets.add_parser(
        "e2e",
        help="serve a model with caovan off then on (caovan serve) and compare decode tokens/s (caovan benchmark)",
        description=(
            "For one cudagraph mode: `caovan serve MODEL [SERVE_ARGS]` with caovan off, `caovan benchmark` "
            "decode-heavy at every --concurrency, the server stopped; then the same with caovan on, each benchmark "
            "compared with the baseline of its concurrency. Writes OUT/<mode>/: the benchmark records, the server "
            "logs and e2e.json (commands, GPU, versions, medians and ratios). Warm only: start-up, graph capture and "
            "first-request compiles are not timed."
        ),
    )
    e2e.add_argument("model", help="the model caovan serve loads (a folder or a Hugging Face name)")
    e2e.add_argument("--out", required=True, metavar="DIR", help="where OUT/<mode>/ is written")
    e2e.add_argument(
        "--cudagraph-mode",
        choices=("PIECEWISE", "FULL_AND_PIECEWISE"),
        default="PIECEWISE",
        help="vLLM's cudagraph_mode for both runs (default: PIECEWISE, what SM75 users run)",
    )
    e2e.add_argument("--concurrency", default="1,4,8", metavar="N[,N...]", help="requests in flight (default: 1,4,8)")
    e2e.add_argument("--repeats", type=int, default=2, metavar="N", help="benchmark repeats, at least 2 (default: 2)")
    e2e.add_argument("--max-tokens", type=int, default=256, metavar="N", help="tokens out per request (default: 256)")
    e2e.add_argument(
        "--requests-per-slot",
        type=int,
        default=2,
        metavar="N",
        help="requests per repeat = concurrency x N (default: 2)",
    )
    e2e.add_argument(
        "--additional-config",
        default="{}",
        metavar="JSON",
        help='vLLM additional_config keys for both runs, e.g. \'{"gdn_prefill_backend": "triton"}\'; caovan\'s '
        "switch is set per run",
    )
    e2e.add_argument("--ready-timeout-s", type=float, default=1800.0, metavar="S", help="start-up limit per server")
    e2e.add_argument("--port", type=int, metavar="PORT", help="the servers' port (default: a free one)")
    e2e.add_argument(
        "--profile",
        action="store_true",
        help="also profile one warm decode request per run with vLLM's torch profiler: OUT/<mode>/<run>-profile.txt "
        "says where a step's GPU time goes (GDN spec core, attention, GEMMs, the rest)",
    )
    e2e.add_argument(
        "--resume",
        action="store_true",
        help="keep a run (caovan off or on) that an earlier call finished in OUT/<mode>/ instead of repeating it",
    )
    e2e.add_argument(
        "--only",
        choices=("baseline", "caovan"),
        help="start that run's server alone (one server per call of a time-limited host), keeping the other run "
        "from an earlier call as --resume does; e2e.json is written once both runs are there",
    )
    e2e.add_argument(
        "--serve-args",
        default="",
        metavar="'ARGS'",
        help="caovan serve (vllm serve) arguments for both runs, in one quoted string, e.g. '--load-format dummy "
        "--dtype half --max-model-len 4096'",
    )
    from .bench_ttft import add_ttft_parser

    ttft = add_ttft_parser(targets)
    for target in (k, t, ly, p, m, mf, e2e, ttft):
        target.epilog = EPILOG  # `caovan bench kernels --help` shows the exit codes too


def add_prefill_arguments(parser: argparse.ArgumentParser) -> None:
    from caovan.bench import prefill_cases as pc
    from caovan.bench.prefill import PrefillSettings

    base = PrefillSettings()
    parser.add_argument(
        "--shapes",
        default=",".join(pc.DEFAULT_SHAPES),
        metavar="NAME[,NAME...]",
        help=f"per-GPU GDN shapes, of: {', '.join(pc.PREFILL_SHAPES)} (default: %(default)s)",
    )
    parser.add_argument(
        "--lengths",
        default=",".join(map(str, pc.DEFAULT_LENGTHS)),
        metavar="L[,L...]",
        help="prompt lengths, tokens per sequence on average (default: %(default)s)",
    )
    parser.add_argument(
        "--batches",
        default=",".join(map(str, pc.DEFAULT_BATCHES)),
        metavar="B[,B...]",
        help="sequences per batch; B > 1: unequal lengths summing to B x L, 4 of them 0.5, 0.75, 1.25 and 1.5 x L "
        "(default: %(default)s)",
    )
    parser.add_argument("--dtype", choices=pc.ACT_DTYPES, default="float16", help="activations (default: float16)")
    parser.add_argument(
        "--state-dtype", choices=pc.STATE_DTYPES, default="float32", help="the SSM state cache (default: float32)"
    )
    parser.add_argument(
        "--warmup",
        type=int,
        default=base.warmup,
        metavar="N",
        help="untimed calls per side first (default: %(default)s)",
    )
    parser.add_argument(
        "--iters",
        type=int,
        default=base.iters,
        metavar="N",
        help="timed back-to-back calls per run (default: %(default)s)",
    )
    parser.add_argument(
        "--repeats",
        type=int,
        default=base.repeats,
        metavar="N",
        help="timed runs per side; the median is reported (default: %(default)s)",
    )
    parser.add_argument(
        "--max-reference-tokens",
        type=int,
        default=base.max_reference_tokens,
        metavar="N",
        help="above N tokens in a case, no float64 oracle (it runs token by token): errors null (default: %(default)s)",
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of the random inputs (default: 0)")
    parser.add_argument(
        "--no-vllm",
        action="store_true",
        help="time caovan's prefill alone, without vLLM (errors against float64 only; its cache in vLLM's (V, K) "
        "layout from 0.16): for a GPU host that has torch and Triton but no vLLM",
    )
    parser.add_argument(
        "--launch-config",
        metavar="JSON",
        help='caovan\'s launch options as one launch_configs.json entry (e.g. \'{"capability": [9, 0], "wy": '
        '{"num_warps": 4, "num_stages": 1}, "state": {"num_warps": 4, "num_stages": 1, "BV": 64}}\') '
        "in place of the GPU's own entry; recorded with the results (default: the GPU's entry)",
    )
    parser.add_argument(
        "--path",
        choices=("auto", "fused", "chunked"),
        default="auto",
        help="caovan's path: the entry's own choice by tokens per call (auto), or the fused or the chunked path at "
        "every length, to time one against the other (default: auto)",
    )


def _write_record(target: str, report: dict) -> bool:
    """A bench record as strict JSON (NaN/inf as strings), and where it went; ``False`` (and one error line) when it
    cannot be written, e.g. the folder became read-only or the disk filled up during the run."""
    from caovan.bench.kernels import _json_safe
    from caovan.jsonfile import write_record

    # Atomic: a record cut short by a full disk or an interrupt would pass for one until summary reads it.
    problem = write_record(target, json.dumps(_json_safe(report), indent=2) + "\n")
    if problem is not None:
        print(f"caovan {NAME}: error: --json {target}: {problem}", file=sys.stderr)
        return False
    print(f"wrote {target}", file=sys.stderr)
    return True


def _error(message: str, exit_code: int = 2) -> int:
    print(f"caovan {NAME}: error: {message}", file=sys.stderr)
    return exit_code


def run(args: argparse.Namespace) -> int:
    try:
        return _run_target(args)
    except KeyboardInterrupt:  # a run of minutes stopped on purpose: one line, not a traceback
        return _error("interrupted (Ctrl-C); no record written", 130)


def _run_target(args: argparse.Namespace) -> int:
    if args.bench_target == "kernels":
        return run_kernels(args)
    if args.bench_target == "tune":
        return run_tune(args)
    if args.bench_target == "summary":
        return run_summary(args)
    if args.bench_target == "layer":
        return run_layer(args)
    if args.bench_target == "prefill":
        return run_prefill(args)
    if args.bench_target == "model-folder":
        return run_model_folder(args)
    if args.bench_target == "e2e":
        return run_e2e(args)
    if args.bench_target == "ttft":
        from .bench_ttft import run_ttft

        return run_ttft(args, _error)
    return _error(f"unknown bench target {args.bench_target!r}")  # argparse already refuses these


def _gpu_problem(args: argparse.Namespace) -> str | None:
    json_problem = output_path_problem("--json", args.json)
    if json_problem:
        return json_problem
    command = f"bench {args.bench_target}"
    try:
        import torch
    except ImportError as exc:
        return f"PyTorch is not importable ({exc}); {command} runs on a CUDA GPU"
    if not torch.cuda.is_available():
        return f"no CUDA GPU visible (torch.cuda.is_available() is False{cuda_visible_note()}); {command} runs on a GPU"
    try:  # every target runs them (layer through caovan's layer): a broken Triton is a bench that cannot run
        from caovan.kernels.gdn_spec_decode import gdn_spec_decode  # noqa: F401 - imports Triton and the kernels
    except ImportError as exc:
        return f"caovan's kernels are not importable (broken install?): {exc}"
    return None


def run_tune(args: argparse.Namespace) -> int:
    problem = _gpu_problem(args)
    if problem:
        return _error(problem)

    import torch

    from caovan.bench import kernels as kb
    from caovan.bench.tune import run_tune as tune
    from caovan.kernels.gdn_spec_decode import gdn_spec_decode
    from caovan.kernels.gdn_spec_decode.launch_configs import config_for
    from caovan.kernels.gdn_spec_decode.naive import gdn_spec_decode_reference

    base = config_for(torch.cuda.get_device_capability())
    report = tune(ours=gdn_spec_decode, reference=gdn_spec_decode_reference, base=base)
    report = {"command": shlex.join(sys.argv), **kb.environment(), **report}
    ranked = sorted((r for r in report["results"] if r["valid"]), key=lambda r: r["geomean_graph_us"])
    for r in ranked:
        print(f"{r['geomean_graph_us']:8.2f} us  {r['label']}")
    for r in report["results"]:
        if not r["valid"]:
            print(f"  invalid: {r['label']}: {r['problems']}")
    best = report["best"]
    if best is not None:
        # vs_base is None when the base configuration itself failed the reference check: "x0.00" would read as a ratio
        versus = "the base is invalid" if best["vs_base"] is None else f"x{best['vs_base']:.2f} vs base"
        print(f"best: {best['label']} ({best['geomean_graph_us']:.2f} us geomean, {versus})")
    if args.json is not None and not _write_record(args.json, report):
        return 2
    return 0 if best is not None else 1


def run_kernels(args: argparse.Namespace) -> int:
    problem = _gpu_problem(args)
    if problem:
        return _error(problem)

    from caovan.bench import kernels as kb
    from caovan.bench.cases import bench_cases
    from caovan.bench.vllm_spec_path import VllmSpecCore

    try:
        vllm_core = VllmSpecCore()
    except ImportError as exc:
        return _error(f"vLLM is needed for the side-by-side bench: {exc}")
    from caovan.kernels.gdn_spec_decode import gdn_spec_decode
    from caovan.kernels.gdn_spec_decode.naive import gdn_spec_decode_reference

    settings = kb.QUICK_SETTINGS if args.quick else kb.BenchSettings()
    cases = bench_cases(args.cases, quick=args.quick)
    env = kb.environment()
    print(
        f"GPU: {env['gpu']['name']} (sm_{env['gpu']['capability'].replace('.', '')}); {len(cases)} cases",
        file=sys.stderr,
    )
    bandwidth = kb.measure_copy_bandwidth(settings)
    print(f"device-to-device copy bandwidth: {bandwidth / 1e9:.0f} GB/s", file=sys.stderr)
    rows = kb.run_cases(
        cases,
        ours=gdn_spec_decode,
        vllm=vllm_core,
        reference=gdn_spec_decode_reference,
        bandwidth=bandwidth,
        settings=settings,
    )
    report = kb.build_report(
        rows, env=env, bandwidth=bandwidth, settings=settings, case_set=args.cases, quick=args.quick
    )
    print(kb.format_table(rows))
    s = report["summary"]
    print(
        f"{s['cases']} cases, {s['errors']} failed to run, "
        f"{s['accuracy_rule_failures']} over vLLM's error; "
        f"geomean speedup eager x{s['geomean_speedup_eager'] or float('nan'):.2f}, "
        f"graph x{s['geomean_speedup_graph'] or float('nan'):.2f}"
    )
    if args.json is not None and not _write_record(args.json, report):
        return 2
    return 1 if s["errors"] or s["accuracy_rule_failures"] else 0


def prefill_plan(args: argparse.Namespace) -> tuple[list, object, dict] | str:
    """``bench prefill``'s cases, settings and options as given, or what is wrong with the arguments (torch-free)."""
    from caovan.bench import prefill_cases as pc
    from caovan.bench.prefill import PrefillSettings

    try:
        shapes = pc.parse_shapes(args.shapes)
        lengths = pc.parse_counts("--lengths", args.lengths)
        batches = pc.parse_counts("--batches", args.batches)
        pc.check_splits(lengths, batches)
    except ValueError as exc:
        return str(exc)
    for option, value, least in (
        ("--warmup", args.warmup, 0),
        ("--iters", args.iters, 1),
        ("--repeats", args.repeats, 1),
        ("--max-reference-tokens", args.max_reference_tokens, 0),
    ):
        if value < least:
            return f"{option} {value}: at least {least}"
    settings = PrefillSettings(
        warmup=args.warmup, iters=args.iters, repeats=args.repeats, max_reference_tokens=args.max_reference_tokens
    )
    launch_config = None
    if args.launch_config is not None:
        from caovan.kernels.gdn_prefill.launch_configs import load_entry

        try:
            launch_config = load_entry("--launch-config", json.loads(args.launch_config))
        except (json.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
            return f"--launch-config: {type(exc).__name__}: {exc}"
    cases = pc.prefill_cases(
        shapes, lengths, batches, act_dtype=args.dtype, state_dtype=args.state_dtype, seed=args.seed
    )
    options = {
        "shapes": list(shapes),
        "lengths": list(lengths),
        "batches": list(batches),
        "act_dtype": args.dtype,
        "state_dtype": args.state_dtype,
        "seed": args.seed,
        "launch_config": None if launch_config is None else dataclasses.asdict(launch_config),
        **({"sides": ["caovan"]} if args.no_vllm else {}),
    }
    return cases, settings, options


def _prefill_device(args: argparse.Namespace) -> tuple[str | None, str | None, bool]:
    """(problem, device, interpreted): a CUDA GPU, or the CPU where caovan's prefill kernels were imported under
    TRITON_INTERPRET=1."""
    import os

    json_problem = output_path_problem("--json", args.json)
    if json_problem:
        return json_problem, None, False
    try:
        import torch
    except ImportError as exc:
        return f"PyTorch is not importable ({exc}); bench prefill runs on a CUDA GPU", None, False
    no_gpu = (
        f"no CUDA GPU visible (torch.cuda.is_available() is False{cuda_visible_note()}); bench prefill runs on a GPU "
        "(on the CPU only under TRITON_INTERPRET=1, for tests)"
    )
    if os.environ.get("TRITON_INTERPRET", "0") in ("", "0") and not torch.cuda.is_available():
        return no_gpu, None, False
    try:
        from caovan.kernels.gdn_prefill import entry
    except ImportError as exc:
        return f"caovan's prefill kernels are not importable (broken install?): {exc}", None, False
    if entry.INTERPRETED:
        return None, "cpu", True
    if not torch.cuda.is_available():
        return no_gpu, None, False
    return None, f"cuda:{torch.cuda.current_device()}", False


def run_prefill(args: argparse.Namespace) -> int:
    plan = prefill_plan(args)
    if isinstance(plan, str):
        return _error(plan)
    cases, settings, options = plan
    problem, device, interpreted = _prefill_device(args)
    if problem:
        return _error(problem)
    family = refusal = vllm = None
    if not args.no_vllm:
        try:
            from caovan.adapters.registry import recognised_family
            from caovan.bench.vllm_prefill_path import VllmPrefill

            family, refusal = recognised_family()
            vllm = VllmPrefill(family)
        except Exception as exc:  # vLLM missing, or a release caovan recognises in no family
            return _error(
                f"vLLM is needed for the prefill bench: {type(exc).__name__}: {exc} (--no-vllm times caovan alone)"
            )
    from caovan.bench import prefill as pb
    from caovan.bench import prefill_record as pr
    from caovan.kernels.gdn_prefill import gdn_prefill
    from caovan.kernels.gdn_prefill.naive import gdn_prefill_reference

    env = pr.environment(device, interpreted=interpreted)
    family_facts = None
    layout = pb.CacheLayout(ssm_layout="vk", null_slot_max=0)  # vLLM's from 0.20 on, for --no-vllm
    against = "caovan alone (--no-vllm)"
    if family is not None:
        family_facts = {
            "family_id": family.family_id,
            "label": family.label,
            "fla_ops_module": family.fla_ops_module,
            "ssm_layout": family.ssm_layout,
            "null_slot_max": family.null_slot_max,
            "refusal": refusal,
        }
        layout = pb.CacheLayout(ssm_layout=family.ssm_layout, null_slot_max=family.null_slot_max)
        against = f"vLLM {env['versions']['vllm']} ({family.label} {family.family_id})"
    where = (
        "the Triton interpreter (CPU; times are not GPU times)"
        if interpreted
        else (f"{env['gpu']['name']} (sm_{env['gpu']['capability'].replace('.', '')})")
    )
    print(f"{where}; {against}; {len(cases)} cases", file=sys.stderr)
    if refusal is not None:
        print(f"note: {refusal} (its prefill is timed all the same)", file=sys.stderr)
    import torch

    from caovan.kernels.gdn_prefill.entry import launch_config
    from caovan.kernels.gdn_prefill.launch_configs import load_entry, path_forced

    given = options["launch_config"] is not None
    if given:
        config = load_entry("--launch-config", json.loads(args.launch_config))
    else:
        config = launch_config(torch.device(device))
    try:
        config = path_forced(config, args.path)
    except ValueError as exc:
        return _error(f"--path {args.path}: {exc}")
    options.update(launch_config=dataclasses.asdict(config), launch_config_given=given, path=args.path)
    ours = functools.partial(gdn_prefill, config=config)
    rows = pb.run_cases(
        cases,
        device=device,
        ours=ours,
        vllm=vllm,
        reference=gdn_prefill_reference,
        layout=layout,
        settings=settings,
    )
    from caovan.kernels.gdn_prefill.launch_configs import takes_chunked_path

    for row in rows:
        if not row.get("error"):
            row["caovan_path"] = "chunked" if takes_chunked_path(config, row["case"]["total_tokens"]) else "fused"
    from caovan.bench.prefill_sm75 import format_sm75, sm75_section

    sm75 = sm75_section(cases)
    report = pr.build_report(rows, env=env, vllm_family=family_facts, settings=settings, options=options, sm75=sm75)
    print(pr.format_table(rows))
    print(format_sm75(sm75))
    s = report["summary"]
    print(
        f"{s['cases']} cases, {s['errors']} failed to run; geomean speedup of caovan "
        f"x{s['geomean_speedup_vs_vllm_fla'] or float('nan'):.2f} over FLA alone, "
        f"x{s['geomean_speedup_vs_vllm_branch'] or float('nan'):.2f} over vLLM's prefill branch"
    )
    if args.json is not None and not _write_record(args.json, report):
        return 2
    return 1 if s["errors"] else 0


def run_summary(args: argparse.Namespace) -> int:
    from caovan.bench.record_summary import RecordError, format_report, load_record

    for name, given in (("RECORD", args.record), ("--against", args.against)):
        if given == "":
            return _error(f"{name} '': an empty file name")
    try:
        record = load_record(Path(args.record))
        old = load_record(Path(args.against)) if args.against is not None else None
    except RecordError as exc:
        return _error(str(exc))
    print(format_report(record, old))
    return 0


def run_model_folder(args: argparse.Namespace) -> int:
    from caovan.bench.model_tokenizer import write_architecture

    folder = Path(args.folder)
    if args.folder == "":
        return _error("FOLDER '': an empty folder name")
    if folder.exists() and (not folder.is_dir() or any(folder.iterdir())):
        return _error(f"FOLDER {args.folder}: exists and is not an empty folder (nothing written)")
    try:
        write_architecture(args.architecture, folder)
    except OSError as exc:
        return _error(f"FOLDER {args.folder}: cannot write it: {exc.strerror or exc}")
    print(f"{args.architecture}: {folder / 'config.json'} and a tokenizer; serve it with --load-format dummy")
    return 0


def run_layer(args: argparse.Namespace) -> int:
    problem = _gpu_problem(args)
    if problem:
        return _error(problem)
    try:
        from caovan.bench.vllm_spec_path import load_vllm_gdn_module

        load_vllm_gdn_module()
    except ImportError as exc:
        return _error(f"vLLM is needed for the layer bench: {exc}")

    from caovan.bench import kernels as kb
    from caovan.bench import layer as lb

    settings = kb.QUICK_SETTINGS if args.quick else kb.BenchSettings()
    cases = lb.layer_cases(quick=args.quick)
    rows = lb.run_layer_cases(cases, settings, progress=lambda line: print(line, file=sys.stderr, flush=True))
    summary = lb.summarize(rows)
    print(lb.format_rows(rows))
    geo = summary["geomean_speedup_eager"]
    print(f"{summary['cases']} cases, {summary['errors']} failed; geomean speedup x{geo or float('nan'):.2f}")
    if args.json is not None:
        report = {
            "schema": lb.JSON_SCHEMA,
            "command": shlex.join(sys.argv),
            **kb.environment(),
            "settings": {**dataclasses.asdict(settings), "quick": args.quick, "act_dtype": lb.ACT_DTYPE},
            "summary": summary,
            "cases": rows,
        }
        if not _write_record(args.json, report):
            return 2
    return 1 if summary["errors"] else 0


def e2e_settings(args: argparse.Namespace) -> E2ESettings | str:
    """The checked settings of ``bench e2e``, or what is wrong with the arguments."""
    from caovan.bench.e2e import E2ESettings

    concurrency = distinct_counts("--concurrency", args.concurrency)
    if isinstance(concurrency, str):
        return concurrency
    for option, value, least in (("--repeats", args.repeats, 2), ("--max-tokens", args.max_tokens, 2)):
        if value < least:
            return f"{option} {value}: at least {least}"
    if args.requests_per_slot < 1:
        return f"--requests-per-slot {args.requests_per_slot}: at least 1"
    shared = shared_server_options(args.additional_config, args.serve_args)
    if isinstance(shared, str):
        return shared
    extra, serve_args = shared
    return E2ESettings(
        model=args.model,
        out_dir=Path(args.out),
        cudagraph_mode=args.cudagraph_mode,
        concurrency=concurrency,
        repeats=args.repeats,
        max_tokens=args.max_tokens,
        requests_per_slot=args.requests_per_slot,
        additional_config=extra,
        serve_args=tuple(serve_args),
        ready_timeout_s=args.ready_timeout_s,
        port=args.port,
        profile=args.profile,
    )


def run_e2e(args: argparse.Namespace) -> int:
    from caovan.bench.e2e import E2EError, profiler_problem, run_e2e

    settings = e2e_settings(args)
    if isinstance(settings, str):
        return _error(settings)
    problem = profiler_problem() if settings.profile else None
    if problem is not None:
        return _error(problem)
    try:
        record = run_e2e(settings, resume=args.resume, only=args.only)
    except E2EError as exc:
        return _error(str(exc), 1)
    if record is None:
        return 0
    for row in record["summary"]:
        print(
            f"concurrency {row['concurrency']}: caovan {row['caovan_tok_s']['median']:.1f} tok/s against "
            f"{row['baseline_tok_s']['median']:.1f} with caovan off ({row['ratio']:.3f}x, medians of "
            f"{settings.repeats} repeats)"
        )
    print(f"wrote {settings.mode_dir / 'e2e.json'}", file=sys.stderr)
    return 0
