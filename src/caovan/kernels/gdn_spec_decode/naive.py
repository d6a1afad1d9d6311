"""Plain-PyTorch reference of the GDN speculative-decode step: the oracle for every kernel test.

Loops over sequences and tokens and computes in ``compute_dtype`` (float64 by default), with the
semantics of vLLM 0.21.0's ``causal_conv1d_update(num_accepted_tokens=..., query_start_loc=...)``
followed by ``fused_sigmoid_gating_delta_rule_update(use_qk_l2norm_in_kernel=True,
inplace_final_state=True)``, except that sequences without a usable slot get zero output rows
(vLLM leaves those rows uninitialised). Mutates ``conv_state``, ``ssm_state`` and ``out`` in place
exactly like the kernels, casting to their dtypes. Host syncs are fine here: it is an oracle.
"""

from __future__ import annotations

import torch

SOFTPLUS_THRESHOLD = 20.0
L2NORM_EPS = 1e-6


def _softplus(x: torch.Tensor) -> torch.Tensor:
    # Same threshold form as FLA/vLLM: identity above 20.
    return torch.where(x <= SOFTPLUS_THRESHOLD, torch.log1p(torch.exp(x)), x)


def _l2norm(x: torch.Tensor) -> torch.Tensor:
    return x * torch.rsqrt((x * x).sum(dim=-1, keepdim=True) + L2NORM_EPS)


@torch.no_grad()
def gdn_spec_decode_reference(
    mixed_qkv: torch.Tensor,
    a: torch.Tensor,
    b: torch.Tensor,
    A_log: torch.Tensor,
    dt_bias: torch.Tensor,
    conv_weight: torch.Tensor,
    conv_bias: torch.Tensor | None,
    conv_state: torch.Tensor,
    ssm_state: torch.Tensor,
    query_start_loc: torch.Tensor,
    state_indices: torch.Tensor,
    num_accepted_tokens: torch.Tensor,
    out: torch.Tensor,
    *,
    num_k_heads: int,
    head_k_dim: int,
    head_v_dim: int,
    ssm_layout: str = "vk",
    null_slot_max: int = 0,
    token_index: torch.Tensor | None = None,
    compute_dtype: torch.dtype = torch.float64,
) -> None:
    """Reference for :func:`caovan.kernels.gdn_spec_decode.gdn_spec_decode` (same arguments)."""
    if ssm_layout not in ("vk", "kv"):
        raise ValueError(f"ssm_layout: expected 'vk' or 'kv', got {ssm_layout!r}")
    cd = compute_dtype
    H, K, V = num_k_heads, head_k_dim, head_v_dim
    HV = A_log.shape[0]
    group = HV // H
    width = conv_weight.shape[1]
    scale = K**-0.5

    weight = conv_weight.to(cd)  # (conv_dim, width)
    bias = conv_bias.to(cd) if conv_bias is not None else None
    neg_A = -torch.exp(A_log.to(cd))  # (HV,)
    dt_b = dt_bias.to(cd)
    key_head_of_value_head = torch.arange(HV, device=A_log.device) // group

    starts = query_start_loc.tolist()
    indices = state_indices.tolist()
    accepted = num_accepted_tokens.tolist()
    spec_rows = token_index.tolist() if token_index is not None else None

    for n in range(len(starts) - 1):
        bos, eos = starts[n], starts[n + 1]
        seq_len = eos - bos
        if seq_len <= 0:
            continue  # CUDA-graph padding row
        rows = spec_rows[bos:eos] if spec_rows is not None else list(range(bos, eos))
        rows_t = torch.tensor(rows, device=out.device, dtype=torch.long)
        conv_block = indices[n][0]
        offset = accepted[n] - 1
        initial_block = indices[n][offset]
        if conv_block <= null_slot_max:
            out[rows_t] = 0
            continue

        # --- causal conv1d update over all channels, window at offset num_accepted - 1 ---
        x = mixed_qkv[rows_t].to(conv_state.dtype).to(cd)  # (L, conv_dim), rounded like vLLM
        window = conv_state[conv_block, :, offset : offset + width - 1].to(cd)  # (dim, W-1)
        u = torch.cat([window.transpose(0, 1), x], dim=0)  # (W-1+L, conv_dim)
        y = torch.stack([(weight.transpose(0, 1) * u[t : t + width]).sum(dim=0) for t in range(seq_len)])
        if bias is not None:
            y = y + bias
        y = y * torch.sigmoid(y)  # SiLU
        new_len = width - 2 + seq_len
        new_window = u[1 : 1 + new_len].transpose(0, 1)
        conv_state[conv_block, :, :new_len] = new_window.to(conv_state.dtype)

        if initial_block <= null_slot_max:
            out[rows_t] = 0
            continue

        # --- gated delta rule over the tokens ---
        q = _l2norm(y[:, : H * K].reshape(seq_len, H, K)) * scale
        k = _l2norm(y[:, H * K : 2 * H * K].reshape(seq_len, H, K))
        v = y[:, 2 * H * K :].reshape(seq_len, HV, V)
        state = ssm_state[initial_block].to(cd)
        if ssm_layout == "kv":
            state = state.transpose(-1, -2)  # work in (HV, V, K)
        for t in range(seq_len):
            row = rows[t]
            g = neg_A * _softplus(a[row].to(cd) + dt_b)  # (HV,)
            beta = torch.sigmoid(b[row].to(cd))  # (HV,)
            k_t = k[t][key_head_of_value_head]  # (HV, K)
            q_t = q[t][key_head_of_value_head]
            state = state * torch.exp(g)[:, None, None]
            delta = (v[t] - torch.einsum("hvk,hk->hv", state, k_t)) * beta[:, None]
            state = state + delta[:, :, None] * k_t[:, None, :]
            out[row] = torch.einsum("hvk,hk->hv", state, q_t).to(out.dtype)
            block_t = indices[n][t]
            if block_t > null_slot_max:
                stored = state.transpose(-1, -2) if ssm_layout == "kv" else state
                ssm_state[block_t] = stored.to(ssm_state.dtype)
