"""``caovan serve MODEL [vllm serve arguments…]`` (Turbo3: ``caovan-vllm-serve``).

Runs ``vllm serve`` with the user's own arguments, caovan switched on, AutoSpec's MTP speculative config when the
user gave none, and vLLM's timeouts raised for the first compile (:mod:`caovan.serving.serve_command` decides;
this module prints the decisions and replaces itself with vLLM, so signals and the exit status are vLLM's own).
"""

from __future__ import annotations

import argparse
import difflib
import os
import sys

from caovan.plugin import guards
from caovan.plugin.options import FAIL, check_environment
from caovan.profiles.modes import MODES

from . import prog
from ._streams import stdout_to_stderr

NAME = "serve"
HELP = "run `vllm serve` with caovan on, AutoSpec's MTP speculative config and raised timeouts"
ALIAS = "caovan-vllm-serve"
EPILOG = (
    "MODEL comes first, or as --model MODEL anywhere, or as model: in a --config file. Every other argument goes "
    "to `vllm serve` as written, except the --caovan-* options, which may come anywhere before a `--`. vLLM's own "
    "help: caovan serve --help=all (or MODEL --help, --help=GROUP), run as written with nothing added. Exit "
    "status: vLLM's own once it runs; 0 after --caovan-dry-run; 2 the arguments cannot be handed to vLLM "
    "(no model, malformed --additional-config, a caovan key error, an unknown --caovan-* option, a CAOVAN_* "
    "setting vLLM's start-up would refuse, a --dtype, --kv-cache-dtype or attention backend the installed vLLM "
    "refuses on the visible GPU), vLLM is not installed here, or no CUDA GPU is (asked through NVML, as "
    "vLLM does; CUDA_VISIBLE_DEVICES read as CUDA reads it)."
)


def _add_caovan_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--caovan-dry-run",
        action="store_true",
        help="print the vllm serve command and the environment it would get, and exit without running it",
    )
    parser.add_argument(
        "--caovan-mtp",
        type=int,
        metavar="N",
        help="AutoSpec's number of speculative tokens per step (default 3, Turbo3's choice on 2x22 GB); "
        "an error where AutoSpec cannot add it (your own --speculative-config, --caovan-no-autospec, a model "
        "that is not a candidate or whose config.json is not local)",
    )
    parser.add_argument(
        "--caovan-profile",
        choices=tuple(MODES),
        default=None,
        help="how much the start-up profiles keep back: safe (more), normal or fast (less); default: "
        "CAOVAN_PROFILE, else normal",
    )
    parser.add_argument(
        "--caovan-no-profile",
        action="store_true",
        help="add none of the start-up profiles' sizing flags (DynamicTP, AutoMem, Elastic-KV)",
    )
    parser.add_argument(
        "--caovan-no-autospec",
        action="store_true",
        help="do not add a speculative config (caovan then has no spec-decode step to accelerate)",
    )


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "Start vLLM's OpenAI-compatible server for MODEL (a folder or a Hugging Face name) with caovan on: "
        '{"caovan": true, "caovan_mode": "auto"} merged into your --additional-config unless you set a caovan '
        "switch yourself; without a --speculative-config, AutoSpec adds MTP speculative decoding when "
        "`caovan check-model` finds the model a candidate (its config.json must be local: a folder or the "
        "Hugging Face cache); VLLM_ENGINE_ITERATION_TIMEOUT_S, VLLM_RPC_TIMEOUT and "
        "VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS raised unless set; DynamicTP and AutoMem add --tensor-parallel-size and "
        "--gpu-memory-utilization, Elastic-KV --kv-cache-dtype, --max-model-len, --max-num-seqs and "
        "--max-num-batched-tokens where you gave none, from the GPUs measured now, the model folder and the "
        "installed vLLM (yours are kept), and predict the KV cache vLLM will report."
    )
    _add_caovan_options(parser)
    # One positional takes everything: argparse cannot leave vLLM's own options (--model among them) alone, so
    # MODEL is found in it by caovan.serving.serve_flags.split_model and the top-level CLI hands the arguments over
    # unparsed (raw_namespace).
    parser.add_argument(
        "vllm_args",
        nargs=argparse.REMAINDER,
        metavar="MODEL [VLLM_ARGS ...]",
        help="the model vllm serve loads (a folder or a Hugging Face name), then arguments for vllm serve, as written",
    )


def raw_namespace(tokens: list[str]) -> argparse.Namespace:
    """What the parser above would give for ``tokens`` if argparse could pass unknown options through in order."""
    return argparse.Namespace(
        caovan_dry_run=False,
        caovan_mtp=None,
        caovan_no_autospec=False,
        caovan_no_profile=False,
        caovan_profile=None,
        vllm_args=list(tokens),
        _run=run,
    )


