"""vLLM's own GDN prefill core, for a side-by-side comparison with ``caovan.kernels.gdn_prefill.gdn_prefill``.

``VllmPrefill`` replays the recurrent half of the prefill branch of the GDN layer's ``_forward_core``, statement by
statement (vLLM 0.21.0: vllm/model_executor/layers/mamba/gdn_linear_attn.py, "2.2: Process the remaining part";
0.12 - 0.18: .../models/qwen3_next.py, the same statements):

1. ``initial_state = ssm_state[non_spec_state_indices_tensor].contiguous()``;
2. ``initial_state[~has_initial_state, ...] = 0``;
3. ``core_attn_out_non_spec, last_recurrent_state = chunk_gated_delta_rule(q, k, v, g, beta,
   initial_state=initial_state, output_final_state=True, cu_seqlens=non_spec_query_start_loc,
   use_qk_l2norm_in_kernel=...)`` (FLA's Triton pipeline, from the family's ``fla_ops_module``; vLLM 0.20 on
   wraps it in a ``ChunkGatedDeltaRule`` custom op whose Triton path calls the same function; its FlashInfer path
   needs sm_90 and is not what a 2080 Ti runs);
4. ``ssm_state[non_spec_state_indices_tensor] = last_recurrent_state.to(ssm_state.dtype)``;
5. the output copied into ``core_attn_out``.

It takes the tensors ``gdn_prefill`` takes, so both run on clones of one input set. Only the keywords every served
release's ``chunk_gated_delta_rule`` accepts are passed, plus ``chunk_indices``/``chunk_offsets`` where it takes
them (vLLM 0.20 on): vLLM's metadata builder makes those on the host once per step (``chunk_metadata`` does the
same), so that FLA's prefill does not make them with a device-to-host copy in every layer call.
"""

from __future__ import annotations

import importlib
import inspect
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

    from caovan.adapters.family import GdnFamily

#: The FLA function vLLM's prefill branch reaches, in the family's ``fla_ops_module``.
PREFILL_FUNCTION = "chunk_gated_delta_rule"
#: FLA's chunk size (``FLA_CHUNK_SIZE``, 64 in every served release).
FLA_CHUNK = 64


class VllmPrefill:
    """vLLM's GDN prefill (gather, FLA's chunked kernels, scatter), with ``gdn_prefill``'s calling convention."""

    def __init__(self, family: GdnFamily | None = None):
        if family is None:
            from caovan.adapters.registry import installed_family

            family = installed_family()
        self.family = family
        try:
            module = importlib.import_module(family.fla_ops_module)
        except Exception as exc:  # vLLM import failures are not always ImportError
            raise ImportError(
                f"cannot import vLLM's FLA ops {family.fla_ops_module!r}: {type(exc).__name__}: {exc}"
            ) from exc
        self.function = getattr(module, PREFILL_FUNCTION, None)
        if self.function is None:
            raise ImportError(f"{family.fla_ops_module} has no {PREFILL_FUNCTION}")
        self.module_name = family.fla_ops_module
        try:
            parameters = inspect.signature(self.function).parameters
        except (TypeError, ValueError):
            parameters = {}
        self.takes_chunk_metadata = "chunk_indices" in parameters and "chunk_offsets" in parameters

    def chunk_metadata(self, cu_seqlens: torch.Tensor) -> dict[str, torch.Tensor]:
        """``chunk_indices``/``chunk_offsets`` as vLLM's GDN metadata builder makes them (FLA's ``index.py``: one
        (sequence, chunk) row per chunk; each sequence's first chunk), built on the host; {} where not taken."""
        if not self.takes_chunk_metadata:
            return {}
        import torch

        lens = (cu_seqlens[1:] - cu_seqlens[:-1]).cpu()
        counts = (lens + FLA_CHUNK - 1) // FLA_CHUNK
        indices = torch.cat([torch.arange(int(n)) for n in counts]) if counts.numel() else torch.zeros(0)
        chunk_indices = torch.stack([indices.eq(0).cumsum(0) - 1, indices], 1)
        chunk_offsets = torch.cat([counts.new_zeros(1), counts]).cumsum(-1)
        device, dtype = cu_seqlens.device, cu_seqlens.dtype
        return {"chunk_indices": chunk_indices.to(device, dtype), "chunk_offsets": chunk_offsets.to(device, dtype)}

    def __call__(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        g: torch.Tensor,
        beta: torch.Tensor,
        out: torch.Tensor,
        ssm_state: torch.Tensor,
        cu_seqlens: torch.Tensor,
        *,
        state_indices: torch.Tensor | None = None,
        has_initial_state: torch.Tensor | None = None,
        scale: float | None = None,
        use_qk_l2norm: bool = True,
        chunk_metadata: dict[str, torch.Tensor] | None = None,
        **_: Any,
    ) -> None:
        """The family's statements on these tensors (``ssm_layout`` and ``null_slot_max`` are the family's own:
        vLLM gathers and scatters every slot it is given, null ones included). ``chunk_metadata``: what
        ``chunk_metadata(cu_seqlens)`` returns, made before a timed call; made here when not given."""
        n = cu_seqlens.shape[0] - 1
        index = state_indices[:n] if state_indices is not None else slice(0, n)
        initial_state = ssm_state[index].contiguous()
        if has_initial_state is not None:
            initial_state[~has_initial_state[:n], ...] = 0
        keywords = dict(self.chunk_metadata(cu_seqlens) if chunk_metadata is None else chunk_metadata)
        if scale is not None:
            keywords["scale"] = scale
        o, final_state = self.function(
            q=q.reshape(1, *q.shape[-3:]),
            k=k.reshape(1, *k.shape[-3:]),
            v=v.reshape(1, *v.shape[-3:]),
            g=g.reshape(1, *g.shape[-2:]),
            beta=beta.reshape(1, *beta.shape[-2:]),
            initial_state=initial_state,
            output_final_state=True,
            cu_seqlens=cu_seqlens,
            use_qk_l2norm_in_kernel=use_qk_l2norm,
            **keywords,
        )
        ssm_state[index] = final_state.to(ssm_state.dtype)
        out.copy_(o.reshape(out.shape))
