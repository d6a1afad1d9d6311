"""``caovan benchmark`` (Turbo3: ``caovan-sm75-benchmark --model NAME --max-tokens 768 --repeats 2 --output r.json``).

End-to-end speed of a running vLLM server through its OpenAI API, the way Turbo3 users were taught to compare:
run it once against the server without the plugin (``--label baseline --output base.json``), once with it, same
flags, and compare (``--compare base.json``). Not ``caovan bench``, which times caovan's kernels alone on a GPU.

For each ``--load`` (decode-heavy, prefill-heavy, mixed, run in that order: see :mod:`caovan.serving.benchmark`),
``--warmup-requests`` uncounted requests first, ``--concurrency`` in flight as in the repeats (first-request JIT is
excluded, as Turbo3 taught; caovan's kernels compile once per batch size, so by default there are as many warmup
requests as ``--concurrency``, sent together: the repeats' batch sizes are compiled before they are timed), then
``--repeats`` repeats of ``--requests`` streamed greedy completions with ``ignore_eos``, ``--concurrency`` in flight.
Before the first request, each load's longest prompt is counted by the server (``POST /tokenize``): a load whose
prompt and output tokens exceed the model's max_model_len is refused, instead of every request of it failing
(skipped, in one line, without ``/tokenize`` or a known max_model_len). Each request is timed from the stream: time
to the first token, end-to-end latency, tokens from the usage chunk. A table goes to stdout, then the full record
(JSON, written atomically; no ``--api-key`` value, no ``user:password@``) to ``--output``. Failed requests: the count
and the first distinct errors on stderr. Answers shorter than asked (a server ignoring ``ignore_eos``): one warning.

``--compare BASELINE.json``: after the run, a side-by-side table (the medians over repeats, ratio this/baseline, the
better run, named only when the two runs' min-max ranges over the repeats do not overlap). Settings that must match
(model, loads in any order, --max-tokens, --requests, --concurrency, --repeats, --warmup-requests and the prompt
set) are checked before any request is sent, the model once the server names it; a difference is refused, as is a
record of another schema or an --output that would overwrite the baseline; a different vLLM version on the server is
only warned about. ``--compare BASELINE.json RECORD.json`` compares two records already written and contacts no
server (the run options are then unused; --output is refused).

Comparisons are information: the exit status says whether requests failed, never which run was faster.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from caovan.jsonfile import output_path_problem
from caovan.serving import benchmark as sb
from caovan.serving.args import add_server_arguments, require_at_least, server_settings
from caovan.serving.client import ServingClient, run_concurrently, wait_for_model
from caovan.serving.errors import ClientError, RequestFailed, UsageError
from caovan.serving.protocol import fewer_tokens_than_asked
from caovan.serving.redaction import redacted_argv

from . import prog

NAME = "benchmark"
HELP = (
    "end-to-end tokens/s and latency of a running vLLM server through its OpenAI API, to compare a run "
    "without and with the plugin (not `caovan bench`, which times the kernels alone)"
)
ALIAS = "caovan-sm75-benchmark"
EPILOG = (
    "Exit status: 0 every request answered; 1 some requests failed (the record is still written) or the server does "
    "not serve --model; 2 a usage error (a bad option or --output, an --api-base that is not the server's root, "
    "several models served and no --model, a missing or refused API key, a load whose longest prompt and output do "
    "not fit the server's max_model_len), the server was not ready within --wait-s, --compare cannot be used (an "
    "unreadable or malformed record, settings that differ), or the record could not be written after the run (the "
    "table is printed first); 130 interrupted (no record written). A comparison never changes the exit status."
)

DEFAULT_LOAD = "decode-heavy"

#: The name this run's error and warning lines give: the one typed (``caovan-sm75-benchmark`` under the alias), set
#: by run(); the helpers that print deep inside a run read it here instead of being handed the arguments.
_prog = f"caovan {NAME}"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "Streamed greedy completions (ignore_eos) against a running vLLM server's OpenAI API. Per load: "
        "--warmup-requests uncounted requests (first-request JIT excluded; default: as many as --concurrency, one "
        "per batch size), then --repeats repeats of --requests requests, --concurrency in flight in both; per "
        "repeat: output tokens/s, latency, time to first token (TTFT) and time per output token (TPOT: (latency - "
        "TTFT) / (tokens - 1) per request, as vllm bench serve has it), then the median over the repeats with min "
        "and max. Run it once without the plugin (--label baseline --output base.json) and once with it, same "
        "flags, with --compare base.json; --compare BASE.json RECORD.json compares two records without a server."
    )
    add_server_arguments(parser, wait_s=60.0, request_timeout_s=900.0)
    parser.add_argument(
        "--max-tokens", type=int, default=768, metavar="N", help="tokens out per request (default: 768)"
    )
    parser.add_argument(
        "--repeats",
        type=int,
        default=2,
        metavar="N",
        help="repeats per load; the summary is the median over them with min and max, never a single peak (default: 2)",
    )
    parser.add_argument(
        "--requests", type=int, default=8, metavar="N", help="requests per load per repeat (default: 8)"
    )
    parser.add_argument(
        "--concurrency", type=int, default=1, metavar="N", help="requests in flight at once (default: 1)"
    )
    parser.add_argument(
        "--warmup-requests",
        type=int,
        default=None,
        metavar="N",
        help="uncounted requests per load before its repeats, sent --concurrency at a time as the repeats are, so "
        "first-request JIT is excluded; caovan's kernels compile once per batch size, hence the default (default: "
        "same as --concurrency)",
    )
    loads = "; ".join(f"{name}: {text}" for name, text in sb.LOADS.items())
    parser.add_argument(
        "--load",
        default=DEFAULT_LOAD,
        metavar="LOAD[,LOAD...]",
        help=f"load levels to run, comma-separated; they always run in this order, whatever order they are given "
        f"in ({loads}) (default: {DEFAULT_LOAD})",
    )
    parser.add_argument("--label", metavar="TEXT", help="a name for this run in the record, e.g. baseline or caovan")
    parser.add_argument(
        "--output", metavar="FILE", help="write the full record (JSON) to FILE (not the --compare baseline)"
    )
    parser.add_argument(
        "--compare",
        nargs="+",
        metavar="FILE",
        help="BASELINE.json: after the run, compare with that record (refused if the settings differ); "
        "BASELINE.json RECORD.json: compare two records, no run. A metric names the better run only when the two "
        "runs' min-max ranges over the repeats do not overlap ('within spread' otherwise)",
    )


# --- checks before the run ---------------------------------------------------------------------------------------


def _loads(text: str) -> list[str]:
    """The loads ``--load`` names, in run order: runs of the same loads then compare however they were written."""
    loads = [item.strip() for item in text.split(",")]
    for item in loads:
        if item not in sb.LOADS:
            raise UsageError(f"--load {text!r}: {item!r} is not one of {', '.join(sb.LOADS)}")
    return sb.in_run_order(loads)


def _read_record(target: str) -> dict[str, Any]:
    from caovan.jsonfile import read_json

    shown = f"--compare {target}"
    try:
        return sb.validate_record(read_json(Path(target), sb.RecordError, shown=shown), shown)
    except sb.RecordError as exc:
        raise UsageError(str(exc)) from None


def _same_file(first: str, second: str) -> bool:
    """Whether two paths name one file (after symlinks; a hard link too, when both exist)."""
    if Path(first).resolve() == Path(second).resolve():
        return True
    try:
        return os.path.samefile(first, second)
    except OSError:  # one of them does not exist (yet)
        return False


def _refuse(differences: list[str], baseline_file: str, this_name: str = "this run") -> None:
    if differences:
        raise UsageError(
            f"--compare {baseline_file}: refusing to compare runs with different settings (baseline vs "
            f"{this_name}: {'; '.join(differences)}); Turbo3's rule: same model, flags, prompts and output length"
        )


# --- the run -------------------------------------------------------------------------------------------------------


def run(args: argparse.Namespace) -> int:
    global _prog
    _prog = prog(args, NAME)
    try:
        if args.compare and len(args.compare) == 2:
            return _compare_records(args)
        return _benchmark(args)
    except ClientError as exc:
        print(f"{_prog}: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print(f"{_prog}: error: interrupted (Ctrl-C); no record written", file=sys.stderr)
        return 130


def _settings(args: argparse.Namespace, loads: list[str], sha256: str, count: int) -> dict[str, Any]:
    return {
        "model": args.model,  # the served name, filled in once the server is asked
        "loads": loads,
        "max_tokens": args.max_tokens,
        "output_tokens_per_load": {load: sb.output_tokens(load, args.max_tokens) for load in loads},
        "requests": args.requests,
        "concurrency": args.concurrency,
        "repeats": args.repeats,
        "warmup_requests": args.warmup_requests,
        "prompt_set": {"version": sb.PROMPT_SET_VERSION, "sha256": sha256, "prompts": count},
        "temperature": 0,
        "ignore_eos": True,
        "stream": True,
    }


def _benchmark(args: argparse.Namespace) -> int:
    if args.compare and len(args.compare) > 2:
        raise UsageError(f"--compare takes BASELINE.json, or BASELINE.json RECORD.json; got {len(args.compare)} files")
    problem = output_path_problem("--output", args.output)
    if problem:
        raise UsageError(problem)
    if args.output and args.compare and _same_file(args.output, args.compare[0]):
        raise UsageError(
            f"--output {args.output} is the --compare baseline {args.compare[0]}: the run would overwrite the record "
            "it is compared with; write this run's record to another file"
        )
    for option, value, minimum in (
        ("--max-tokens", args.max_tokens, 1),
        ("--repeats", args.repeats, 1),
        ("--requests", args.requests, 1),
        ("--concurrency", args.concurrency, 1),
    ):
        require_at_least(value, minimum, option)
    if args.warmup_requests is None:  # one per batch size up to --concurrency
        args.warmup_requests = args.concurrency
    require_at_least(args.warmup_requests, 0, "--warmup-requests")
    loads = _loads(args.load)
    server = server_settings(args)
    baseline = _read_record(args.compare[0]) if args.compare else None

    planned = sb.plan(
        loads,
        max_tokens=args.max_tokens,
        requests=args.requests,
        repeats=args.repeats,
        warmup_requests=args.warmup_requests,
    )
    count = sum(len(reqs) for by_phase in planned.values() for reqs in by_phase.values())
    settings = _settings(args, loads, sb.prompt_set_sha256(planned), count)
    if baseline is not None:  # everything but the model is known now: refuse before the server is even asked
        _refuse(sb.settings_differences(baseline["settings"], settings, with_model=False), args.compare[0])

    started_utc = datetime.datetime.now(datetime.timezone.utc)
    with ServingClient(server, max_connections=args.concurrency) as client:
        ready, model = wait_for_model(client, server, args.model, NAME)
        settings["model"] = model
        if baseline is not None:
            _refuse(sb.settings_differences(baseline["settings"], settings), args.compare[0])
        version = client.vllm_version()
        print(f"[Caovan] benchmark: server ready (model {model}, vLLM {version or 'version unknown'})", flush=True)
        _check_prompts_fit(client, model, ready.max_model_len.get(model), planned, args.max_tokens)
        warned: list[str] = []  # the short-answers warning, said once per run
        results = {load: _run_load(client, model, load, planned[load], args.concurrency, warned) for load in loads}

    every_phase = [r for by_load in results.values() for r in [by_load["warmup"], *by_load["repeats"]] if r]
    failed = sum(r["errors"] for r in every_phase)
    sent = sum(r["requests"] for r in every_phase)
    record = {
        "schema": sb.SCHEMA,
        "created_utc": started_utc.isoformat(timespec="seconds"),
        "argv": redacted_argv(sys.argv),  # no --api-key value, no user:password@
        "caovan_version": _caovan_version(),
        "label": args.label,
        "server": {
            "api_base": server.shown_api_base,  # no user:password@
            "vllm_version": version,
            "models": ready.models,
            "max_model_len": ready.max_model_len.get(model),
        },
        "settings": settings,
        "percentile_method": sb.PERCENTILE_METHOD,
        "results": results,
        "totals": {"requests": sent, "errors": failed, "error_rate": failed / sent if sent else 0.0},
        "exit_status": 1 if failed else 0,
    }
    _print_table(record)  # first: a record that cannot be written must not take the results with it
    written = _write_record(args.output, record) if args.output else None
    if baseline is not None:
        _print_comparison(baseline, record, args.compare[0], "this run")
    if failed:
        _print_errors(every_phase, failed, sent, recorded=bool(written))
    if written is False:
        return 2
    return 1 if failed else 0


def _check_prompts_fit(
    client: ServingClient, model: str, max_model_len: int | None, planned: dict, max_tokens: int
) -> None:
    """Refuse, before any completion, a load whose longest prompt plus its output tokens exceeds the model's
    max_model_len: vLLM would answer each of its requests with an HTTP 400. Skipped, in one line, when the server
    does not give max_model_len or cannot count tokens (no ``POST /tokenize``)."""
    if max_model_len is None:
        print(
            f"[Caovan] benchmark: prompt lengths not checked: /v1/models gives no max_model_len for {model}", flush=True
        )
        return
    for load, longest in sb.longest_prompts(planned).items():
        try:
            tokens = client.count_tokens(model, longest.prompt)
        except RequestFailed as exc:
            print(
                f"[Caovan] benchmark: prompt lengths not checked against max_model_len {max_model_len}: {exc}",
                flush=True,
            )
            return
        out = longest.max_tokens
        if tokens + out <= max_model_len:
            continue
        advice = "start the server with a larger --max-model-len"
        if out == max_tokens and tokens < max_model_len:  # a smaller --max-tokens would do too
            advice += f", pass --max-tokens {max_model_len - tokens} or less"
        raise UsageError(
            f"--load {load}: its longest prompt is {tokens} tokens and asks for {out} token{'s' if out > 1 else ''} "
            f"out, {tokens + out} in all, more than the max_model_len {max_model_len} of {model} on {client.api_base}: "
            f"{advice}, or leave {load} out with --load"
        )


def _write_record(target: str, record: dict[str, Any]) -> bool:
    """Write ``record`` to ``target``; ``False`` (and one error line) when it cannot be, e.g. the folder became
    read-only during the run or refuses new files."""
    from caovan.jsonfile import write_record

    problem = write_record(target, json.dumps(record, indent=2, sort_keys=True, ensure_ascii=False) + "\n")
    if problem is not None:
        print(f"{_prog}: error: --output {target}: {problem}", file=sys.stderr)
        return False
    print(f"[Caovan] benchmark: record written to {target}")
    return True


#: How many distinct error messages a run with failed requests prints (the record keeps every request's).
SHOWN_ERRORS = 3


def _print_errors(phases: list[dict[str, Any]], failed: int, sent: int, *, recorded: bool) -> None:
    """The failure count, then the first distinct error messages with how many requests each ended, on stderr."""
    counts: dict[str, int] = {}  # first seen first
    for stats in phases:
        for request in stats["per_request"]:
            if "error" in request:
                message = " ".join(request["error"].split())
                counts[message] = counts.get(message, 0) + 1
    shown = min(SHOWN_ERRORS, len(counts))
    what = f"{len(counts)} distinct error{'s' if len(counts) > 1 else ''}"
    what += f", the first {shown} below" if shown < len(counts) else ""
    what += "; the record's per_request has every request's" if recorded else ""
    print(f"{_prog}: error: {failed} of {sent} requests failed ({what})", file=sys.stderr)
    for message, count in list(counts.items())[:shown]:
        print(f"{_prog}: error:   {message} ({count} request{'s' if count > 1 else ''})", file=sys.stderr)


def _caovan_version() -> str:
    from caovan import __version__

    return __version__


def _run_load(
    client: ServingClient, model: str, load: str, by_phase: dict, concurrency: int, warned: list[str]
) -> dict[str, Any]:
    result: dict[str, Any] = {"warmup": None, "repeats": []}
    repeats = [phase for phase in by_phase if phase != "warmup"]
    for phase, requests in by_phase.items():
        stats = _run_phase(client, model, requests, concurrency)
        done = f"{stats['ok']}/{stats['requests']} ok"
        if not warned:
            _warn_short_answers(load, phase, stats, requests[0].max_tokens, warned)
        if phase == "warmup":
            result["warmup"] = stats
            print(f"[Caovan] benchmark: {load} warmup (not counted): {done}, {stats['wall_s']:.2f} s", flush=True)
            continue
        result["repeats"].append(stats)
        rate = stats["output_tokens_per_s"]
        print(
            f"[Caovan] benchmark: {load} {phase.replace('-', ' ')}/{len(repeats)}: {done}, "
            f"{'-' if rate is None else f'{rate:.1f}'} output tok/s, {stats['wall_s']:.2f} s",
            flush=True,
        )
    result["summary"] = sb.summarize(result["repeats"])
    return result


def _warn_short_answers(load: str, phase: str, stats: dict[str, Any], asked: int, warned: list[str]) -> None:
    tokens = [r["completion_tokens"] for r in stats["per_request"] if "completion_tokens" in r]
    note = fewer_tokens_than_asked(tokens, asked)
    if note:
        short = sum(1 for n in tokens if n < asked)
        warned.append(note)
        print(
            f"{_prog}: warning: {load} {phase}: {short} of {len(tokens)} answers generated fewer tokens than "
            f"asked (as few as {min(tokens)}; {note}); output tok/s and TPOT then measure less work than the "
            "settings say",
            file=sys.stderr,
            flush=True,
        )


def _run_phase(client: ServingClient, model: str, requests: list[sb.Planned], concurrency: int) -> dict[str, Any]:
    started = time.perf_counter()
    outcomes = run_concurrently(
        lambda i: client.stream_complete(model, requests[i].prompt, requests[i].max_tokens), len(requests), concurrency
    )
    return sb.repeat_stats(outcomes, time.perf_counter() - started)


# --- output ----------------------------------------------------------------------------------------------------------


def _num(value: float | None, scale: float = 1.0, digits: int = 2) -> str:
    return "-" if value is None else f"{value * scale:.{digits}f}"


def _metric_cells(values: dict[str, Any]) -> list[str]:
    """The timing columns of the table: one repeat's values and the medians over the repeats alike."""
    return [
        _num(values["output_tokens_per_s"], digits=1), _num(values["latency_mean_s"], digits=3),
        _num(values["latency_p50_s"], digits=3), _num(values["latency_p95_s"], digits=3),
        _num(values["ttft_p50_s"], 1000, 1), _num(values["ttft_p95_s"], 1000, 1),
        _num(values["tpot_p50_s"], 1000, 2), _num(values["tpot_p95_s"], 1000, 2),
    ]  # fmt: skip


