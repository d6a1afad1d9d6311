"""The sm75 tier's ``cudagraph`` part: whether this vLLM's FULL CUDA graphs decode a GDN + MTP model right.

Turing owners run MTP on GDN layers; vLLM's default graph mode replays a prompt of 1 + K tokens through the FULL
graph captured for spec-decode and loses its state (vLLM issues 49918 and 53051). The answer comes from the same
probe of the row's real runner that ``caovan doctor`` and ``caovan serve`` use, and goes into docs/sm75.md as the
graph mode to run with, caovan on and off.
"""

from __future__ import annotations

import pytest

from caovan.sm75 import write_part
from caovan.sm75.part_cache import cached_part

pytestmark = pytest.mark.sm75


def _probe() -> dict:
    from caovan.adapters.registry import installed_full_graph_safety

    safety = installed_full_graph_safety()
    return {"with_caovan": safety.with_caovan, "without_caovan": safety.without_caovan, "reason": safety.reason}


def test_full_graph_safety_is_answered_for_this_vllm():
    # Cached by caovan's files and the installed vLLM's: a warm tier does not import vLLM for it.
    document, _ = cached_part("cudagraph", _probe)
    write_part("cudagraph", document)
    print(f"FULL_AND_PIECEWISE with MTP: caovan on {document['with_caovan']}, off {document['without_caovan']}")
    assert isinstance(document["with_caovan"], bool) and isinstance(document["without_caovan"], bool)
    assert document["reason"], "the probe gave no reason for its answer"
