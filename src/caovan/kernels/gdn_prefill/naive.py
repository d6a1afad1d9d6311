"""Plain-PyTorch reference of the GDN prefill: the float64 oracle of every prefill kernel test.

Token by token, with the semantics of vLLM's prefill branch around FLA's ``chunk_gated_delta_rule`` (q/k
L2-normalised when asked, ``g`` in log space, ``beta`` as given): sequence ``n`` of ``cu_seqlens`` starts from the
state in cache slot ``state_indices[n]`` where ``has_initial_state[n]`` (zeros otherwise), writes its output rows
into ``out`` and its final state back into that slot, in the cache's layout. A slot ``<= null_slot_max`` is null:
zeros in, nothing written back. ``state_indices`` None: slot ``n`` (vLLM's gathered initial states). Host syncs are
fine here: it is an oracle.
"""

from __future__ import annotations

import torch

from ..gdn_spec_decode.naive import _l2norm


@torch.no_grad()
def gdn_prefill_reference(
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
    ssm_layout: str = "vk",
    null_slot_max: int = 0,
    write_final_state: bool = True,
    compute_dtype: torch.dtype = torch.float64,
) -> None:
    """Reference for :func:`caovan.kernels.gdn_prefill.gdn_prefill` (same arguments)."""
    if ssm_layout not in ("vk", "kv"):
        raise ValueError(f"ssm_layout: expected 'vk' or 'kv', got {ssm_layout!r}")
    cd = compute_dtype
    H, K = q.shape[-2], q.shape[-1]
    HV, V = v.shape[-2], v.shape[-1]
    q, k, v = q.reshape(-1, H, K).to(cd), k.reshape(-1, H, K).to(cd), v.reshape(-1, HV, V).to(cd)
    g, beta = g.reshape(-1, HV).to(cd), beta.reshape(-1, HV).to(cd)
    if use_qk_l2norm:
        q, k = _l2norm(q), _l2norm(k)
    q = q * (K**-0.5 if scale is None else scale)
    head_of = torch.arange(HV, device=q.device) // (HV // H)
    starts = cu_seqlens.tolist()
    slots = state_indices.tolist() if state_indices is not None else list(range(len(starts) - 1))
    initial = has_initial_state.tolist() if has_initial_state is not None else [True] * len(slots)
    for n in range(len(starts) - 1):
        slot = slots[n]
        live = state_indices is None or slot > null_slot_max
        state = torch.zeros(HV, V, K, dtype=cd, device=q.device)
        if live and initial[n]:
            state = ssm_state[slot].to(cd)
            if ssm_layout == "kv":
                state = state.transpose(-1, -2)  # work in (HV, V, K)
        for t in range(starts[n], starts[n + 1]):
            k_t, q_t = k[t][head_of], q[t][head_of]  # (HV, K)
            state = state * torch.exp(g[t])[:, None, None]
            delta = (v[t] - torch.einsum("hvk,hk->hv", state, k_t)) * beta[t][:, None]
            state = state + delta[:, :, None] * k_t[:, None, :]
            out[t] = torch.einsum("hvk,hk->hv", state, q_t).to(out.dtype)
        if live and write_final_state:
            ssm_state[slot] = (state.transpose(-1, -2) if ssm_layout == "kv" else state).to(ssm_state.dtype)