def _print_table(record: dict[str, Any]) -> None:
    from tabulate import tabulate

    headers = [
        "load", "repeat", "ok", "err %", "wall s", "out tok/s", "lat mean s", "lat p50 s", "lat p95 s",
        "TTFT p50 ms", "TTFT p95 ms", "TPOT p50 ms", "TPOT p95 ms",
    ]  # fmt: skip
    rows = []
    for load, result in record["results"].items():
        for n, r in enumerate(result["repeats"], 1):
            ok = f"{r['ok']}/{r['requests']}"
            rows.append([load, n, ok, _num(r["error_rate"], 100, 1), _num(r["wall_s"]), *_metric_cells(r)])
        s = result["summary"]
        med = {metric: s[metric]["median"] for metric in sb.SUMMARY_METRICS}
        ok = f"{s['requests'] - s['errors']}/{s['requests']}"
        rows.append([load, "median", ok, _num(med["error_rate"], 100, 1), "", *_metric_cells(med)])
    settings = record["settings"]
    label = f" [{record['label']}]" if record.get("label") else ""
    print(
        f"\nmodel {settings['model']}{label}, vLLM {record['server']['vllm_version'] or 'unknown'}: "
        f"{settings['requests']} requests x {settings['repeats']} repeats per load, concurrency "
        f"{settings['concurrency']}, max_tokens {settings['max_tokens']}"
    )
    print(tabulate(rows, headers=headers, disable_numparse=True))
    for load, result in record["results"].items():
        rate = result["summary"]["output_tokens_per_s"]
        if rate["median"] is not None:
            print(
                f"{load}: output tok/s median {rate['median']:.1f} (min {rate['min']:.1f}, max {rate['max']:.1f}) "
                f"over {rate['repeats']} repeat(s)"
            )


