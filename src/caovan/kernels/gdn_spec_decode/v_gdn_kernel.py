"""``_caovan_sm75_fused_v_gdn_spec_decode_kernel``, the V/GDN kernel, grid ``(cdiv(V, BV), N * HV)``.

One program per BV value rows of one value head of one sequence: the conv of its V channels, the gating, then the
delta-rule recurrence over the sequence's tokens with the (BV x K) state slab in fp32 registers; every token's
state goes to its own cache block and the output straight into the caller's buffer. With ``USE_PDL`` (sm_90+) it
is a programmatic dependent of the Q/K kernel: the slab, V conv and gating load while that kernel runs, and
``gdc_wait()`` guards the read of its scratch. Also the kernel's row reductions (``_row_dot``,
``_row_dot_butterfly``) and zero rows for null slots. Design notes: docs/bench/kernel-design.md.
"""

from __future__ import annotations

import triton
import triton.language as tl
from triton.language.extra.cuda import gdc_wait

from . import row_butterfly
from .conv_update import _conv_update_silu

_ROW_BUTTERFLY_BROADCAST = tl.constexpr(row_butterfly.ptx(broadcast=True))
_ROW_BUTTERFLY_OWN = tl.constexpr(row_butterfly.ptx(broadcast=False))
_ROW_BUTTERFLY_CONSTRAINTS = tl.constexpr(row_butterfly.CONSTRAINTS)


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
