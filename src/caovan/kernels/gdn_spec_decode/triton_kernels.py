"""Triton kernels for the GatedDeltaNet speculative-decode (MTP verify) step.

Two launches replace vLLM's ``causal_conv1d_update`` + ``fused_sigmoid_gating_delta_rule_update``
pair (plus the q/k/v split and copies between them):

1. ``_caovan_sm75_prepare_qk_conv_spec_decode_kernel``, grid ``(N, H, 2)``: the causal conv1d
   update of the Q (axis 2 = 0) or K (= 1) channels of one key head of one sequence (SiLU), the new
   conv window for those channels, then per token L2-normalised q (times K**-0.5) and k, stored once in an
   fp32 scratch ``(num_spec_tokens, 2, H, K)``. Each key head is shared by HV/H value heads, so
   doing this once per key head instead of once per value head saves the repeated work.
2. ``_caovan_sm75_fused_v_gdn_spec_decode_kernel``, grid ``(cdiv(V, BV), N * HV)``: the conv of
   BV V channels of one value head, the gating, and the delta-rule recurrence over the tokens of
   the sequence with the (BV x K) state slab held in fp32 registers; every token's state is written
   to its own cache block and the output goes straight into the caller's buffer. On sm_90+ (launch
   config ``pdl``) it is a programmatic dependent launch: the state slab, V conv and gating are loaded
   while the Q/K kernel still runs, and ``gdc_wait()`` guards the read of its scratch. The Q/K kernel is
   then itself a programmatic dependent of the kernel before it: it waits for that kernel first thing and
   only then releases the V/GDN kernel.

Conv window convention (identical to vLLM's ``_causal_conv1d_update_kernel`` with
``num_accepted_tokens``): for a sequence of L tokens whose block holds past inputs at positions
``0 .. state_len-1``, the extended input is ``u = state[o : o + W - 1] ++ x_0 .. x_{L-1}`` with
``o = num_accepted_tokens - 1``; conv output ``y_t = bias + sum_j w[:, j] * u[t + j]``; the new
window is ``u[1 : W - 1 + L]`` written at positions ``0 .. W - 3 + L``. Inputs enter the window (and
the conv) rounded to the conv-state dtype, as vLLM does with ``x.to(conv_state.dtype)``.

Both kernels take no integer argument that changes from call to call (the batch size lives only
in the grid, token counts come from ``query_start_loc``), so one compiled kernel serves every
batch size; strides are fixed per model and cache layout.
"""

from __future__ import annotations

import triton
import triton.language as tl
from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait

from . import row_butterfly

_ROW_BUTTERFLY_BROADCAST = tl.constexpr(row_butterfly.ptx(broadcast=True))
_ROW_BUTTERFLY_OWN = tl.constexpr(row_butterfly.ptx(broadcast=False))
_ROW_BUTTERFLY_CONSTRAINTS = tl.constexpr(row_butterfly.CONSTRAINTS)


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


@triton.jit
def _store_zero_rows(
    out_head_ptr,
    token_index_ptr,
    stride_out_token,
    v_mask,
    bos,
    seq_len,
    BV: tl.constexpr,
    HAS_TOKEN_INDEX: tl.constexpr,
):
    """Deterministic zero output for a sequence whose state slots are null."""
    zeros = tl.zeros([BV], dtype=out_head_ptr.dtype.element_ty)
    for t in range(0, seq_len):
        if HAS_TOKEN_INDEX:
            row = tl.load(token_index_ptr + bos + t).to(tl.int64)
        else:
            row = bos + t
        tl.store(out_head_ptr + row * stride_out_token, zeros, mask=v_mask)


@triton.jit
def _row_dot(slab, x):
    """Per value row of a [RL, KT, 1, RH, KR, KS] state slab: the dot product with x over the key axes (KT, KR, KS)."""
    partial = tl.sum(tl.sum(slab * x, axis=5, keep_dims=True), axis=4, keep_dims=True)
    return tl.sum(partial, axis=1, keep_dims=True)


