"""Run one offline vLLM engine for the serve tier and write what it saw as JSON.

One engine per process: the serve test starts this script once per case so that two engines, vLLM's global
state and caovan's per-process counters never share a process.  The engine core and the model run inside
this process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``, one GPU), which lets the script

* count the calls of vLLM's own speculative-decode GDN kernels (those of the family's spec path called with
  ``num_accepted_tokens``: ``causal_conv1d_update`` and ``fused_sigmoid_gating_delta_rule_update``, or before
  vLLM 0.18 ``fused_recurrent_gated_delta_rule``): with caovan on there must be none, with caovan off they are the
  reference path;
* look at the built GDN layers (which ones have caovan's core bound);
* re-draw the target model's weights (``--weights hf-init``, see ``hf_init_weights``) so that the GDN layers
  matter for the logits;
* count how the runner dispatched each step to CUDA graphs (``GraphDispatchCounts``): which steps holding
  prompts replayed a FULL graph captured for spec-decode.

The result file always gets written, also when the engine fails to start (then with the exception chain), so
the test can check start-up refusals.  ``CAOVAN_COUNTERS_FILE`` (set by the test) makes caovan write its own
counters at exit, through the same path users have.

    python tests/serve/engine_runner.py --model DIR --out result.json \
        --additional-config '{"caovan": true}' --num-speculative-tokens 2
"""

from __future__ import annotations

import argparse
import atexit
import functools
import json
import os
import sys
import time
import traceback
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import serve_workload  # noqa: E402  (sibling modules; the script is run by path)
from engine_observers import (  # noqa: E402
    GraphDispatchCounts,
    StockSpecKernelCalls,
    cudagraph_mode_in_effect,
    gdn_layer_facts,
    spec_decode_metrics,
)
from engine_weights import A_LOG_RANGES, WEIGHT_MODES, hf_init_weights  # noqa: E402

SCHEMA = "caovan.serve-run/1"

#: ``--cudagraph-mode`` choices: eager, or a vLLM ``CUDAGraphMode`` name the tier runs.
CUDAGRAPH_MODES = ("eager", "PIECEWISE", "FULL_AND_PIECEWISE")
#: Environment this runner needs: in-process engine (see module docstring); FlashInfer's sampler is absent on
#: the GPU hosts (and JIT-fails on SM75, as Turbo3 users were told).
FORCED_ENV = {"VLLM_ENABLE_V1_MULTIPROCESSING": "0", "VLLM_USE_FLASHINFER_SAMPLER": "0"}
REPORTED_ENV = (
    "VLLM_ENABLE_V1_MULTIPROCESSING",
    "VLLM_USE_FLASHINFER_SAMPLER",
    "VLLM_PLUGINS",
    "CAOVAN_COUNTERS_FILE",
    "CAOVAN_REQUIRE_TURBO3",
    "CUDA_VISIBLE_DEVICES",
)


