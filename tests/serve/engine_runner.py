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
import importlib
import json
import os
import sys
import time
import traceback
import zlib
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import serve_workload  # noqa: E402  (sibling module; the script is run by path)

SCHEMA = "caovan.serve-run/1"


def stock_spec_kernels() -> tuple[str, ...]:
    """The kernels of the installed family's spec path that take ``num_accepted_tokens`` (the spec calls' mark)."""
    from caovan.adapters.registry import installed_family

    return tuple(name for name, keywords in installed_family().spec_path if "num_accepted_tokens" in keywords)


def stock_gdn_module() -> str:
    """The GDN module of the installed vLLM's family, whose spec-decode kernel calls are counted."""
    from caovan.adapters.registry import installed_family

    return installed_family().gdn_module


def moe_layer_class() -> type:
    """vLLM's fused-MoE layer class: ``FusedMoE`` up to vLLM 0.23; from 0.24 the runners ``FusedMoE`` makes (0.27
    drops the name), all ``MoERunnerInterface``."""
    from vllm.model_executor.layers import fused_moe

    legacy = getattr(fused_moe, "FusedMoE", None)
    if isinstance(legacy, type):
        return legacy
    from vllm.model_executor.layers.fused_moe.runner.moe_runner_interface import MoERunnerInterface

    return MoERunnerInterface


def stock_gdn_class() -> type:
    """The installed vLLM's in-tree GDN layer class (caovan's override subclasses it)."""
    from caovan.adapters.override import in_tree_class
    from caovan.adapters.registry import installed_family

    return in_tree_class(installed_family())


#: ``--cudagraph-mode`` choices: eager, or a vLLM ``CUDAGraphMode`` name the tier runs.
CUDAGRAPH_MODES = ("eager", "PIECEWISE", "FULL_AND_PIECEWISE")
#: ``--weights`` choices (``hf_init_weights`` says what the two hf-init modes draw).
WEIGHT_MODES = ("hf-init", "hf-init-long-memory", "dummy")
#: ``A_log`` ranges, as ``log U(low, high)``: Hugging Face's init, and heads that keep a prompt in their state.
A_LOG_RANGES = {"hf-init": (0.0, 16.0), "hf-init-long-memory": (0.01, 0.1)}
#: Hugging Face's ``initializer_range`` of the Qwen3-Next config (std of the normal init of every matrix).
INITIALIZER_RANGE = 0.02
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
    return kwargs


class StockSpecKernelCalls:
    """Counts calls of vLLM's own GDN kernels, looked up by name in the GDN module at every call."""

    def __init__(self) -> None:
        self.spec: Counter[str] = Counter()
        self.total: Counter[str] = Counter()
        self.module: str | None = None
        self.kernels: tuple[str, ...] = ()

    def _counted(self, name: str, original: Any) -> Any:
        @functools.wraps(original)
        def counted(*args: Any, **kwargs: Any) -> Any:
            self.total[name] += 1
            # The speculative branch of _forward_core is the only caller passing num_accepted_tokens.
            if kwargs.get("num_accepted_tokens") is not None:
                self.spec[name] += 1
            return original(*args, **kwargs)

        return counted

    def install(self) -> None:
        module = importlib.import_module(stock_gdn_module())
        self.kernels = stock_spec_kernels()
        for name in self.kernels:
            setattr(module, name, self._counted(name, getattr(module, name)))
        self.module = module.__name__

    def snapshot(self) -> dict[str, Any]:
        return {
            "module": self.module,
            "spec": {n: self.spec[n] for n in self.kernels},
            "total": {n: self.total[n] for n in self.kernels},
        }