def _error(args: argparse.Namespace, message: str) -> int:
    print(f"{prog(args, NAME)}: error: {message}", file=sys.stderr)
    return 2


def _split_caovan_options(args: argparse.Namespace) -> list[str] | str:
    """The vLLM arguments with the --caovan-* options taken out into ``args``; a message for an unknown one."""
    from caovan.serving.serve_flags import flag_name, split_double_dash

    picker = argparse.ArgumentParser(add_help=False, allow_abbrev=False, exit_on_error=False)
    _add_caovan_options(picker)
    # What follows a "--" is vLLM's, untouched: split it off here rather than rely on how this Python's argparse
    # treats "--" in parse_known_args (it changed across 3.12 and 3.13).
    head, after = split_double_dash(args.vllm_args)
    try:
        ours, rest = picker.parse_known_args(head)
    except argparse.ArgumentError as exc:
        return str(exc)
    args.caovan_dry_run = args.caovan_dry_run or ours.caovan_dry_run
    args.caovan_no_autospec = args.caovan_no_autospec or ours.caovan_no_autospec
    args.caovan_no_profile = args.caovan_no_profile or ours.caovan_no_profile
    if ours.caovan_profile is not None:
        args.caovan_profile = ours.caovan_profile
    if ours.caovan_mtp is not None:
        args.caovan_mtp = ours.caovan_mtp
    known = [opt for action in picker._actions for opt in action.option_strings]
    for token in rest:
        if flag_name(token).lower().startswith("--caovan"):
            close = difflib.get_close_matches(token.split("=", 1)[0], known, n=1)
            hint = f" (did you mean {close[0]}?)" if close else ""
            return f"unknown option {token}{hint}; caovan serve takes {', '.join(known)}"
    return rest + after


def _vllm_env_names() -> set[str] | str:
    """The variables the installed vLLM reads, or why vLLM cannot be asked."""
    try:
        import vllm.envs
    except ImportError as exc:
        return f"vLLM is not importable here ({exc}); install vLLM next to caovan"
    return set(vllm.envs.environment_variables)


def run(args: argparse.Namespace) -> int:
    from caovan.serving.serve_command import help_plan, plan_serve
    from caovan.serving.serve_flags import ServeArgsError, split_model

    vllm_args = _split_caovan_options(args)
    if isinstance(vllm_args, str):
        return _error(args, vllm_args)
    model, vllm_args = split_model(vllm_args)
    env_names = _vllm_env_names()
    if isinstance(env_names, str):
        return _error(args, env_names)
    help_asked = help_plan(model, vllm_args)
    # The plugin's start-up judges the CAOVAN_* environment with this function in every vLLM process: a FAIL there
    # comes after minutes of loading, so it is refused here; its warnings are said before vLLM's output buries them.
    findings = [] if help_asked else check_environment(os.environ)
    failures = [finding.message for finding in findings if finding.level == FAIL]
    if failures:
        return _error(args, "; ".join(failures))
    try:
        # The graph-mode advice imports vLLM's model runner, which logs to stdout (and its C extensions may write
        # to fd 1): stdout carries the dry run's command alone.
        with stdout_to_stderr():
            plan = help_asked or plan_serve(
                model,
                vllm_args,
                os.environ,
                mtp=args.caovan_mtp,
                autospec=not args.caovan_no_autospec,
                vllm_env_names=env_names,
                profiles=not args.caovan_no_profile,
                profile_mode=args.caovan_profile,
            )
    except ServeArgsError as exc:
        return _error(args, str(exc))
    if not (args.caovan_dry_run or help_asked):
        missing = guards.cuda_gpu_missing(plan.environment(os.environ))
        if missing:  # vLLM would end in a long traceback; --caovan-dry-run still shows the command
            return _error(args, f"{missing}; vllm serve needs one (--caovan-dry-run prints the command without a GPU)")
    # stderr: vLLM's own output follows on both streams; these lines say what caovan changed before it starts.
    for finding in findings:
        print(f"[Caovan] serve: warning: {finding.message}", file=sys.stderr)
    for note in plan.notes:
        print(f"[Caovan] serve: {note}", file=sys.stderr)
    if args.caovan_dry_run:
        print(plan.display)
        return 0
    print(f"[Caovan] serve: {plan.display}", file=sys.stderr, flush=True)
    sys.stdout.flush()
    os.execve(plan.argv[0], plan.argv, plan.environment(os.environ))
    return 0  # not reached: execve replaces this process
