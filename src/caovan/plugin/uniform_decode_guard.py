"""Keep prompts out of the FULL CUDA graph vLLM captures for spec-decode, in models with GDN layers.

Patch of upstream behaviour, documented in place:

* Why: ``GPUModelRunner._is_uniform_decode`` tells a uniform decode batch by its shape alone (every request
  scheduled ``1 + num_speculative_tokens`` tokens). A prompt of exactly that many tokens, or a batch of such prompts,
  has that shape, and under ``FULL_AND_PIECEWISE`` it replays the FULL graph captured for spec-verify. That graph's
  GDN metadata is the capture's, so the request's recurrent state is never written and every later step starts
  from nothing: deterministic garbage for that request (vLLM issues 49918 and 53051; fixes proposed in pull
  requests 47123 and 53059, open). Dense attention computes the same either way, which is why only hybrid models
  show it.
* How: ``GPUModelRunner._determine_batch_execution_and_padding`` is wrapped on the class. Where vLLM leaves the
  decision to the shape (``force_uniform_decode`` is None, i.e. not a capture) and a request of the batch is still in
  its prompt (``num_computed_tokens < num_prompt_tokens``, read from the runner's input batch), it is called with
  ``force_uniform_decode=False``: that batch is not dispatched as a uniform decode, as any other prefill is not.
  Installed once per worker process, after the served model is built, only when caovan is enabled and the model has
  GDN layers; with pipeline parallelism, where the worker asks the same question before the batch is prepared, it is
  not installed (the two answers must agree), and the log says so.
* Upstream: ``vllm/v1/worker/gpu_model_runner.py``, ``GPUModelRunner._is_uniform_decode`` and
  ``_determine_batch_execution_and_padding`` (the same in vLLM 0.12 - 0.33).
* Remove when: vLLM's classification asks whether every request is decoding. The discovery test
  ``test_vllm_still_tells_uniform_decode_by_shape_alone`` fails then.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import inspect
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .. import PLUGIN_NAME
from ..log import logger
from ..signatures import has_argument
from . import graph_padding_patch, method_patch

if TYPE_CHECKING:  # the family is handed in by whoever knows it: this module never asks adapters/ for it
    from ..adapters.family import GdnFamily

RUNNER_MODULE = "vllm.v1.worker.gpu_model_runner"
#: The model runner that replaced it (vLLM 0.34 has only this one): caovan's guard does not know its dispatch.
NEW_RUNNER_MODULE = "vllm.v1.worker.gpu.model_runner"
RUNNER_CLASS = "GPUModelRunner"
METHOD = "_determine_batch_execution_and_padding"
#: The input-batch arrays the decision reads (numpy, one entry per request slot).
BATCH_FIELDS = ("num_computed_tokens_cpu", "num_prompt_tokens")
#: What vLLM's classification compares (the shape test) and what it would read if it asked whether each request
#: is decoding (then the guard can go).
SHAPE_TEST = "max_num_scheduled_tokens == "
PHASE_WORDS = ("num_computed_tokens", "num_prompt_tokens", "is_prefill")
PIECEWISE_HINT = """--compilation-config '{"cudagraph_mode": "PIECEWISE"}'"""


def batch_has_prompt_tokens(input_batch: Any, num_reqs: int) -> bool | None:
    """Whether a request among the batch's first ``num_reqs`` is still in its prompt; None when the batch does not
    carry the arrays this reads (then vLLM decides alone)."""
    computed = getattr(input_batch, BATCH_FIELDS[0], None)
    prompt = getattr(input_batch, BATCH_FIELDS[1], None)
    if computed is None or prompt is None:
        return None
    return bool((computed[:num_reqs] < prompt[:num_reqs]).any())


def runner_class() -> type | None:
    """vLLM's ``GPUModelRunner`` when its dispatch method takes ``force_uniform_decode``; None otherwise."""
    try:
        module = importlib.import_module(RUNNER_MODULE)
    except Exception:  # another layout (or no CUDA build): nothing to guard
        return None
    cls = getattr(module, RUNNER_CLASS, None)
    method = getattr(cls, METHOD, None)
    method = method_patch.unwrapped(method)
    if not isinstance(cls, type) or method is None or not has_argument(method, "force_uniform_decode"):
        return None
    return cls


def _module_exists(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):  # a parent package that is not there
        return False


def tells_uniform_decode_by_shape(cls: type) -> bool | None:
    """Whether vLLM's uniform-decode classification reads the batch's shape alone (vLLM issue 49918); None when
    its source cannot be read or holds no shape test (moved: the guard's premise is then unknown)."""
    methods = [getattr(cls, METHOD, None), getattr(cls, "_is_uniform_decode", None)]
    try:
        source = "".join(inspect.getsource(method_patch.unwrapped(m)) for m in methods if m is not None)
    except (OSError, TypeError):
        return None
    if SHAPE_TEST not in source:
        return None
    return not any(word in source for word in PHASE_WORDS)


