"""Let vLLM's GDN metadata builder see a FULL-graph padded spec-decode batch as one (vLLM 0.12 - 0.16).

Patch of upstream behaviour, documented in place:

* Why: under FULL CUDA graphs the model runner pads a uniform spec-decode batch up to a captured size with requests
  of zero tokens and no drafts. vLLM's GDN builder up to 0.16 counts each of them as a prefill, so it skips the
  branch that writes the step's state indices, query offsets and accepted counts into the buffers the graph was
  captured with, and the graph replays the previous step's: NaN logits, or one request's tokens run on another's
  recurrent state (vLLM issue 31649; 0.17 leaves zero-token requests out of the prefill count). With MTP, every
  batch whose request count is not a capture size hits it, caovan on or off.
* How: ``GDNAttentionMetadataBuilder.build`` is wrapped on the class. When a batch with spec decodes ends in such
  requests, the builder is given ``common_attn_metadata.unpadded(num_actual_tokens, live)`` (vLLM's own trim, which
  keeps the padded token count) and the live requests' drafts and accepted counts: it then takes its graph-padded
  branch and lays the rows out as vLLM 0.17 does, the padding ones on the null slot with zero tokens. Every other
  batch is built as vLLM builds it. Installed once per process after the served model is built, only when caovan is
  enabled, the model has GDN layers and the builder's own source counts padding as prefill (probed:
  ``counts_padding_as_prefill``; the version is never read).
* Upstream: ``vllm/v1/attention/backends/gdn_attn.py``, ``GDNAttentionMetadataBuilder.build`` (``num_prefills`` from
  ``non_spec_query_lens``), and the request padding of ``GPUModelRunner._build_attention_metadata``
  (``num_reqs_padded``), vLLM 0.12 - 0.16.
* Remove when: the releases before vLLM 0.17 leave the matrix. The discovery test
  ``test_padded_spec_batch_takes_the_graph_branch`` builds a padded batch with each row's real builder and fails
  when the probe and the builder disagree.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import logging
import re
import sys
from typing import TYPE_CHECKING, Any

import torch

from .. import PLUGIN_NAME
from ..log import logger
from ..signatures import has_argument
from . import method_patch

if TYPE_CHECKING:  # handed in by the caller: this module never asks adapters/ for it
    from ..adapters.family import GdnFamily

BUILDER_CLASS = "GDNAttentionMetadataBuilder"
METADATA_CLASS = "CommonAttentionMetadata"
METHOD = "build"
#: ``build``'s parameters the patch reads and trims.
ARGUMENTS = ("common_attn_metadata", "num_accepted_tokens", "num_decode_draft_tokens_cpu")
ISSUE = "vLLM issue 31649"
#: ``build`` computes the prefill count from the query lengths ...
PREFILL_COUNT = re.compile(r"num_prefills\s*=[^\n]*query_lens")
#: ... and, from vLLM 0.17, tests them for zero length (the padding requests) to leave those out.
ZERO_LENGTH_TEST = re.compile(r"query_lens\w*\s*==\s*0\b")


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


def in_tree_builder(family: GdnFamily) -> type | None:
    """vLLM's GDN metadata builder, from the module the family record names; None where it is not there."""
    try:
        module = importlib.import_module(family.metadata_module)
    except Exception:  # no CUDA build of vLLM, or another layout
        return None
    cls = getattr(module, BUILDER_CLASS, None)
    return cls if isinstance(cls, type) else None


def counts_padding_as_prefill(cls: type) -> bool | None:
    """Whether ``cls.build`` counts zero-token requests as prefills: it computes ``num_prefills`` from the query
    lengths without leaving those of length 0 out (vLLM 0.12 - 0.16; 0.17 leaves them out). None when its source
    cannot be read or computes ``num_prefills`` elsewhere (the premise is then unknown)."""
    try:
        source = inspect.getsource(method_patch.unwrapped(cls.__dict__.get(METHOD)))
    except (OSError, TypeError):
        return None
    if PREFILL_COUNT.search(source) is None:
        return None
    return ZERO_LENGTH_TEST.search(source) is None


def patch_fits(family: GdnFamily, cls: type) -> bool:
    """Whether ``build`` takes what the patch trims, by name, and the metadata can trim itself
    (``CommonAttentionMetadata.unpadded``, as the builder's module imports the class)."""
    method = method_patch.unwrapped(cls.__dict__.get(METHOD))
    if method is None or not all(has_argument(method, a) for a in ARGUMENTS):
        return False
    metadata = getattr(sys.modules.get(family.metadata_module), METADATA_CLASS, None)
    return callable(getattr(metadata, "unpadded", None))


def judgement(family: GdnFamily | None) -> tuple[bool, bool, str] | None:
    """(safe with caovan on, safe with it off, why) for FULL graphs with MTP as far as padding goes; None when the
    builder leaves zero-token requests out itself, or when that cannot be told (no builder, no readable source)."""
    cls = in_tree_builder(family) if family is not None else None
    if cls is None or not counts_padding_as_prefill(cls):
        return None
    bug = (
        f"vLLM's GDN builder counts the zero-token requests a FULL graph is padded with as prefills, so the graph "
        f"replays stale metadata when the batch is not a capture size ({ISSUE})"
    )
    if not patch_fits(family, cls):
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
    """Wrap the builder once per process where it counts padding as prefill; True when the patch is in place (now
    or already). Says in one line when the builder needs it and it cannot go in."""
    verdict = judgement(family)
    if verdict is None:
        return False
    if not verdict[0]:
        logger.log(logging.WARNING, "%s: %s", PLUGIN_NAME, verdict[2])
        return False
    method_patch.wrap_once(in_tree_builder(family), METHOD, wrap)  # type: ignore[arg-type]
    return True


def uninstall(family: GdnFamily) -> bool:
    """Put vLLM's method back; True when the patch was in place. Imports nothing: a builder module never imported
    was never wrapped."""
    return method_patch.restore(family.metadata_module, BUILDER_CLASS, METHOD)
