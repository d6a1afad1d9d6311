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
  ``_determine_batch_execution_and_padding`` (the same in vLLM 0.19 - 0.33).
* Remove when: vLLM's classification asks whether every request is decoding. The discovery test
  ``test_vllm_still_tells_uniform_decode_by_shape_alone`` fails then.
"""

from __future__ import annotations

import functools
import importlib
import logging
import sys
from typing import Any

from .. import PLUGIN_NAME
from ..adapters.base import has_argument
from ..log import logger

RUNNER_MODULE = "vllm.v1.worker.gpu_model_runner"
RUNNER_CLASS = "GPUModelRunner"
METHOD = "_determine_batch_execution_and_padding"
#: The input-batch arrays the decision reads (numpy, one entry per request slot).
BATCH_FIELDS = ("num_computed_tokens_cpu", "num_prompt_tokens")


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
    method = getattr(method, "_caovan_wrapped", method)
    if not isinstance(cls, type) or method is None or not has_argument(method, "force_uniform_decode"):
        return None
    return cls


def wrap(original: Any) -> Any:
    @functools.wraps(original)
    def determine(self: Any, *args: Any, **kwargs: Any) -> Any:
        if kwargs.get("force_uniform_decode") is None:
            num_reqs = kwargs.get("num_reqs", args[1] if len(args) > 1 else None)
            if num_reqs is not None and batch_has_prompt_tokens(getattr(self, "input_batch", None), num_reqs):
                kwargs["force_uniform_decode"] = False
        return original(self, *args, **kwargs)

    determine._caovan_wrapped = original  # type: ignore[attr-defined]
    return determine


def install(vllm_config: Any) -> bool:
    """Wrap the dispatch once per process; True when the guard is in place (now or already)."""
    if getattr(getattr(vllm_config, "parallel_config", None), "pipeline_parallel_size", 1) > 1:
        logger.warning(
            "%s: prompts of 1 + num_speculative_tokens tokens are not kept out of FULL CUDA graphs with pipeline "
            'parallelism (vLLM issue 49918): use --compilation-config \'{"cudagraph_mode": "PIECEWISE"}\'',
            PLUGIN_NAME,
        )
        return False
    cls = runner_class()
    if cls is None:
        return False
    current = cls.__dict__.get(METHOD)
    if current is None:
        return False
    if getattr(current, "_caovan_wrapped", None) is None:
        setattr(cls, METHOD, wrap(current))
        logger.log(
            logging.INFO,
            "%s: prompts of 1 + num_speculative_tokens tokens kept out of the spec-decode FULL CUDA graph "
            "(vLLM issue 49918)",
            PLUGIN_NAME,
        )
    return True


def uninstall() -> bool:
    """Put vLLM's method back; True when the guard was in place. Imports nothing: a runner module never imported
    was never wrapped."""
    cls = getattr(sys.modules.get(RUNNER_MODULE), RUNNER_CLASS, None)
    current = cls.__dict__.get(METHOD) if isinstance(cls, type) else None
    original = getattr(current, "_caovan_wrapped", None)
    if original is None:
        return False
    setattr(cls, METHOD, original)
    return True
