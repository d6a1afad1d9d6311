"""``caovan bench ttft``: its arguments and its run (the procedure: ``caovan.bench.ttft``)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from .served_runs import distinct_counts, shared_server_options

if TYPE_CHECKING:
    from caovan.bench.ttft import TtftSettings


def add_ttft_parser(targets: argparse._SubParsersAction) -> argparse.ArgumentParser:
    from caovan.bench.ttft import DEFAULT_PROMPT_TOKENS

    p = targets.add_parser(
        "ttft",
        help="serve a model with caovan's GDN prefill off, then on: time to first token per prompt length (JSON)",
        description=(
            'Serves MODEL with caovan serve twice, caovan on in both ({"caovan": true}), its GDN prefill off then '
            'on ("caovan_prefill"); each time, per prompt length, one-token streamed requests on prompts no other '
            "request shares, one at a time, timed to the first token. Writes OUT/<mode>/: the server logs and "
            "ttft.json (commands, GPU, versions, every TTFT, medians and ratios). Start-up is not timed."
        ),
    )
    p.add_argument("model", help="the model caovan serve loads (a folder or a Hugging Face name)")
    p.add_argument("--out", required=True, metavar="DIR", help="where OUT/<mode>/ is written")
    p.add_argument(
        "--prompt-tokens",
        default=",".join(map(str, DEFAULT_PROMPT_TOKENS)),
        metavar="N[,N...]",
        help="prompt lengths in tokens (default: %(default)s); the server's --max-model-len must exceed the longest",
    )
    p.add_argument("--warmup", type=int, default=1, metavar="N", help="untimed requests per length (default: 1)")
    p.add_argument("--repeats", type=int, default=5, metavar="N", help="timed requests per length (default: 5)")
    p.add_argument(
        "--cudagraph-mode",
        choices=("PIECEWISE", "FULL_AND_PIECEWISE"),
        default="PIECEWISE",
        help="vLLM's cudagraph_mode for both runs (default: PIECEWISE)",
    )
    p.add_argument(
        "--additional-config",
        default="{}",
        metavar="JSON",
        help="vLLM additional_config keys for both runs, without caovan's (each run sets its own)",
    )
    p.add_argument(
        "--serve-args",
        default="",
        metavar="'ARGS'",
        help="caovan serve (vllm serve) arguments for both runs, in one quoted string",
    )
    p.add_argument("--ready-timeout-s", type=float, default=1800.0, metavar="S", help="start-up limit per server")
    p.add_argument("--port", type=int, metavar="PORT", help="the servers' port (default: a free one)")
    return p


def ttft_settings(args: argparse.Namespace) -> TtftSettings | str:
    """The checked settings of ``bench ttft``, or what is wrong with the arguments."""
    from caovan.bench.ttft import TtftSettings

    lengths = distinct_counts("--prompt-tokens", args.prompt_tokens)
    if isinstance(lengths, str):
        return lengths
    for option, value, least in (("--warmup", args.warmup, 0), ("--repeats", args.repeats, 1)):
        if value < least:
            return f"{option} {value}: at least {least}"
    shared = shared_server_options(args.additional_config, args.serve_args)
    if isinstance(shared, str):
        return shared
    extra, serve_args = shared
    return TtftSettings(
        model=args.model,
        out_dir=Path(args.out),
        cudagraph_mode=args.cudagraph_mode,
        prompt_tokens=lengths,
        warmup=args.warmup,
        repeats=args.repeats,
        additional_config=extra,
        serve_args=serve_args,
        ready_timeout_s=args.ready_timeout_s,
        port=args.port,
    )


def run_ttft(args: argparse.Namespace, error) -> int:
    from caovan.bench.e2e import E2EError
    from caovan.bench.ttft import run_ttft as run_procedure

    settings = ttft_settings(args)
    if isinstance(settings, str):
        return error(settings)
    try:
        record = run_procedure(settings)
    except E2EError as exc:
        return error(str(exc), 1)
    for row in record["summary"]:
        print(
            f"{row['prompt_tokens']} tokens: TTFT {1000 * row['ttft_on_s']:.1f} ms with caovan's prefill, "
            f"{1000 * row['ttft_off_s']:.1f} ms with vLLM's ({row['speedup']:.2f}x, medians of {settings.repeats})"
        )
    print(f"wrote {settings.mode_dir / 'ttft.json'}", file=sys.stderr)
    return 0
