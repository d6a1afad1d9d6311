"""Let vLLM's GDN metadata builder see a FULL-graph padded spec-decode batch as one (vLLM 0.12 - 0.17).

Patch of upstream behaviour, documented in place:

* Why: under FULL CUDA graphs the model runner pads a uniform spec-decode batch up to a captured size with requests
  of zero tokens and no drafts. vLLM's GDN builder before 0.18 counts each of them as a prefill, so it skips the
  branch that writes the step's state indices, query offsets and accepted counts into the buffers the graph was
  captured with, and the graph replays the previous step's: NaN logits, or one request's tokens run on another's
  recurrent state (vLLM issue 31649; 0.18 leaves zero-token requests out of the prefill count). With MTP, every
  batch whose request count is not a capture size hits it, caovan on or off.
* How: ``GDNAttentionMetadataBuilder.build`` is wrapped on the class. When a batch with spec decodes ends in such
  requests, the builder is given ``common_attn_metadata.unpadded(num_actual_tokens, live)`` (vLLM's own trim, which
  keeps the padded token count) and the live requests' drafts and accepted counts: it then takes its graph-padded
  branch and lays the rows out as vLLM 0.18 does, the padding ones on the null slot with zero tokens. Every other
  batch is built as vLLM builds it. Installed once per process after the served model is built, only when caovan is
  enabled, the model has GDN layers and the family record says ``counts_graph_padding_as_prefill``.
* Upstream: ``vllm/v1/attention/backends/gdn_attn.py``, ``GDNAttentionMetadataBuilder.build`` (``num_prefills`` from
  ``non_spec_query_lens``), and the request padding of ``GPUModelRunner._build_attention_metadata``
  (``num_reqs_padded``), vLLM 0.12 - 0.17.
* Remove when: the families before vLLM 0.18 leave the matrix. The discovery test
  ``test_padded_spec_batch_takes_the_graph_branch`` fails for a row whose builder stops counting padding as prefill
  while its record says it does.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import logging
from typing import Any

import torch

from .. import PLUGIN_NAME
from ..adapters.base import has_argument
from ..adapters.family import GdnFamily
from ..log import logger
from . import method_patch

BUILDER_CLASS = "GDNAttentionMetadataBuilder"
METADATA_CLASS = "CommonAttentionMetadata"
METHOD = "build"
#: ``build``'s parameters the patch reads and trims.
ARGUMENTS = ("common_attn_metadata", "num_accepted_tokens", "num_decode_draft_tokens_cpu")
ISSUE = "vLLM issue 31649"


def live_requests(query_start_loc_cpu: torch.Tensor, drafts: torch.Tensor | None) -> int | None:
    """How many requests of a spec-decode batch come before its CUDA-graph padding (zero tokens, no drafts); None
    when there is nothing to trim: no padding, no spec decode, or no live request."""
    if drafts is None:
        return None
    query_lens = query_start_loc_cpu[1:] - query_start_loc_cpu[:-1]
    padding = (query_lens == 0) & (drafts[: query_lens.shape[0]] < 0)
    trailing = int(padding.flip(0).to(torch.int32).cumprod(0).sum())
    live = query_lens.shape[0] - trailing
    if trailing == 0 or live == 0 or not bool((drafts[:live] >= 0).any()):
        return None
    return live


def builder_class(family: GdnFamily) -> type | None:
    """vLLM's GDN builder when its ``build`` takes what the patch trims and the metadata it is given can trim itself
    (``CommonAttentionMetadata.unpadded``, as the builder's module imports the class); None otherwise (then the
    patch cannot go in)."""
    try:
        module = importlib.import_module(family.metadata_module)
    except Exception:  # no CUDA build of vLLM, or another layout
        return None
    cls = getattr(module, BUILDER_CLASS, None)
    method = getattr(cls, METHOD, None)
    method = getattr(method, method_patch.WRAPPED, method)
    if not isinstance(cls, type) or method is None or not all(has_argument(method, a) for a in ARGUMENTS):
        return None
    if not callable(getattr(getattr(module, METADATA_CLASS, None), "unpadded", None)):
        return None
    return cls


def judgement(family: GdnFamily | None) -> tuple[bool, bool, str] | None:
    """(safe with caovan on, safe with it off, why) for FULL graphs with MTP as far as padding goes; None when the
    family's builder handles padding itself."""
    if family is None or not family.counts_graph_padding_as_prefill:
        return None
    bug = (
        f"vLLM's GDN builder counts the zero-token requests a FULL graph is padded with as prefills, so the graph "
        f"replays stale metadata when the batch is not a capture size ({ISSUE})"
    )
    if builder_class(family) is None:
        return False, False, f"{bug}; caovan's patch of {BUILDER_CLASS}.{METHOD} does not fit this vLLM"
    return True, False, f"{bug}; caovan's patch hands it the live requests only"


def wrap(original: Any) -> Any:
    signature = inspect.signature(original)

    @functools.wraps(original)
    def build(*args: Any, **kwargs: Any) -> Any:
        bound = signature.bind(*args, **kwargs)
        common = bound.arguments.get(ARGUMENTS[0])
        drafts = bound.arguments.get(ARGUMENTS[2])
        live = None if common is None else live_requests(common.query_start_loc_cpu, drafts)
        if live is not None:
            bound.arguments[ARGUMENTS[0]] = common.unpadded(common.num_actual_tokens, live)
            bound.arguments[ARGUMENTS[2]] = drafts[:live]
            accepted = bound.arguments.get(ARGUMENTS[1])
            if accepted is not None:
                bound.arguments[ARGUMENTS[1]] = accepted[:live]
        return original(*bound.args, **bound.kwargs)

    setattr(build, method_patch.WRAPPED, original)
    return build


def install(family: GdnFamily) -> bool:
    """Wrap the builder once per process where the family needs it; True when the patch is in place (now or
    already). Says in one line when the family needs it and it cannot go in."""
    if not family.counts_graph_padding_as_prefill:
        return False
    cls = builder_class(family)
    current = cls.__dict__.get(METHOD) if cls is not None else None
    if current is None:
        logger.log(logging.WARNING, "%s: %s", PLUGIN_NAME, judgement(family)[2])  # type: ignore[index]
        return False
    method_patch.wrap_once(cls, METHOD, wrap)
    return True


def uninstall(family: GdnFamily) -> bool:
    """Put vLLM's method back; True when the patch was in place. Imports nothing: a builder module never imported
    was never wrapped."""
    return method_patch.restore(family.metadata_module, BUILDER_CLASS, METHOD)