def _json_object(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise argparse.ArgumentTypeError(f"not valid JSON ({exc})") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError(f"must be a JSON object, got {type(value).__name__}")
    return value


def _non_negative_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {value}")
    return value


def _positive_int(text: str) -> int:
    value = _non_negative_int(text)
    if value == 0:
        raise argparse.ArgumentTypeError("must be > 0")
    return value


def _fraction(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not 0 < value <= 1:
        raise argparse.ArgumentTypeError(f"must be in (0, 1], got {value}")
    return value


def _capture_sizes(text: str) -> tuple[int, ...]:
    try:
        sizes = tuple(_positive_int(part) for part in text.split(","))
    except argparse.ArgumentTypeError as exc:
        raise argparse.ArgumentTypeError(f"{text!r}: a comma-separated list of token counts > 0 ({exc})") from None
    if list(sizes) != sorted(set(sizes)):
        raise argparse.ArgumentTypeError(f"{text!r}: token counts must be increasing, each once")
    return sizes


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="engine_runner.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--model", required=True, type=Path, help="model folder (config.json; dummy weights)")
    p.add_argument("--out", required=True, type=Path, help="result JSON to write")
    p.add_argument("--additional-config", type=_json_object, default={}, help="vLLM additional_config (a JSON object)")
    p.add_argument(
        "--num-speculative-tokens", type=_non_negative_int, default=2, help="MTP draft tokens; 0 turns it off"
    )
    p.add_argument("--dtype", choices=("float16", "bfloat16"), default="float16")
    p.add_argument(
        "--workload",
        choices=serve_workload.NAMES,
        default="mixed",
        help="the greedy requests to run (see serve_workload.py; default: mixed)",
    )
    p.add_argument(
        "--cudagraph-mode",
        choices=CUDAGRAPH_MODES,
        default="eager",
        help="eager: enforce_eager, caovan's counters see every core call (default); otherwise vLLM's "
        "compilation_config cudagraph_mode",
    )
    p.add_argument(
        "--cudagraph-capture-sizes",
        type=_capture_sizes,
        metavar="N,N,...",
        help="the batch sizes in tokens vLLM captures graphs for (compilation_config cudagraph_capture_sizes); "
        "default: vLLM's",
    )
    p.add_argument(
        "--weights",
        choices=WEIGHT_MODES,
        default="hf-init",
        help="hf-init: re-draw the target's dummy weights like an untrained Hugging Face model (default); "
        "hf-init-long-memory: the same with slowly decaying GDN heads (see hf_init_weights)",
    )
    p.add_argument("--tensor-parallel-size", type=_positive_int, default=1, help="GPUs the model is split over")
    p.add_argument("--gpu-memory-utilization", type=_fraction, default=0.3)
    p.add_argument(
        "--kv-cache-memory-bytes",
        type=_non_negative_int,
        default=1 << 30,
        help="fixed KV-cache size so that engines sharing a GPU do not profile each other; 0: let vLLM profile",
    )
    p.add_argument("--max-model-len", type=_positive_int, default=512)
    p.add_argument("--max-num-seqs", type=_positive_int, default=serve_workload.MAX_NUM_SEQS)
    p.add_argument(
        "--max-num-batched-tokens",
        type=_positive_int,
        default=None,
        help="tokens per step; below a prompt's length, vLLM prefills it in chunks (default: vLLM's own)",
    )
    p.add_argument("--seed", type=_non_negative_int, default=0)
    p.add_argument("--logprobs", type=_positive_int, default=2, help="top logprobs recorded per position")
    p.add_argument(
        "--print-engine-kwargs", action="store_true", help="print the vllm.LLM keyword arguments as JSON and exit"
    )
    return p


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = build_parser()
    args = parser.parse_args(argv)
    config = args.model / "config.json"
    if not args.print_engine_kwargs and not config.is_file():
        parser.error(f"--model {args.model}: no config.json there")
    try:
        args.requests = serve_workload.workload(args.workload, args.num_speculative_tokens)
    except ValueError as exc:
        parser.error(f"--workload {args.workload}: {exc}")
    if args.cudagraph_capture_sizes and args.cudagraph_mode == "eager":
        parser.error("--cudagraph-capture-sizes: eager mode captures no graphs (pass --cudagraph-mode)")
    longest = args.requests.longest_request
    if args.max_model_len < longest:
        parser.error(f"--max-model-len {args.max_model_len} is shorter than the workload's longest request ({longest})")
    return args


def engine_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    """Keyword arguments of ``vllm.LLM`` for this run."""
    kwargs: dict[str, Any] = {
        "model": str(args.model),
        "load_format": "dummy",
        "skip_tokenizer_init": True,
        # caovan's counters see Python-level core calls; graph replays would hide them.
        "enforce_eager": args.cudagraph_mode == "eager",
        "dtype": args.dtype,
        "additional_config": args.additional_config,
        "gpu_memory_utilization": args.gpu_memory_utilization,
        "max_model_len": args.max_model_len,
        "max_num_seqs": args.max_num_seqs,
        "seed": args.seed,
        "disable_log_stats": False,  # keeps the spec-decode acceptance metrics
    }
    if "vision_config" in json.loads((args.model / "config.json").read_text()):
        # Token-id prompts only: text-only mode, so vLLM neither profiles images nor needs the processor's
        # tokenizer (skip_tokenizer_init).
        kwargs["limit_mm_per_prompt"] = {"image": 0, "video": 0}
    if args.tensor_parallel_size > 1:
        # The workers are processes of their own: caovan's counters reach the test through CAOVAN_COUNTERS_FILE,
        # and the stock-kernel count of this process stays 0.
        kwargs["tensor_parallel_size"] = args.tensor_parallel_size
    if args.cudagraph_mode != "eager":
        kwargs["compilation_config"] = {"cudagraph_mode": args.cudagraph_mode}
        if args.cudagraph_capture_sizes:
            kwargs["compilation_config"]["cudagraph_capture_sizes"] = list(args.cudagraph_capture_sizes)
    if args.num_speculative_tokens:
        kwargs["speculative_config"] = {"method": "mtp", "num_speculative_tokens": args.num_speculative_tokens}
    if args.kv_cache_memory_bytes:
        kwargs["kv_cache_memory_bytes"] = args.kv_cache_memory_bytes
    if args.max_num_batched_tokens:
        kwargs["max_num_batched_tokens"] = args.max_num_batched_tokens
        kwargs["enable_chunked_prefill"] = True
    return kwargs


def describe_exception(exc: BaseException) -> dict[str, Any]:
    """The exception and its causes, outermost first (vLLM may wrap what the model code raised)."""
    chain, seen, current = [], set(), exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        chain.append({"type": f"{type(current).__module__}.{type(current).__qualname__}", "message": str(current)})
        current = current.__cause__ or current.__context__
    return {"type": chain[0]["type"], "message": chain[0]["message"], "chain": chain}


def _unserializable(value: Any) -> str:
    return f"<{type(value).__module__}.{type(value).__qualname__}: not JSON>"


def _best_effort(record: dict[str, Any], key: str, fn: Any) -> None:
    try:
        record[key] = fn()
    except Exception as exc:  # recorded; the test asserts on what it needs
        record[key] = {"error": f"{type(exc).__name__}: {exc}"}


def plugin_facts() -> dict[str, Any]:
    import caovan
    from caovan.plugin.startup import status

    state = status()
    return {
        "caovan_file": caovan.__file__,
        "caovan_version": caovan.__version__,
        "registered": state.registered,
        "family_id": state.family_id,
        "status_line": state.status_line,
    }


def top_logprobs(position: Any, k: int) -> list[list[Any]]:
    """``[[token, logprob], ...]`` best first from vLLM's ``{token: Logprob}`` of one position (None: [])."""
    if position is None:
        return []
    pairs = sorted(((int(tok), float(lp.logprob)) for tok, lp in position.items()), key=lambda p: (-p[1], p[0]))
    return [list(p) for p in pairs[:k]]


def workload_requests(requests: serve_workload.Workload, logprobs: int) -> tuple[list[Any], list[Any]]:
    """The workload as vLLM prompts (token ids, no tokenizer) and greedy sampling parameters."""
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt

    prompts = [TokensPrompt(prompt_token_ids=list(ids)) for ids in requests.prompt_token_ids]
    params = [
        SamplingParams(temperature=0.0, max_tokens=n, ignore_eos=True, logprobs=logprobs, detokenize=False)
        for n in requests.max_tokens
    ]
    return prompts, params


def run_engine(
    args: argparse.Namespace,
    kwargs: dict[str, Any],
    record: dict[str, Any],
    stock: StockSpecKernelCalls,
    dispatch: GraphDispatchCounts,
) -> None:
    import torch
    import vllm

    record["versions"] = {"vllm": vllm.__version__, "torch": torch.__version__, "python": sys.version.split()[0]}
    try:
        stock.install()
    except Exception as exc:  # recorded; the test fails the checks that need the count, with this reason
        record["stock_spec_kernel_calls"] = {"error": f"cannot count vLLM's spec kernel calls: {exc!r}"}
    try:
        dispatch.install()
    except Exception as exc:  # recorded, as above
        record["graph_dispatch"] = {"error": f"cannot count vLLM's graph dispatch: {exc!r}"}

    started = time.monotonic()
    print(f"[serve-runner] building vllm.LLM({json.dumps(kwargs, sort_keys=True)})", flush=True)
    llm = vllm.LLM(**kwargs)
    record["timings"]["engine_start_s"] = round(time.monotonic() - started, 1)
    record["device"] = torch.cuda.get_device_name(0)  # after start-up: vLLM owns CUDA initialisation

    _best_effort(record, "layer_facts", lambda: llm.apply_model(gdn_layer_facts)[0])
    if args.weights in A_LOG_RANGES:
        # Not best-effort: without it the token comparison would be vacuous (see hf_init_weights).
        redraw = functools.partial(hf_init_weights, a_log_range=A_LOG_RANGES[args.weights])
        record["weights"] = {"mode": args.weights, **llm.apply_model(redraw)[0]}
    else:
        record["weights"] = {"mode": "dummy"}

    _best_effort(record, "cudagraph_mode_in_effect", lambda: cudagraph_mode_in_effect(llm))
    prompts, params = workload_requests(args.requests, args.logprobs)
    started = time.monotonic()
    outputs = llm.generate(prompts, params, use_tqdm=False)
    record["timings"]["generate_s"] = round(time.monotonic() - started, 1)

    sequences = []
    for index, output in enumerate(outputs):
        completion = output.outputs[0]
        token_ids = [int(t) for t in completion.token_ids]
        logprobs = completion.logprobs
        top = None
        if logprobs is not None:
            top = [
                top_logprobs(logprobs[i] if i < len(logprobs) else None, args.logprobs) for i in range(len(token_ids))
            ]
        sequences.append(
            {
                "prompt_index": index,
                "token_ids": token_ids,
                "top_logprobs": top,
                "finish_reason": completion.finish_reason,
            }
        )
    record["sequences"] = sequences
    _best_effort(record, "spec_decode_metrics", lambda: spec_decode_metrics(llm))


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    kwargs = engine_kwargs(args)
    if args.print_engine_kwargs:
        print(json.dumps(kwargs, indent=2, sort_keys=True))
        return 0
    os.environ.update(FORCED_ENV)
    record: dict[str, Any] = {
        "schema": SCHEMA,
        "ok": False,
        "pid": os.getpid(),
        "engine_kwargs": kwargs,
        "weights_mode": args.weights,
        "workload": args.workload,
        "env": {k: os.environ.get(k) for k in REPORTED_ENV},
        "timings": {},
    }
    code = 1
    stock = StockSpecKernelCalls()
    dispatch = GraphDispatchCounts()
    try:
        run_engine(args, kwargs, record, stock, dispatch)
        record["ok"] = True
        code = 0
    except Exception as exc:
        record["error"] = describe_exception(exc)
        traceback.print_exc()
    finally:
        if stock.module is not None:
            record["stock_spec_kernel_calls"] = stock.snapshot()
        if dispatch.installed:
            record["graph_dispatch"] = dispatch.snapshot()
            record["graph_dispatch_by_size"] = dispatch.sizes_snapshot()
        _best_effort(record, "plugin", plugin_facts)
        try:
            from caovan.plugin import counters

            record["counters_in_process"] = counters.snapshot()
        except Exception as exc:
            record["counters_in_process"] = {"error": f"{type(exc).__name__}: {exc}"}
        args.out.parent.mkdir(parents=True, exist_ok=True)
        tmp = args.out.with_name(args.out.name + ".tmp")
        # Facts gathered from vLLM objects can hold config objects (seen: a ModelConfig on vLLM 0.21.0): the
        # record must still be written, with such values named rather than lost with the whole file.
        tmp.write_text(json.dumps(record, indent=1, sort_keys=True, default=_unserializable))
        os.replace(tmp, args.out)
        print(f"[serve-runner] ok={record['ok']} wrote {args.out}", flush=True)
    return code


if __name__ == "__main__":
    exit_code = main()
    # Run the exit hooks now (caovan's writes CAOVAN_COUNTERS_FILE), then leave without waiting for threads an
    # in-process engine may leave behind: a hang there would lose nothing but would cost the tier its timeout.
    sys.stdout.flush()
    sys.stderr.flush()
    atexit._run_exitfuncs()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(exit_code)