class GraphDispatchCounts:
    """How vLLM's model runner dispatched each engine step: did the step run prompt tokens of newly admitted
    requests, and did it replay a FULL graph captured for uniform (spec-)decode.

    Wrapped on ``GPUModelRunner`` before the engine is built, so caovan's uniform-decode guard (installed at model
    load) wraps this in turn: what is counted is the decision each step really ran with.  Whether a step holds
    prompts is read from the scheduler's output (its new requests), not from the input-batch arrays the guard
    reads, so the count checks the guard rather than repeating it.  ``functools.wraps`` keeps the source and
    signature the guard's probes read.

    A FULL uniform step whose graph is larger than the batch (rows padded up to a captured size) is counted once
    more under ``... full-uniform with padded rows``; ``sizes`` counts the same steps by their token count, which
    tells a batch that found no graph of its size from one that was never uniform.
    """

    def __init__(self) -> None:
        self.steps: Counter[str] = Counter()
        self.sizes: Counter[str] = Counter()
        self._saved: dict[str, Any] = {}

    def count(self, has_prompts: bool, result: Any, num_tokens: int | None = None) -> None:
        mode, descriptor = result[0], result[1]
        full = getattr(mode, "name", str(mode)) == "FULL"
        uniform = bool(getattr(descriptor, "uniform", getattr(descriptor, "uniform_decode", False)))
        kind = "full-uniform" if full and uniform else "full" if full else getattr(mode, "name", str(mode)).lower()
        phase = "prompt" if has_prompts else "decode"
        self.steps[f"{phase} steps, {kind}"] += 1
        padded_to = getattr(descriptor, "num_tokens", None)
        if kind == "full-uniform" and num_tokens is not None and padded_to is not None and padded_to > num_tokens:
            self.steps[f"{phase} steps, {kind} with padded rows"] += 1
        if num_tokens is not None:
            self.sizes[f"{phase} steps of {num_tokens} tokens, {kind}"] += 1

    def install(self) -> None:
        from vllm.v1.worker.gpu_model_runner import GPUModelRunner

        execute, decide = GPUModelRunner.execute_model, GPUModelRunner._determine_batch_execution_and_padding
        step: dict[str, bool | None] = {"prompts": None}  # None outside execute_model (captures, dummy runs)

        @functools.wraps(execute)
        def execute_model(runner: Any, scheduler_output: Any, *args: Any, **kwargs: Any) -> Any:
            step["prompts"] = bool(getattr(scheduler_output, "scheduled_new_reqs", None))
            try:
                return execute(runner, scheduler_output, *args, **kwargs)
            finally:
                step["prompts"] = None

        @functools.wraps(decide)
        def determine(runner: Any, *args: Any, **kwargs: Any) -> Any:
            result = decide(runner, *args, **kwargs)
            if step["prompts"] is not None:
                self.count(step["prompts"], result, kwargs.get("num_tokens", args[0] if args else None))
            return result

        self._saved = {"execute_model": execute, "_determine_batch_execution_and_padding": decide}
        GPUModelRunner.execute_model = execute_model
        GPUModelRunner._determine_batch_execution_and_padding = determine

    @property
    def installed(self) -> bool:
        return bool(self._saved)

    def uninstall(self) -> None:
        from vllm.v1.worker.gpu_model_runner import GPUModelRunner

        for name, original in self._saved.items():
            setattr(GPUModelRunner, name, original)
        self._saved = {}

    def snapshot(self) -> dict[str, int]:
        return dict(sorted(self.steps.items()))

    def sizes_snapshot(self) -> dict[str, int]:
        return dict(sorted(self.sizes.items()))


def gdn_layer_facts(model: Any) -> dict[str, Any]:
    """Which GDN layers the engine built, and which carry caovan's core (bound on the instance)."""
    gdn_class = stock_gdn_class()
    layers = [(name, m) for name, m in model.named_modules() if isinstance(m, gdn_class)]
    return {
        "gdn_layers": [name for name, _ in layers],
        "classes": sorted({type(m).__qualname__ for _, m in layers}),
        "caovan_core_bound": [name for name, m in layers if "_forward_core" in vars(m)],
        "num_spec": sorted({int(getattr(m, "num_spec", 0)) for _, m in layers}),
    }


