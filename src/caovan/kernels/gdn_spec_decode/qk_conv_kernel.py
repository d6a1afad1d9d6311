"""``_caovan_sm75_prepare_qk_conv_spec_decode_kernel``, the Q/K kernel, grid ``(N, H, 2)``.

One program per sequence, key head, and q (axis 2 = 0) or k (= 1): the causal conv1d update of that head's K
channels with SiLU and the rewrite of their conv window, then each token's row L2-normalised (q also times K**-0.5)
and stored once in an fp32 scratch ``(num_spec_tokens, 2, H, K)`` that the V/GDN kernel reads. With ``USE_PDL``
(sm_90+) it first waits for the kernel before it, then releases the V/GDN kernel. Design notes:
docs/bench/kernel-design.md.
"""

from __future__ import annotations

import triton
import triton.language as tl
from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait

from .conv_update import _conv_update_silu


@triton.jit
def _caovan_sm75_prepare_qk_conv_spec_decode_kernel(
    mixed_qkv_ptr,
    conv_weight_ptr,
    conv_bias_ptr,
    conv_state_ptr,
    query_start_loc_ptr,
    state_indices_ptr,
    num_accepted_tokens_ptr,
    token_index_ptr,
    qk_scratch_ptr,
    scale,
    stride_x_token,
    stride_w_dim,
    stride_w_width,
    stride_cs_block,
    stride_cs_dim,
    stride_cs_pos,
    stride_si_seq,
    H: tl.constexpr,
    K: tl.constexpr,
    BK: tl.constexpr,
    WIDTH: tl.constexpr,
    BU: tl.constexpr,
    NULL_SLOT_MAX: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    HAS_TOKEN_INDEX: tl.constexpr,
    USE_PDL: tl.constexpr,
):
    if USE_PDL:
        # This launch is itself a programmatic dependent of whatever kernel ran before it (its launch overlaps
        # that kernel's tail): wait for that kernel to finish before touching memory, and only then let the V/GDN
        # kernel start, whose early SSM-state loads must see that kernel's (or the previous call's) writes.
        gdc_wait()
        # Let the V/GDN kernel start now: everything it does before its gdc_wait() is independent of
        # this kernel (other conv channels, the SSM state), so it overlaps this launch.
        gdc_launch_dependents()
    i_n = tl.program_id(0)
    i_h = tl.program_id(1)
    half = tl.program_id(2)  # 0: q, 1: k (separate programs: two short dependency chains in parallel)
    bos = tl.load(query_start_loc_ptr + i_n).to(tl.int64)
    eos = tl.load(query_start_loc_ptr + i_n + 1).to(tl.int64)
    seq_len = eos - bos
    if seq_len <= 0:
        return  # CUDA-graph padding row
    conv_block = tl.load(state_indices_ptr + i_n.to(tl.int64) * stride_si_seq).to(tl.int64)
    if conv_block <= NULL_SLOT_MAX:
        return  # no conv slot: the V kernel writes zeros for this sequence
    window_offset = tl.load(num_accepted_tokens_ptr + i_n).to(tl.int64) - 1

    k_offs = tl.arange(0, BK)
    channel_mask = k_offs < K
    rows = tl.arange(0, BU)
    store_mask = (rows < seq_len)[:, None] & channel_mask[None, :]
    channels = half * (H * K) + i_h * K + k_offs
    y = _conv_update_silu(
        mixed_qkv_ptr,
        conv_weight_ptr,
        conv_bias_ptr,
        conv_state_ptr,
        token_index_ptr,
        stride_x_token,
        stride_w_dim,
        stride_w_width,
        conv_block * stride_cs_block,
        stride_cs_dim,
        stride_cs_pos,
        channels,
        channel_mask,
        window_offset,
        bos,
        seq_len,
        WIDTH,
        BU,
        HAS_BIAS,
        HAS_TOKEN_INDEX,
    )
    # Per token L2 norm (as FLA: x * rsqrt(sum x^2 + 1e-6)); q also times K**-0.5.
    y = y * (tl.rsqrt(tl.sum(y * y, axis=1) + 1e-6) * tl.where(half == 0, scale, 1.0))[:, None]
    # scratch (num_spec_tokens, 2, H, K): row bos + t, slot `half`, head i_h
    scratch_ptrs = (
        qk_scratch_ptr + ((bos + rows.to(tl.int64)) * 2 + half)[:, None] * (H * K) + (i_h * K + k_offs)[None, :]
    )
    tl.store(scratch_ptrs, y, mask=store_mask)
