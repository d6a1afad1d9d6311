"""The fp32 q/k scratch the Q/K kernel writes and the V/GDN kernel reads: normalised q and k, once per key head."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from .plans import LaunchPlan


def qk_scratch(plan: LaunchPlan, device: torch.device, stream: int | None) -> torch.Tensor:
    """The q/k scratch of one call: reused by the eager calls of a plan on one stream, fresh otherwise.

    Allocating it (``torch.empty``) was ~3 us of a ~24 us eager call on an H200 host, paid for every GDN layer
    of every decode step under PIECEWISE graphs. Reuse is safe on one stream: the Q/K kernel of the next call
    writes it only after the V/GDN kernel that read it is done (stream order; with programmatic dependent
    launch the Q/K kernel's ``gdc_wait()`` waits for the kernel before it). A call on another stream gets its
    own buffer. Under CUDA-graph capture a fresh buffer is taken from the graph's pool, so that a replay never
    shares memory with eager calls or other graphs. Interpreted (CPU) calls have no stream: fresh each time.
    """
    if stream is None or torch.cuda.is_current_stream_capturing():
        return torch.empty(plan.scratch_shape, dtype=torch.float32, device=device)
    scratch = plan.scratch_by_stream.get(stream)
    if scratch is None:
        scratch = plan.scratch_by_stream[stream] = torch.empty(plan.scratch_shape, dtype=torch.float32, device=device)
    return scratch
