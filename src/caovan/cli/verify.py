"""``caovan verify`` (Turbo3: ``caovan-sm75-verify``): synthetic tensors through the kernels.

Runs caovan's spec-decode kernels on random inputs at the model shapes (Qwen3.6-27B and
Qwen3-Next-80B at TP=2, MTP 1/3/4, fp16 and fp32 SSM state) plus the batches a server produces
(null slots, CUDA-graph padding, mixed lengths, mixed prefill+spec), compares each with the float64
reference, and prints one PASS/FAIL line per case and a final ``[Caovan] verify=PASS|FAIL`` line
for the safety gate.
"""

from __future__ import annotations

import argparse
import functools

from . import cuda_visible_note, prog
from ._streams import report_failure

NAME = "verify"
HELP = "run caovan's kernels on synthetic tensors at model shapes vs the float64 reference (GPU)"
ALIAS = "caovan-sm75-verify"
EPILOG = (
    "Exit status: 0 every case PASS; 1 a case FAILs or the kernels are not importable; 2 verify cannot run "
    "(no CUDA GPU, a bad --device or --launch-config); 130 interrupted (Ctrl-C). Every exit but 0 ends with a "
    "[Caovan] verify=FAIL line, except for a command line that cannot be parsed at all (an unknown option, an "
    "option without its value): exit 2 with a usage message."
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--device",
        default="cuda",
        help="torch device to verify on (default: cuda, i.e. the first visible GPU; "
        "choose GPUs with CUDA_VISIBLE_DEVICES as Turbo3 taught)",
    )
    parser.add_argument(
        "--launch-config",
        metavar="ARCH",
        help="run with this architecture's entry of launch_configs.json (e.g. sm75, what an RTX 2080 Ti runs) "
        "instead of the one this GPU picks, to check another entry's kernels on the GPU at hand",
    )


def _not_run(message: str) -> str:
    # Turbo3's safety gate greps stdout for the verdict line: every exit that is not a PASS ends with one.
    return f"[Caovan] verify=FAIL (not run: {message})"


def _error(args: argparse.Namespace, message: str, exit_code: int = 2) -> int:
    report_failure(prog(args, NAME), message, _not_run(message))
    return exit_code


def _launch_config_problem(entry: str | None) -> str | None:
    if entry is None:
        return None
    try:
        from caovan.kernels.gdn_spec_decode.launch_configs import LAUNCH_CONFIGS
    except ImportError:
        return None  # the kernels' import, after the GPU check, says what is broken
    if entry in LAUNCH_CONFIGS:
        return None
    return f"--launch-config {entry!r}: launch_configs.json has no such entry ({', '.join(sorted(LAUNCH_CONFIGS))})"


def run(args: argparse.Namespace) -> int:
    try:
        return _verify(args)
    except KeyboardInterrupt:
        # The gate reads the verdict line: an interrupted run must not end with none (or after some PASS lines).
        return _error(args, "interrupted (Ctrl-C)", 130)
    except BrokenPipeError:
        raise  # stdout is gone (| head): nowhere to print the verdict; the caller ends quietly
    except Exception as exc:  # e.g. a CUDA driver error outside any case: the verdict line, then the traceback
        print(_not_run(f"{type(exc).__name__}: {exc}"), flush=True)
        raise


def _verify(args: argparse.Namespace) -> int:
    try:
        import torch
    except ImportError as exc:
        return _error(args, f"PyTorch is not importable ({exc}); verify runs the kernels on a CUDA GPU")
    problem = _launch_config_problem(args.launch_config)
    if problem:  # before the GPU check: a misspelt entry is found on the machine where the command is written
        return _error(args, problem)
    if not torch.cuda.is_available():
        return _error(
            args,
            f"no CUDA GPU visible (torch.cuda.is_available() is False{cuda_visible_note()}); "
            "verify runs the kernels on a GPU",
        )
    try:
        device = torch.device(args.device)
    except RuntimeError as exc:
        return _error(args, f"--device {args.device!r}: {exc}")
    if device.type != "cuda":
        return _error(args, f"--device {args.device!r}: verify runs on a CUDA device")
    if device.index is not None and device.index >= torch.cuda.device_count():
        return _error(args, f"--device {args.device!r}: only {torch.cuda.device_count()} CUDA device(s) visible")

    from caovan.bench.cases import VERIFY_CASES

    try:
        from caovan.kernels.gdn_spec_decode import gdn_spec_decode
        from caovan.kernels.gdn_spec_decode.launch_configs import LAUNCH_CONFIGS, config_for
        from caovan.kernels.gdn_spec_decode.naive import gdn_spec_decode_reference
    except ImportError as exc:
        return _error(args, f"caovan's kernels are not importable (broken install?): {exc}", 1)

    idx = device.index if device.index is not None else torch.cuda.current_device()
    props = torch.cuda.get_device_properties(idx)
    print(f"device cuda:{idx} {props.name} (sm_{props.major}{props.minor})")
    try:
        own_entry, own_entry_note = config_for((props.major, props.minor)).arch, "this GPU's entry"
    except ValueError as exc:  # a GPU older than the kernels' target: every case fails and says why
        own_entry, own_entry_note = "none", str(exc)
    kernel = gdn_spec_decode
    entry = own_entry
    if args.launch_config is None:
        print(f"launch configuration: {entry} ({own_entry_note})")
    else:
        entry = args.launch_config
        kernel = functools.partial(gdn_spec_decode, launch_config=LAUNCH_CONFIGS[entry])
        print(f"launch configuration: {entry} (--launch-config; this GPU's own entry is {own_entry})")
    failures = verify_cases(VERIFY_CASES, torch.device("cuda", idx), kernel, gdn_spec_decode_reference)
    total = len(VERIFY_CASES)
    verdict = "PASS" if failures == 0 else "FAIL"
    print(f"[Caovan] verify={verdict} cases={total - failures}/{total} device={props.name} launch_config={entry}")
    return 0 if failures == 0 else 1


def verify_cases(cases, device, kernel, reference, emit=print) -> int:
    """Check ``kernel`` against ``reference`` on every case; one PASS/FAIL line each; # failures."""
    from caovan.bench import accuracy
    from caovan.bench.cases import build_inputs

    failures = 0
    for case in cases:
        try:
            inputs = build_inputs(case, device)
            ref = accuracy.run_reference(reference, inputs)
            errors = accuracy.measure(kernel, inputs, ref)
            problems = accuracy.check_standalone(case, errors)
            detail = f"out_err={errors.out:.2e} ssm_err={errors.ssm_state:.2e} conv_err={errors.conv_state:.2e}"
        except Exception as exc:  # a crash is a FAIL of that case, the others still run
            problems, detail = [f"{type(exc).__name__}: {exc}"], "raised"
        if problems:
            failures += 1
            emit(f"FAIL {case.id}: {detail}; " + "; ".join(problems))
        else:
            emit(f"PASS {case.id}: {detail}")
    return failures
