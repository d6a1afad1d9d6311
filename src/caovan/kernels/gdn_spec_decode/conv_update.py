"""Causal conv1d update with SiLU, shared by both spec-decode kernels (``@triton.jit`` helpers).

For a sequence of L tokens whose conv block holds past inputs at positions ``0 .. state_len-1``, the extended input
is ``u = state[o : o + W - 1] ++ x_0 .. x_{L-1}`` with ``o = num_accepted_tokens - 1``; the conv output is
``y_t = bias + sum_j w[:, j] * u[t + j]`` and the new window ``u[1 : W - 1 + L]`` is written at positions
``0 .. W - 3 + L`` (vLLM's ``_causal_conv1d_update_kernel`` with ``num_accepted_tokens``). Inputs enter the window
and the conv rounded to the conv-state dtype, as vLLM's ``x.to(conv_state.dtype)``. Design notes:
docs/bench/kernel-design.md.
"""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def _load_conv_input_shifted(
    mixed_qkv_ptr,
    conv_state_ptr,
    token_index_ptr,
    stride_x_token,
    conv_block_base,
    stride_cs_dim,
    stride_cs_pos,
    channels,
    channel_mask,
    window_offset,
    bos,
    seq_len,
    SHIFT: tl.constexpr,
    WIDTH: tl.constexpr,
    BU: tl.constexpr,
    HAS_TOKEN_INDEX: tl.constexpr,
):
    """Tile [BU, channels] of the extended conv input u[r + SHIFT] (fp32), zero past the end."""
    pos = tl.arange(0, BU) + SHIFT
    from_state = pos < WIDTH - 1
    from_x = (pos >= WIDTH - 1) & (pos < WIDTH - 1 + seq_len)
    state_ptrs = (
        conv_state_ptr
        + conv_block_base
        + (window_offset + pos).to(tl.int64)[:, None] * stride_cs_pos
        + channels.to(tl.int64)[None, :] * stride_cs_dim
    )
    state_vals = tl.load(state_ptrs, mask=from_state[:, None] & channel_mask[None, :], other=0.0)
    spec_token = bos + (pos - (WIDTH - 1))
    if HAS_TOKEN_INDEX:
        x_row = tl.load(token_index_ptr + spec_token, mask=from_x, other=0).to(tl.int64)
    else:
        x_row = spec_token
    x_ptrs = mixed_qkv_ptr + x_row[:, None] * stride_x_token + channels[None, :]
    x_vals = tl.load(x_ptrs, mask=from_x[:, None] & channel_mask[None, :], other=0.0)
    # The window stores inputs in the conv-state dtype; the conv uses exactly those values.
    x_vals = x_vals.to(conv_state_ptr.dtype.element_ty)
    return tl.where(from_state[:, None], state_vals.to(tl.float32), x_vals.to(tl.float32))


@triton.jit
def _conv_update_silu(
    mixed_qkv_ptr,
    conv_weight_ptr,
    conv_bias_ptr,
    conv_state_ptr,
    token_index_ptr,
    stride_x_token,
    stride_w_dim,
    stride_w_width,
    conv_block_base,
    stride_cs_dim,
    stride_cs_pos,
    channels,
    channel_mask,
    window_offset,
    bos,
    seq_len,
    WIDTH: tl.constexpr,
    BU: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    HAS_TOKEN_INDEX: tl.constexpr,
):
    """Causal conv + SiLU for the given channels of one sequence; rewrites their conv window.

    Returns the fp32 tile y[t, c] (rows t >= seq_len are junk and must be masked by the caller).
    """
    rows = tl.arange(0, BU)
    w_ptrs = conv_weight_ptr + channels.to(tl.int64) * stride_w_dim
    if HAS_BIAS:
        acc = tl.load(conv_bias_ptr + channels, mask=channel_mask, other=0.0).to(tl.float32)
        acc = tl.zeros([BU, channels.shape[0]], dtype=tl.float32) + acc[None, :]
    else:
        acc = tl.zeros([BU, channels.shape[0]], dtype=tl.float32)
    for j in tl.static_range(WIDTH):
        w_j = tl.load(w_ptrs + j * stride_w_width, mask=channel_mask, other=0.0).to(tl.float32)
        u_j = _load_conv_input_shifted(
            mixed_qkv_ptr,
            conv_state_ptr,
            token_index_ptr,
            stride_x_token,
            conv_block_base,
            stride_cs_dim,
            stride_cs_pos,
            channels,
            channel_mask,
            window_offset,
            bos,
            seq_len,
            j,
            WIDTH,
            BU,
            HAS_TOKEN_INDEX,
        )
        if j == 1:
            new_window = u_j  # u[r + 1] for r < W - 2 + L is the new window; kept for the store below
        acc += w_j[None, :] * u_j
    # The window is read and rewritten in the same block: every thread's reads must be done
    # before any thread overwrites a position another thread still has to read.
    tl.debug_barrier()
    store_ptrs = (
        conv_state_ptr
        + conv_block_base
        + rows.to(tl.int64)[:, None] * stride_cs_pos
        + channels.to(tl.int64)[None, :] * stride_cs_dim
    )
    store_mask = (rows < WIDTH - 2 + seq_len)[:, None] & channel_mask[None, :]
    tl.store(store_ptrs, new_window.to(conv_state_ptr.dtype.element_ty), mask=store_mask)
    return acc / (1.0 + tl.exp(-acc))