def hf_init_weights(model: Any, a_log_range: tuple[float, float] = A_LOG_RANGES["hf-init"]) -> dict[str, Any]:
    """Re-draw the target model's weights the way Hugging Face initialises an untrained Qwen3-Next.

    Why: vLLM's dummy weights are uniform in [-1e-3, 1e-3] for every tensor, norm gains included.  The GDN
    branch then passes through a gated RMSNorm with gain ~1e-3 and an output projection of the same size, and
    adds about 1e-7 to a residual stream carried by ~6e-4 embeddings: below fp16 resolution, so the logits
    would not depend on the GDN kernels at all and a token comparison could not fail.  With Hugging Face's
    init (matrices normal(0, 0.02), Gemma-style RMSNorm offsets 0, gated-norm gain 1, GDN ``dt_bias`` 1 and
    ``A_log`` = log U(0, 16), as in ``Qwen3NextPreTrainedModel._init_weights``) the three GDN layers carry
    most of the residual stream.  Every tensor gets its own generator seeded from its name, so every engine
    of the tier gets the same weights.

    ``a_log_range``: Hugging Face's ``A_log = log U(0, 16)`` makes a head's state decay by about exp(-10) per token,
    so what a prompt left in the state is gone a token later and a lost prompt state hardly moves the logits.
    ``hf-init-long-memory`` draws ``log U(0.01, 0.1)`` instead (decay 0.88 - 0.99 per token, as the slow heads of
    trained models keep context): the FULL-graph tests need the prompt's state to matter.

    Kept at the dummy values: the MoE blocks (router, experts, shared expert).  Their output then stays
    negligible, which keeps expert routing, a discrete top-k choice that a rounding difference can flip, from
    moving the logits by more than rounding; the MoE is not what this tier tests.  The MTP draft keeps its
    dummy weights too (only tensors it shares with the target change).
    """
    import torch
    from vllm.model_executor.layers.layernorm import GemmaRMSNorm, RMSNormGated

    GatedDeltaNetAttention = stock_gdn_class()  # the family's in-tree layer class
    moe = moe_layer_class()
    moe_blocks = [name for name, m in model.named_modules() if any(isinstance(c, moe) for c in m.children())]
    rules: Counter[str] = Counter()
    untouched: list[str] = []
    with torch.inference_mode():
        for module_name, module in model.named_modules():
            in_moe = any(module_name == b or module_name.startswith(b + ".") for b in moe_blocks)
            for param_name, param in module.named_parameters(recurse=False):
                name = f"{module_name}.{param_name}" if module_name else param_name
                if in_moe:
                    rules["MoE block: kept dummy"] += 1
                    continue
                if not torch.is_floating_point(param):
                    untouched.append(name)
                    continue
                generator = torch.Generator(device=param.device)
                generator.manual_seed(zlib.crc32(name.encode()))
                if isinstance(module, GatedDeltaNetAttention) and param_name == "A_log":
                    low, high = a_log_range
                    param.uniform_(low, high, generator=generator).clamp_(min=1e-3).log_()
                    rule = f"A_log = log U({low:g}, {high:g})"
                elif isinstance(module, GatedDeltaNetAttention) and param_name == "dt_bias":
                    param.fill_(1.0)
                    rule = "dt_bias = 1"
                elif isinstance(module, GemmaRMSNorm) and param_name == "weight":
                    param.zero_()
                    rule = "Gemma RMSNorm offset = 0"
                elif isinstance(module, RMSNormGated) and param_name == "weight":
                    param.fill_(1.0)
                    rule = "gated RMSNorm gain = 1"
                elif param_name.endswith("bias"):
                    param.zero_()
                    rule = "bias = 0"
                elif param.dim() >= 2:
                    param.normal_(0.0, INITIALIZER_RANGE, generator=generator)
                    rule = f"matrix ~ normal(0, {INITIALIZER_RANGE})"
                else:
                    untouched.append(name)
                    continue
                rules[rule] += 1
    return {"rules": dict(rules), "untouched": untouched, "moe_blocks": moe_blocks}


def spec_decode_metrics(llm: Any) -> dict[str, Any]:
    names = {
        "vllm:spec_decode_num_drafts": "num_drafts",
        "vllm:spec_decode_num_draft_tokens": "num_draft_tokens",
        "vllm:spec_decode_num_accepted_tokens": "num_accepted_tokens",
    }
    out: dict[str, Any] = {}
    for metric in llm.get_metrics():
        if metric.name in names:
            key = names[metric.name]
            out[key] = out.get(key, 0) + metric.value
        elif metric.name == "vllm:spec_decode_num_accepted_tokens_per_pos":
            out["accepted_per_position"] = list(metric.values)
    if out.get("num_draft_tokens"):
        out["acceptance_rate"] = out.get("num_accepted_tokens", 0) / out["num_draft_tokens"]
    if out.get("num_drafts"):
        out["mean_acceptance_length"] = 1 + out.get("num_accepted_tokens", 0) / out["num_drafts"]
    return out


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


def cudagraph_mode_in_effect(llm: Any) -> str:
    """The cudagraph mode the engine settled on (vLLM may lower the one asked for, e.g. for an attention backend
    without FULL-graph support); "NONE" under enforce_eager."""
    mode = llm.llm_engine.vllm_config.compilation_config.cudagraph_mode
    return str(getattr(mode, "name", mode))


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
