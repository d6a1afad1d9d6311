"""What ``caovan serve`` says about vLLM's CUDA graph mode before it starts a GDN + MTP model.

vLLM's default mode, ``FULL_AND_PIECEWISE``, decodes such a model right only where nothing sends a prompt through
the FULL graph captured for spec-decode (:func:`caovan.adapters.registry.installed_full_graph_safety` judges this
vLLM, probed). Where it is safe for the run the user asked for (caovan on or off, pipeline parallel or not), serve
says so; where it is not, it recommends PIECEWISE. The user's arguments are never changed, and a user who chose the
mode (``cudagraph_mode`` anywhere, ``--enforce-eager``) hears nothing.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from caovan.serving.serve_flags import flag_name, parallel_size, split_double_dash


def users_graph_choice(args: Sequence[str], config: Mapping[str, Any]) -> str | None:
    """How the user set the graph mode (a flag or a ``--config`` key), or None where vLLM's default applies."""
    head, _ = split_double_dash(args)
    for token in head:
        if "cudagraph_mode" in token:
            return "cudagraph_mode"
        if flag_name(token) == "--enforce-eager":
            return "--enforce-eager"
    # read_config_file spells the keys with dashes, as vLLM's flags.
    if config.get("enforce-eager"):
        return "enforce_eager"
    compilation = config.get("compilation-config")
    if compilation is not None and "cudagraph_mode" in json.dumps(compilation):
        return "cudagraph_mode"
    return None


def graph_note(
    args: Sequence[str], config: Mapping[str, Any], caovan_on: bool, judge: Callable[[int], Any] | None = None
) -> str | None:
    """The note for a run with speculative decoding; None when the user chose the graph mode."""
    if users_graph_choice(args, config) is not None:
        return None
    if judge is None:
        from caovan.adapters.registry import installed_full_graph_safety as judge
    try:
        safety = judge(parallel_size(args, config, "--pipeline-parallel-size", "-pp"))
    except Exception as exc:  # a probe of vLLM's runner; serve goes on without the advice
        return f"cudagraphs: FULL CUDA graphs with MTP not judged ({type(exc).__name__}: {exc})"
    return f"cudagraphs: vLLM's default FULL_AND_PIECEWISE; {safety.verdict(caovan_on)}"
