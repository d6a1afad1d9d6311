"""``caovan warmup`` (Turbo3: ``caovan-sm75-warmup --api-base http://127.0.0.1:8000 --model NAME``).

Run it once the server has logged ``Application startup complete``: it pays the first-request costs — the Triton
compiles of caovan's kernels (one per batch size: the kernels pick their launch per batch), vLLM's own first-request
work — before real clients connect, then prints ``[Caovan] warmup=READY``.

It waits for the server (``GET /health``, then ``GET /v1/models``), picks the model (``--model``, or the only one
served), then for each size in ``--batches`` sends that many concurrent greedy completions of ``--max-tokens``
tokens with ``ignore_eos`` (so decode, and with it MTP speculative decoding, runs that many steps) and checks each
answer: HTTP 200, a ``choices`` list, ``usage.completion_tokens`` > 0. One line per step, then
``[Caovan] warmup=READY model=M requests=N seconds=T`` (T: the time the warmup requests took, without the wait);
on failure ``[Caovan] warmup=FAIL reason=...`` on stdout, and ``caovan warmup: error: ...`` (under the name typed:
``caovan-sm75-warmup: error: ...``) on stderr when stderr is not where stdout goes, so a terminal shows it once.

Why a separate command: Turbo3 once warmed up automatically, by sending an HTTP request from inside the server
process after start-up; that request raced the engine's own first compile and killed it, and the feature was removed
(its start-up line still says ``post_start_warmup=disabled-default``). A client that runs after the server is up,
and waits for it to answer, cannot race the start-up.
"""

from __future__ import annotations

import argparse
import time

from caovan.serving.args import add_server_arguments, positive_int_list, require_at_least, server_settings, whole_number
from caovan.serving.client import ServingClient, run_concurrently, wait_for_model
from caovan.serving.errors import ClientError, RequestFailed
from caovan.serving.protocol import Completion, fewer_tokens_than_asked

from . import prog
from ._streams import report_failure

NAME = "warmup"
HELP = (
    "after the server's 'Application startup complete': send warmup requests at each batch size so the "
    "first-request JIT (Triton compiles) is paid before real clients connect"
)
ALIAS = "caovan-sm75-warmup"
EPILOG = (
    "Exit status: 0 every warmup request answered ([Caovan] warmup=READY); 1 the server answered but a request "
    "failed, or it does not serve --model; 2 a usage error (a bad option, an --api-base that is not the server's root, "
    "several models served and no --model, a missing or refused API key, a value that is not a number) or the server "
    "was not ready within --wait-s; 130 interrupted (Ctrl-C). Every exit but 0 ends with a [Caovan] warmup=FAIL line, "
    "except for a command line that cannot be parsed at all (an unknown option, an option without its value): exit 2 "
    "with a usage message."
)

DEFAULT_BATCHES = "1,2,4,8"

#: The prompt of every warmup request (request i of a batch adds its number, so no two are the same text).
PROMPT = (
    "You are warming up a language model server. Write a short, plain story about a lighthouse keeper who "
    "counts the ships that pass during one long winter night."
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "Run it once the server has logged 'Application startup complete'. Waits for the server (GET /health, "
        "then GET /v1/models), then for each size in --batches sends that many concurrent greedy completions of "
        "--max-tokens tokens (ignore_eos, so decode and MTP run), checks each answer, and ends with "
        "[Caovan] warmup=READY."
    )
    add_server_arguments(parser, wait_s=600.0, request_timeout_s=900.0)
    parser.add_argument(
        "--batches",
        default=DEFAULT_BATCHES,
        metavar="N,N,...",
        help=f"concurrent request counts to send in turn; each batch size compiles once (default: {DEFAULT_BATCHES})",
    )
    parser.add_argument(
        "--max-tokens",
        default=32,  # converted in run(), so that a bad value ends with a FAIL line too
        metavar="N",
        help="tokens each request generates (ignore_eos, so decode and MTP run that long) (default: 32)",
    )


def _error(args: argparse.Namespace, message: str, exit_code: int) -> int:
    report_failure(prog(args, NAME), message, f"[Caovan] warmup=FAIL reason={' '.join(message.split())}")
    return exit_code


def run(args: argparse.Namespace) -> int:
    try:
        return _warmup(args)
    except ClientError as exc:
        return _error(args, str(exc), exc.exit_code)
    except KeyboardInterrupt:
        return _error(args, "interrupted (Ctrl-C)", 130)


def _prompt(index: int) -> str:
    return f"{PROMPT} (warmup request {index + 1})"


def _tokens_text(tokens: list[int], asked: int) -> str:
    low, high = min(tokens), max(tokens)
    text = f"{low} tokens each" if low == high else f"{low}-{high} tokens"
    note = fewer_tokens_than_asked(tokens, asked)
    return f"{text} ({note})" if note else text


def _warmup(args: argparse.Namespace) -> int:
    settings = server_settings(args)
    batches = positive_int_list(args.batches, "--batches")
    max_tokens = whole_number(args.max_tokens, "--max-tokens")
    require_at_least(max_tokens, 1, "--max-tokens")
    with ServingClient(settings, max_connections=max(batches)) as client:
        ready, model = wait_for_model(client, settings, args.model, NAME)
        print(f"[Caovan] warmup: server ready after {ready.seconds:.1f} s (model {model})", flush=True)
        started = time.perf_counter()
        requests = 0
        for batch in batches:
            batch_started = time.perf_counter()
            results = run_concurrently(
                lambda i: client.complete(model, _prompt(i), max_tokens), batch, concurrency=batch
            )
            seconds = time.perf_counter() - batch_started
            requests += batch
            answered = [r for r in results if isinstance(r, Completion)]
            failed = [r for r in results if isinstance(r, ClientError)]
            step = f"[Caovan] warmup: batch {batch}: {len(answered)}/{batch} ok"
            if answered:
                step += ", " + _tokens_text([r.completion_tokens for r in answered], max_tokens)
            print(f"{step}, {seconds:.2f} s", flush=True)
            if failed:
                raise RequestFailed(f"batch {batch}: {len(failed)}/{batch} request(s) failed; first: {failed[0]}")
        total = time.perf_counter() - started
    print(f"[Caovan] warmup=READY model={model} requests={requests} seconds={total:.1f}", flush=True)
    return 0