@triton.jit
def _row_dot_butterfly(slab, x, BROADCAST: tl.constexpr):
    """``_row_dot`` of a slab split over 16-lane rows, by ``row_butterfly``'s PTX: [RL, KT, 1, RH, 1, 1] holding,
    with BROADCAST, every lane's rows' totals; else in every slot the total of the lane's own row."""
    # No size-1 axes kept: their layout would hold copies in each thread, which the PTX's packing of 8 would mix.
    partial = tl.sum(tl.sum(slab * x, axis=5), axis=4)
    if BROADCAST:
        partial = tl.inline_asm_elementwise(
            _ROW_BUTTERFLY_BROADCAST, _ROW_BUTTERFLY_CONSTRAINTS, [partial], dtype=tl.float32, is_pure=True, pack=8
        )
    else:
        partial = tl.inline_asm_elementwise(
            _ROW_BUTTERFLY_OWN, _ROW_BUTTERFLY_CONSTRAINTS, [partial], dtype=tl.float32, is_pure=True, pack=8
        )
    return tl.expand_dims(tl.expand_dims(partial, 4), 5)


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


@triton.jit
def _caovan_sm75_fused_v_gdn_spec_decode_kernel(
    mixed_qkv_ptr,
    a_ptr,
    b_ptr,
    A_log_ptr,
    dt_bias_ptr,
    conv_weight_ptr,
    conv_bias_ptr,
    conv_state_ptr,
    ssm_state_ptr,
    query_start_loc_ptr,
    state_indices_ptr,
    num_accepted_tokens_ptr,
    token_index_ptr,
    qk_scratch_ptr,
    out_ptr,
    stride_x_token,
    stride_a_token,
    stride_a_head,
    stride_b_token,
    stride_b_head,
    stride_w_dim,
    stride_w_width,
    stride_cs_block,
    stride_cs_dim,
    stride_cs_pos,
    stride_ssm_block,
    stride_ssm_head,
    stride_ssm_v,
    stride_ssm_k,
    stride_si_seq,
    stride_out_token,
    stride_out_head,
    H: tl.constexpr,
    HV: tl.constexpr,
    K: tl.constexpr,
    V: tl.constexpr,
    BK: tl.constexpr,
    BV: tl.constexpr,
    WIDTH: tl.constexpr,
    BU: tl.constexpr,
    BT: tl.constexpr,
    NULL_SLOT_MAX: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    HAS_TOKEN_INDEX: tl.constexpr,
    USE_PDL: tl.constexpr,
    STAGGER: tl.constexpr,
    WRITE_THROUGH_LAST: tl.constexpr,
    CONST_SLAB_OFFSETS: tl.constexpr = False,
    SLAB_STRIDE_V: tl.constexpr = 0,
    SLAB_STRIDE_K: tl.constexpr = 0,
    ROW_LANES: tl.constexpr = 32,
    ROW_BUTTERFLY: tl.constexpr = False,
):
    i_vb = tl.program_id(0)
    i_nhv = tl.program_id(1)
    i_n = i_nhv // HV
    i_hv = i_nhv % HV
    i_h = i_hv // (HV // H)  # HF/AWQ layout: value heads of one key head are adjacent
    bos = tl.load(query_start_loc_ptr + i_n).to(tl.int64)
    eos = tl.load(query_start_loc_ptr + i_n + 1).to(tl.int64)
    seq_len = eos - bos
    if seq_len <= 0:
        if USE_PDL:
            gdc_wait()  # every exit waits: work after this launch must find the Q/K kernel done too
        return  # CUDA-graph padding row

    v_offs = i_vb * BV + tl.arange(0, BV)
    v_mask = v_offs < V
    k_offs = tl.arange(0, BK)
    k_mask = k_offs < K
    out_head_ptr = out_ptr + i_hv * stride_out_head + v_offs
    si_row_ptr = state_indices_ptr + i_n.to(tl.int64) * stride_si_seq

    conv_block = tl.load(si_row_ptr).to(tl.int64)
    num_accepted = tl.load(num_accepted_tokens_ptr + i_n).to(tl.int64)
    initial_block = tl.load(si_row_ptr + (num_accepted - 1)).to(tl.int64)
    if conv_block <= NULL_SLOT_MAX:
        # No conv slot (vLLM skips the conv and runs the recurrence on raw inputs): zeros instead.
        _store_zero_rows(out_head_ptr, token_index_ptr, stride_out_token, v_mask, bos, seq_len, BV, HAS_TOKEN_INDEX)
        if USE_PDL:
            gdc_wait()
        return
    v_conv = _conv_update_silu(
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
        2 * H * K + i_hv * V + v_offs,
        v_mask,
        num_accepted - 1,
        bos,
        seq_len,
        WIDTH,
        BU,
        HAS_BIAS,
        HAS_TOKEN_INDEX,
    )
    if initial_block <= NULL_SLOT_MAX:
        # No initial state (vLLM returns before writing its output rows): zeros, no state writes.
        _store_zero_rows(out_head_ptr, token_index_ptr, stride_out_token, v_mask, bos, seq_len, BV, HAS_TOKEN_INDEX)
        if USE_PDL:
            gdc_wait()
        return

    if ROW_LANES < 32:
        # Rows of the slab over ROW_LANES lanes instead of the warp's 32 (one warp; the entry checks
        # BK >= 4 * ROW_LANES and BV * ROW_LANES >= 32): the slab as a 6-D tile [RL, KT, 1, RH, KR, KS], value row
        # rl * RH + rh, key column (kr * KT + kt) * KS + ks; Triton gives the lanes to KS's 4-value vectors first,
        # then KT, then RL. A row reduction is then (BV * ROW_LANES / 32) rows x log2(ROW_LANES) shuffles per thread
        # instead of BV x 5 (the two reductions are what a token step costs at the largest calls), while each
        # thread holds BK / ROW_LANES key columns of q and k instead of BK / 32. On an H200 it was faster only at
        # BV 16 with an fp32 state (rows of 16 lanes, a 152-register cap), so the launch entry takes it only there
        # (docs/bench/kernel-design.md). The int32 token rows and slots below go with it, as timed.
        tl.static_assert(BK >= 4 * ROW_LANES, "rows of ROW_LANES lanes need BK >= 4 * ROW_LANES")
        tl.static_assert(BV * ROW_LANES >= 32, "rows of ROW_LANES lanes need BV * ROW_LANES >= 32")
        KS: tl.constexpr = 4
        KT: tl.constexpr = ROW_LANES
        RL: tl.constexpr = 32 // ROW_LANES
        RH: tl.constexpr = BV // RL
        KR: tl.constexpr = BK // (ROW_LANES * KS)
        v6 = (
            i_vb * BV
            + tl.arange(0, RL)[:, None, None, None, None, None] * RH
            + tl.arange(0, RH)[None, None, None, :, None, None]
        )
        k6 = (
            tl.arange(0, KT)[None, :, None, None, None, None] * KS
            + tl.arange(0, KR)[None, None, None, None, :, None] * (KT * KS)
            + tl.arange(0, KS)[None, None, None, None, None, :]
        )
        v6_mask = v6 < V
        slab_offs = v6.to(tl.int64) * stride_ssm_v + k6.to(tl.int64) * stride_ssm_k
        slab_mask = v6_mask & (k6 < K)
    elif CONST_SLAB_OFFSETS:
        # The slab's strides compiled in (equal to stride_ssm_v/k; the entry checks the offsets fit int32): its
        # offsets fold into the store instructions instead of living in 64-bit registers, 118 -> 94 registers at
        # BV 8 on sm_90 (27B TP=2, MTP 4, fp32 state), which lets the entry's register cap fit without spills.
        # On an H200, with the cap, faster at BV 8 and slower at BV 16 (docs/bench/kernel-design.md), so only the
        # entry's BV uses them.
        slab_offs = v_offs[:, None] * SLAB_STRIDE_V + k_offs[None, :] * SLAB_STRIDE_K
    else:
        slab_offs = v_offs.to(tl.int64)[:, None] * stride_ssm_v + k_offs.to(tl.int64)[None, :] * stride_ssm_k
    if ROW_LANES == 32:
        slab_mask = v_mask[:, None] & k_mask[None, :]
    head_base = ssm_state_ptr + i_hv.to(tl.int64) * stride_ssm_head
    if USE_PDL and STAGGER:
        # Half of the value heads load their state only once the Q/K kernel is done. The grid is one wave of
        # equal programs: started together, they would all reach each token's arithmetic at the same moment, and
        # DRAM idles while every program reduces. Starting half of them one state load later keeps some programs
        # storing while others compute. Where the call writes little state it only delays half of the programs, so
        # the launch entry turns it on from a state-write volume (docs/bench/kernel-design.md).
        if i_nhv % 2 == 1:
            gdc_wait()
    state = tl.load(head_base + initial_block * stride_ssm_block + slab_offs, mask=slab_mask, other=0.0).to(tl.float32)

    neg_A = -tl.exp(tl.load(A_log_ptr + i_hv).to(tl.float32))
    dt_bias = tl.load(dt_bias_ptr + i_hv).to(tl.float32)
    # The token loop's small inputs (rows, gating, state-slot indices) are loaded for all tokens up front, as
    # [BT]-row tiles (BT: tokens; the V conv tile has BU rows, one per conv position): the recurrence is serial
    # in t, and loads issued inside the loop would each add a memory latency to every token step.
    token_rows = tl.arange(0, BT)
    row_mask = token_rows < seq_len
    spec_tokens = bos + token_rows
    if HAS_TOKEN_INDEX:
        rows_all = tl.load(token_index_ptr + spec_tokens, mask=row_mask, other=0)
    else:
        rows_all = spec_tokens
    # Picked per token and widened where used (the values fit: the entry checks the tensors' sizes).
    rows_all = rows_all.to(tl.int32 if ROW_LANES < 32 else tl.int64)
    x_all = tl.load(a_ptr + rows_all.to(tl.int64) * stride_a_token + i_hv * stride_a_head, mask=row_mask, other=0.0)
    x_all = x_all.to(tl.float32) + dt_bias
    decay_all = tl.exp(neg_A * tl.where(x_all <= 20.0, tl.log(1.0 + tl.exp(x_all)), x_all))
    b_all = tl.load(b_ptr + rows_all.to(tl.int64) * stride_b_token + i_hv * stride_b_head, mask=row_mask, other=0.0)
    beta_all = tl.sigmoid(b_all.to(tl.float32))
    blocks_all = tl.load(si_row_ptr + token_rows, mask=row_mask, other=NULL_SLOT_MAX)
    blocks_all = blocks_all.to(tl.int32 if ROW_LANES < 32 else tl.int64)
    if USE_PDL:
        # Launched as a programmatic dependent of the Q/K kernel: up to here nothing read what it writes
        # (the state slab, the V conv and the gating are already loaded); its q/k scratch is read below.
        gdc_wait()
    # q and k are read one token ahead instead: picking a row out of [BT, K] tiles costs ~BT selects and adds
    # per element and token, and the kernel is instruction-bound at large batches (profiled on an H200), while
    # a load issued one step early has the whole step to arrive.
    if ROW_LANES < 32:
        qk_cols = tl.zeros([RL, 1, 1, 1, 1, 1], dtype=tl.int32) + k6  # each lane's key columns, as the slab's
        qk_mask = qk_cols < K
    else:
        qk_cols = k_offs
        qk_mask = k_mask
    qk_row = qk_scratch_ptr + i_h * K + qk_cols
    q_next = tl.load(qk_row + bos * (2 * H * K), mask=qk_mask, other=0.0)
    k_next = tl.load(qk_row + bos * (2 * H * K) + H * K, mask=qk_mask, other=0.0)
    if ROW_LANES < 32:
        out_row_ptr = out_ptr + i_hv * stride_out_head + v6
        if ROW_BUTTERFLY:
            # Rows of 16 lanes, 8 per thread (the entry checks BV 16): after the butterfly, lane (rl, kt) holds
            # the output of row rl * RH + row_butterfly.own_row(2 * kt + rl); of the two lanes per row, the one
            # with kt even stores it.
            tl.static_assert(ROW_LANES == 16 and RH == 8, "the row butterfly is written for 8 rows of 16 lanes")
            kt6 = tl.arange(0, KT)[None, :, None, None, None, None]
            own_v = (
                i_vb * BV
                + tl.arange(0, RL)[:, None, None, None, None, None] * RH
                + ((kt6 >> 3) & 1) * 4
                + ((kt6 >> 2) & 1) * 2
                + ((kt6 >> 1) & 1)
            )
            own_out_ptr = out_ptr + i_hv * stride_out_head + own_v
            own_mask = ((kt6 & 1) == 0) & (own_v < V)
    conv_rows = tl.arange(0, BU)
    for t in range(0, seq_len):
        pick = token_rows == t
        row = tl.sum(tl.where(pick, rows_all, 0)).to(tl.int64)
        q = q_next
        k = k_next
        if ROW_LANES == 32:
            next_mask = qk_mask & (t + 1 < seq_len)
            q_next = tl.load(qk_row + (bos + t + 1) * (2 * H * K), mask=next_mask, other=0.0)
            k_next = tl.load(qk_row + (bos + t + 1) * (2 * H * K) + H * K, mask=next_mask, other=0.0)
            v = tl.sum(tl.where((conv_rows == t)[:, None], v_conv, 0.0), axis=0)
        else:
            v = tl.reshape(tl.sum(tl.where((conv_rows == t)[:, None], v_conv, 0.0), axis=0), [RL, 1, 1, RH, 1, 1])
        decay = tl.sum(tl.where(pick, decay_all, 0.0))
        beta = tl.sum(tl.where(pick, beta_all, 0.0))

        state *= decay
        if ROW_LANES < 32:
            if ROW_BUTTERFLY:
                v = (v - _row_dot_butterfly(state, k, True)) * beta  # [RL, KT, 1, RH, 1, 1]: same in every lane
                state += v * k
                o = _row_dot_butterfly(state, q, False)
            else:
                v -= _row_dot(state, k)
                v *= beta
                state += v * k
                o = _row_dot(state, q)
            # The next token's q/k are read here, after the arithmetic (not at the top of the step as with rows
            # of 32 lanes): with the tile's extra q/k registers that was the faster order on an H200.
            next_mask = qk_mask & (t + 1 < seq_len)
            q_next = tl.load(qk_row + (bos + t + 1) * (2 * H * K), mask=next_mask, other=0.0)
            k_next = tl.load(qk_row + (bos + t + 1) * (2 * H * K) + H * K, mask=next_mask, other=0.0)
            if ROW_BUTTERFLY:
                o = tl.max(o, axis=3, keep_dims=True)  # in-thread: every slot holds the lane's own row total
                tl.store(own_out_ptr + row * stride_out_token, o.to(out_ptr.dtype.element_ty), mask=own_mask)
            else:
                tl.store(out_row_ptr + row * stride_out_token, o.to(out_ptr.dtype.element_ty), mask=v6_mask)
        else:
            v -= tl.sum(state * k[None, :], axis=1)
            v *= beta
            state += v[:, None] * k[None, :]
            o = tl.sum(state * q[None, :], axis=1)
            tl.store(out_head_ptr + row * stride_out_token, o.to(out_ptr.dtype.element_ty), mask=v_mask)

        block_t = tl.sum(tl.where(pick, blocks_all, 0)).to(tl.int64)
        if WRITE_THROUGH_LAST:
            # The last token's state is stored write-through instead: a call that writes most of L2's capacity in
            # state ends with the last token steps' lines dirty in L2, and the next kernels' loads pay for their
            # write-back; written through, they go to DRAM while the call's last programs finish. Every
            # write-through store is slower than a streaming one and smaller calls got slower with it on an H200, so
            # only the last token's are, from a state-write volume of the launch entry (docs/bench/kernel-design.md).
            last = t == seq_len - 1
            tl.store(
                head_base + block_t * stride_ssm_block + slab_offs,
                state.to(ssm_state_ptr.dtype.element_ty),
                mask=slab_mask & ((block_t > NULL_SLOT_MAX) & (last == 0)),
                cache_modifier=".cs",
            )
            tl.store(
                head_base + block_t * stride_ssm_block + slab_offs,
                state.to(ssm_state_ptr.dtype.element_ty),
                mask=slab_mask & ((block_t > NULL_SLOT_MAX) & last),
                cache_modifier=".wt",
            )
        elif block_t > NULL_SLOT_MAX:
            # Streaming (evict-first) stores: these states are read again at the next decode step at the
            # earliest, after every other layer has gone through L2, so caching them only evicts lines this
            # call still uses. On an H200 they were faster on the largest write-bound cases (8 sequences, fp32 state;
            # docs/bench/kernel-design.md).
            tl.store(
                head_base + block_t * stride_ssm_block + slab_offs,
                state.to(ssm_state_ptr.dtype.element_ty),
                mask=slab_mask,
                cache_modifier=".cs",
            )