def _print_comparison(baseline: dict[str, Any], record: dict[str, Any], baseline_file: str, this_name: str) -> None:
    from tabulate import tabulate

    base_version = baseline.get("server", {}).get("vllm_version") if isinstance(baseline.get("server"), dict) else None
    version = record.get("server", {}).get("vllm_version") if isinstance(record.get("server"), dict) else None
    if base_version != version:
        print(
            f"{_prog}: warning: the servers' vLLM versions differ (baseline {base_version or 'unknown'}, "
            f"{this_name} {version or 'unknown'}); Turbo3's rule: same vLLM version",
            file=sys.stderr,
        )

    def name(r: dict[str, Any], fallback: str) -> str:
        return f"{fallback} ({r['label']})" if r.get("label") and r["label"] != fallback else fallback

    headers = ["load", "metric (median over repeats)", name(baseline, "baseline"), name(record, this_name)]
    headers += [f"ratio {this_name}/baseline", "better"]
    print(f"\n{this_name} compared with baseline {baseline_file}")
    rows = sb.compare_rows(baseline, record, this_name=this_name)
    print(tabulate(rows, headers=headers, disable_numparse=True))
    print(
        f"better: named only when the two runs' min-max ranges over the repeats do not overlap; "
        f"'{sb.WITHIN_SPREAD}': they do, the difference is no larger than the repeats' own"
    )


def _compare_records(args: argparse.Namespace) -> int:
    baseline_file, record_file = args.compare
    if args.output is not None:
        raise UsageError("--output: nothing is run when --compare is given two records, so nothing to write")
    baseline, record = _read_record(baseline_file), _read_record(record_file)
    _refuse(sb.settings_differences(baseline["settings"], record["settings"]), baseline_file, "record")
    print(f"record: {record_file}")
    _print_comparison(baseline, record, baseline_file, "record")
    return 0