@dataclass(frozen=True)
class FullGraphSafety:
    """Whether FULL CUDA graphs (vLLM's default ``FULL_AND_PIECEWISE``) decode a GDN + MTP model right."""

    with_caovan: bool
    without_caovan: bool
    reason: str

    def summary(self) -> str:
        """Both answers in one line (``caovan doctor``, which cannot know whether the server will switch it on)."""
        words = {True: "safe", False: "NOT safe"}
        text = f"with MTP: {words[self.with_caovan]} with caovan on, {words[self.without_caovan]} with it off"
        if not self.without_caovan:
            text += f" (then use {PIECEWISE_HINT})" if self.with_caovan else f" (use {PIECEWISE_HINT})"
        return f"{text}: {self.reason}"

    def verdict(self, caovan_on: bool) -> str:
        safe = self.with_caovan if caovan_on else self.without_caovan
        side = "with caovan on" if caovan_on else "with caovan off"
        return f"FULL CUDA graphs with MTP are {'safe' if safe else 'NOT safe'} {side}: {self.reason}" + (
            "" if safe else f"; use {PIECEWISE_HINT}"
        )


def full_graph_safety(family: GdnFamily | None, pipeline_parallel_size: int = 1) -> FullGraphSafety:
    """This vLLM's answer, from what its runner does (probed, not looked up by version) and, for ``family``'s
    builder (the family the installed vLLM lands in; None where it lands in none), how it meets a padded batch
    (``plugin/graph_padding_patch.py``). ``adapters.registry.installed_full_graph_safety`` finds the family."""
    return _with_padding(_uniform_decode_safety(pipeline_parallel_size), family)


def _with_padding(shape: FullGraphSafety, family: GdnFamily | None) -> FullGraphSafety:
    """The runner's answer, with the builder's on padded batches added where it has one."""
    padding = graph_padding_patch.judgement(family)
    if padding is None:
        return shape
    with_caovan, without_caovan, reason = padding
    return FullGraphSafety(
        shape.with_caovan and with_caovan, shape.without_caovan and without_caovan, f"{shape.reason}; {reason}"
    )


def _uniform_decode_safety(pipeline_parallel_size: int) -> FullGraphSafety:
    cls = runner_class()
    if cls is None:
        moved = ""
        if _module_exists(NEW_RUNNER_MODULE) and not _module_exists(RUNNER_MODULE):
            moved = f" ({RUNNER_MODULE} is gone; {NEW_RUNNER_MODULE} runs the model, and the guard does not know it)"
        return FullGraphSafety(
            False,
            False,
            f"{RUNNER_CLASS}.{METHOD}(force_uniform_decode) is not in this vLLM{moved}, so caovan cannot keep "
            "prompts of 1 + num_speculative_tokens tokens out of the spec-decode FULL graph",
        )
    by_shape = tells_uniform_decode_by_shape(cls)
    if by_shape is False:
        return FullGraphSafety(True, True, "vLLM asks whether each request is decoding before it replays that graph")
    if by_shape is None:
        return FullGraphSafety(
            False, False, f"vLLM's uniform-decode test moved ({RUNNER_CLASS}.{METHOD}): caovan's guard is unchecked"
        )
    bug = (
        "vLLM tells a uniform spec-decode batch by its shape alone, so a prompt of 1 + num_speculative_tokens tokens "
        "replays the spec-decode FULL graph and its GDN state is lost (vLLM issues 49918, 53051)"
    )
    if pipeline_parallel_size > 1:
        return FullGraphSafety(False, False, f"{bug}; caovan's guard is off with pipeline parallelism")
    return FullGraphSafety(True, False, f"{bug}; caovan's guard keeps such batches out of it")


def wrap(original: Any) -> Any:
    @functools.wraps(original)
    def determine(self: Any, *args: Any, **kwargs: Any) -> Any:
        if kwargs.get("force_uniform_decode") is None:
            num_reqs = kwargs.get("num_reqs", args[1] if len(args) > 1 else None)
            if num_reqs is not None and batch_has_prompt_tokens(getattr(self, "input_batch", None), num_reqs):
                kwargs["force_uniform_decode"] = False
        return original(self, *args, **kwargs)

    setattr(determine, method_patch.WRAPPED, original)
    return determine


def install(vllm_config: Any, family: GdnFamily | None) -> bool:
    """Wrap the dispatch once per process where this vLLM needs it, and log the start-up line that says whether
    FULL CUDA graphs with MTP are safe; True when the guard is in place (now or already)."""
    pipeline_parallel_size = getattr(getattr(vllm_config, "parallel_config", None), "pipeline_parallel_size", 1)
    shape = _uniform_decode_safety(pipeline_parallel_size)
    safety = _with_padding(shape, family)
    cls = runner_class()
    current = cls.__dict__.get(METHOD) if cls is not None else None
    installed = shape.with_caovan and not shape.without_caovan and current is not None
    if installed:
        method_patch.wrap_once(cls, METHOD, wrap)
    level = logging.INFO if safety.with_caovan else logging.WARNING
    logger.log(level, "%s: %s", PLUGIN_NAME, safety.verdict(caovan_on=True))
    return installed


def uninstall() -> bool:
    """Put vLLM's method back; True when the guard was in place. Imports nothing: a runner module never imported
    was never wrapped."""
    return method_patch.restore(RUNNER_MODULE, RUNNER_CLASS, METHOD)
