"""What the serve tier's engine runner observes in a running vLLM engine: calls of vLLM's own spec-decode GDN
kernels, how the model runner dispatched each step to CUDA graphs, which GDN layers carry caovan's core, the
spec-decode metrics and the cudagraph mode in effect. Each reads the installed family's record."""

from __future__ import annotations

import functools
import importlib
from collections import Counter
from typing import Any


def stock_spec_kernels() -> tuple[str, ...]:
    """The kernels of the installed family's spec path that take ``num_accepted_tokens`` (the spec calls' mark)."""
    from caovan.adapters.registry import installed_family

    return tuple(name for name, keywords in installed_family().spec_path if "num_accepted_tokens" in keywords)


def stock_gdn_module() -> str:
    """The GDN module of the installed vLLM's family, whose spec-decode kernel calls are counted."""
    from caovan.adapters.registry import installed_family

    return installed_family().gdn_module


def stock_gdn_class() -> type:
    """The installed vLLM's in-tree GDN layer class (caovan's override subclasses it)."""
    from caovan.adapters.override import in_tree_class
    from caovan.adapters.registry import installed_family

    return in_tree_class(installed_family())


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


#: Why the FULL-graph dispatch cannot be counted on a vLLM without the runner the counter wraps.
RUNNER_GONE = "vLLM's vllm.v1.worker.gpu_model_runner.GPUModelRunner is not in this vLLM: graph dispatch not counted"


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
        """Wrap vLLM's runner; RuntimeError naming what is missing where this vLLM has no such runner (0.34's
        vllm/v1/worker/gpu/model_runner.py decides its graphs elsewhere): the serve runner records it."""
        try:
            from vllm.v1.worker.gpu_model_runner import GPUModelRunner
        except ImportError as exc:
            raise RuntimeError(f"{RUNNER_GONE} ({exc})") from exc

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
        if not self._saved:
            return
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


def cudagraph_mode_in_effect(llm: Any) -> str:
    """The cudagraph mode the engine settled on (vLLM may lower the one asked for, e.g. for an attention backend
    without FULL-graph support); "NONE" under enforce_eager."""
    mode = llm.llm_engine.vllm_config.compilation_config.cudagraph_mode
    return str(getattr(mode, "name", mode))
