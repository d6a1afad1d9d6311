"""The chunked path's kernels, for long prompts: chunks of 2 x 32 tokens, the state walked once, outputs in parallel.

The fused state kernel (``triton_kernels.py``) makes each chunk's output on its way through the sequence: its serial
loop does about three times the work FLA's ``chunk_gated_delta_rule_fwd_h`` does per token, in twice as many steps
(32-token chunks against FLA's 64). The chunked path was built on the guess that this serial loop bounds long
prompts; on an H100 it was slower than the fused path at every length measured (``docs/prefill-design.md``), so the
shipped entries take it only where forced. After the same WY kernel (with ``PAIRED``) it runs three launches:

``_caovan_gdn_prefill_merge_kernel``, one program per (pair of chunks, value head): turns the second chunk's WY
factors into factors against the state at the pair's start, so that the pair is one 64-token chunk. With ``a`` the
first chunk, ``b`` the second, ``G`` a's total log decay and ``M = w_b (k_a / |k_a| exp(G - gc_a))^T``::

    u_b <- u_b - M u_a        w_b <- exp(G) w_b - M w_a        gc_b <- gc_b + G

and the pair's cross attention (b's queries on a's keys) is written beside the blocks the WY kernel wrote.

``_caovan_gdn_prefill_chunk_state_kernel``, one program per (value block, value head, sequence), serial over the
pairs: stores the state at each pair's start (``h``), turns ``u`` into ``v_new = u - w S`` in place, and moves the
state to the pair's end; the first state comes from vLLM's cache and the last goes back to it.

``_caovan_gdn_prefill_output_kernel``, one program per (chunk, value head, value block), all at once:
``o = (q S_start) exp(gc) / |q| + attn v_new`` over the chunk's pair, scaled.

Every tile is 32 rows, every reduction at most 32 keys or tokens, as in the fused path (the sm_75 rule).
"""

from __future__ import annotations

import triton
import triton.language as tl

from .triton_kernels import (
    _chunk_of_slot,
    _ieee,
    _load_slab,
    _load_slice,
    _mm,
    _mm_split_ab,
    _row_inverse_norm,
    _rows_times_state,
    _state_slot,
    _state_update,
    _store_slab,
)


@triton.jit
def _caovan_gdn_prefill_merge_kernel(
    q_ptr,
    k_ptr,
    w_ptr,
    u_ptr,
    gc_ptr,
    attn_ptr,
    cu_seqlens_ptr,
    num_seqs,
    stride_qt,
    stride_qh,
    stride_kt,
    stride_kh,
    stride_wt,
    stride_wh,
    stride_ut,
    stride_uh,
    stride_gct,
    stride_gch,
    stride_at,
    stride_ah,
    GROUP: tl.constexpr,
    K: tl.constexpr,
    V: tl.constexpr,
    KS: tl.constexpr,
    NK: tl.constexpr,
    VS: tl.constexpr,
    BT: tl.constexpr,
    L2NORM: tl.constexpr,
    FP32: tl.constexpr,
):
    """Program (c, hv): pair slot c (``_chunk_of_slot`` by ``2 BT``); a pair with no second chunk returns."""
    c = tl.program_id(0)
    hv = tl.program_id(1)
    bos, eos, t0, _ = _chunk_of_slot(cu_seqlens_ptr, num_seqs, c, 2 * BT)
    if t0 + BT >= eos:
        return
    DT = k_ptr.dtype.element_ty
    r = tl.arange(0, BT)
    rows_a, rows_b = t0 + r, t0 + BT + r
    live_a, live_b = rows_a < eos, rows_b < eos
    q_head = q_ptr + (hv // GROUP) * stride_qh
    k_head = k_ptr + (hv // GROUP) * stride_kh
    w_head = w_ptr + hv * stride_wh
    u_head = u_ptr + hv * stride_uh
    gc_head = gc_ptr + hv * stride_gch

    gamma = tl.load(gc_head + (t0 + BT - 1) * stride_gct)
    gc_a = tl.load(gc_head + rows_a * stride_gct, mask=live_a, other=0.0)
    gc_b = tl.load(gc_head + rows_b * stride_gct, mask=live_b, other=0.0)
    rk_a = _row_inverse_norm(gc_head, rows_a, live_a, stride_gct, 2, L2NORM)
    rq_b = _row_inverse_norm(gc_head, rows_b, live_b, stride_gct, 1, L2NORM)
    m = tl.zeros([BT, BT], dtype=tl.float32)
    p = tl.zeros([BT, BT], dtype=tl.float32)
    for j in tl.static_range(NK):
        k_a = _load_slice(k_head, rows_a, live_a, stride_kt, j * KS, KS, K)
        m += _mm(_load_slice(w_head, rows_b, live_b, stride_wt, j * KS, KS, K), tl.trans(k_a), FP32, DT)
        p += _mm(_load_slice(q_head, rows_b, live_b, stride_qt, j * KS, KS, K), tl.trans(k_a), FP32, DT)
    # Every exponent is <= 0: gates are log decays, cumulated from the pair's start.
    m = m * (rk_a * tl.exp(gamma - gc_a))[None, :]
    p = p * rq_b[:, None] * rk_a[None, :] * tl.exp(gc_b[:, None] + gamma - gc_a[None, :])
    tl.store(attn_ptr + hv * stride_ah + rows_b[:, None] * stride_at + r[None, :], p, mask=live_b[:, None])
    # All of b's rows of w are read (for M, above) before any is rewritten.
    tl.debug_barrier()
    for i in range(0, V, VS):
        vcols = i + tl.arange(0, VS)
        u_a = _load_slice(u_head, rows_a, live_a, stride_ut, i, VS, V)
        u_b = _load_slice(u_head, rows_b, live_b, stride_ut, i, VS, V)
        tl.store(u_head + rows_b[:, None] * stride_ut + vcols[None, :], u_b - _ieee(m, u_a),
                 mask=live_b[:, None] & (vcols[None, :] < V))  # fmt: skip
    for j in tl.static_range(NK):
        cols = j * KS + tl.arange(0, KS)
        w_a = _load_slice(w_head, rows_a, live_a, stride_wt, j * KS, KS, K).to(tl.float32)
        w_b = _load_slice(w_head, rows_b, live_b, stride_wt, j * KS, KS, K).to(tl.float32)
        merged = tl.exp(gamma) * w_b - _ieee(m, w_a)
        tl.store(w_head + rows_b[:, None] * stride_wt + cols[None, :], merged.to(w_ptr.dtype.element_ty),
                 mask=live_b[:, None] & (cols[None, :] < K))  # fmt: skip
    tl.store(gc_head + rows_b * stride_gct, gc_b + gamma, mask=live_b)


@triton.jit
def _caovan_gdn_prefill_chunk_state_kernel(
    k_ptr,
    w_ptr,
    u_ptr,
    gc_ptr,
    h_ptr,
    ssm_ptr,
    cu_seqlens_ptr,
    state_indices_ptr,
    has_initial_state_ptr,
    null_slot_max,
    stride_kt,
    stride_kh,
    stride_wt,
    stride_wh,
    stride_ut,
    stride_uh,
    stride_gct,
    stride_gch,
    stride_hc,
    stride_hh,
    stride_slot,
    stride_sh,
    stride_sk,
    stride_sv,
    GROUP: tl.constexpr,
    K: tl.constexpr,
    V: tl.constexpr,
    KS: tl.constexpr,
    NK: tl.constexpr,
    BV: tl.constexpr,
    BT: tl.constexpr,
    L2NORM: tl.constexpr,
    FP32: tl.constexpr,
    WRITE_FINAL_STATE: tl.constexpr,
):
    """Program (i_v, hv, n): value block i_v of value head hv of sequence n, over its pairs of chunks in order.
    ``h``: (pair slots, HV, K, V), the state at each pair's start; the cache as in the fused state kernel."""
    i_v = tl.program_id(0)
    hv = tl.program_id(1)
    n = tl.program_id(2)
    bos = tl.load(cu_seqlens_ptr + n).to(tl.int32)
    eos = tl.load(cu_seqlens_ptr + n + 1).to(tl.int32)
    DT = k_ptr.dtype.element_ty
    offs_v = i_v * BV + tl.arange(0, BV)
    offs_t = tl.arange(0, BT)
    slot, live_slot, read_initial = _state_slot(n, state_indices_ptr, has_initial_state_ptr, null_slot_max)
    ssm_head = ssm_ptr + slot * stride_slot + hv * stride_sh
    s0 = _load_slab(ssm_head, 0, offs_v, stride_sk, stride_sv, read_initial, K, V, KS, NK)
    s1 = _load_slab(ssm_head, 1, offs_v, stride_sk, stride_sv, read_initial, K, V, KS, NK)
    s2 = _load_slab(ssm_head, 2, offs_v, stride_sk, stride_sv, read_initial, K, V, KS, NK)
    s3 = _load_slab(ssm_head, 3, offs_v, stride_sk, stride_sv, read_initial, K, V, KS, NK)

    k_head = k_ptr + (hv // GROUP) * stride_kh
    w_head = w_ptr + hv * stride_wh
    u_head = u_ptr + hv * stride_uh
    gc_head = gc_ptr + hv * stride_gch
    vmask = offs_v < V
    first_pair = bos // (2 * BT) + n
    for t0 in range(bos, eos, 2 * BT):
        h_head = h_ptr + (first_pair + (t0 - bos) // (2 * BT)).to(tl.int64) * stride_hc + hv * stride_hh
        _store_slab(h_head, 0, offs_v, V, 1, s0, True, K, V, KS, NK)
        _store_slab(h_head, 1, offs_v, V, 1, s1, True, K, V, KS, NK)
        _store_slab(h_head, 2, offs_v, V, 1, s2, True, K, V, KS, NK)
        _store_slab(h_head, 3, offs_v, V, 1, s3, True, K, V, KS, NK)
        rows_a, rows_b = t0 + offs_t, t0 + BT + offs_t
        live_a, live_b = rows_a < eos, rows_b < eos
        gl = tl.load(gc_head + (tl.minimum(eos, t0 + 2 * BT) - 1) * stride_gct)
        gc_a = tl.load(gc_head + rows_a * stride_gct, mask=live_a, other=0.0)
        gc_b = tl.load(gc_head + rows_b * stride_gct, mask=live_b, other=0.0)
        rk_a = _row_inverse_norm(gc_head, rows_a, live_a, stride_gct, 2, L2NORM)
        rk_b = _row_inverse_norm(gc_head, rows_b, live_b, stride_gct, 2, L2NORM)
        ws_a, ws_b = _rows_times_state(w_head, rows_a, live_a, stride_wt, w_head, rows_b, live_b, stride_wt,
                                       s0, s1, s2, s3, K, KS, NK, FP32, DT, True, False, False)  # fmt: skip
        ptr_a = u_head + rows_a[:, None] * stride_ut + offs_v[None, :]
        ptr_b = u_head + rows_b[:, None] * stride_ut + offs_v[None, :]
        mask_a = live_a[:, None] & vmask[None, :]
        mask_b = live_b[:, None] & vmask[None, :]
        v_new_a = tl.load(ptr_a, mask=mask_a, other=0.0) - ws_a
        v_new_b = tl.load(ptr_b, mask=mask_b, other=0.0) - ws_b
        tl.store(ptr_a, v_new_a, mask=mask_a)
        tl.store(ptr_b, v_new_b, mask=mask_b)
        s0, s1, s2, s3 = _state_update(k_head, rows_a, live_a, stride_kt, s0, s1, s2, s3, tl.exp(gl),
                                       v_new_a * (tl.exp(gl - gc_a) * rk_a)[:, None], K, KS, NK, FP32, DT)  # fmt: skip
        s0, s1, s2, s3 = _state_update(k_head, rows_b, live_b, stride_kt, s0, s1, s2, s3, 1.0,
                                       v_new_b * (tl.exp(gl - gc_b) * rk_b)[:, None], K, KS, NK, FP32, DT)  # fmt: skip
    if WRITE_FINAL_STATE:
        _store_slab(ssm_head, 0, offs_v, stride_sk, stride_sv, s0, live_slot, K, V, KS, NK)
        _store_slab(ssm_head, 1, offs_v, stride_sk, stride_sv, s1, live_slot, K, V, KS, NK)
        _store_slab(ssm_head, 2, offs_v, stride_sk, stride_sv, s2, live_slot, K, V, KS, NK)
        _store_slab(ssm_head, 3, offs_v, stride_sk, stride_sv, s3, live_slot, K, V, KS, NK)


@triton.jit
def _caovan_gdn_prefill_output_kernel(
    q_ptr,
    u_ptr,
    gc_ptr,
    attn_ptr,
    h_ptr,
    out_ptr,
    cu_seqlens_ptr,
    num_seqs,
    scale,
    stride_qt,
    stride_qh,
    stride_ut,
    stride_uh,
    stride_gct,
    stride_gch,
    stride_at,
    stride_ah,
    stride_hc,
    stride_hh,
    stride_ot,
    stride_oh,
    GROUP: tl.constexpr,
    K: tl.constexpr,
    V: tl.constexpr,
    KS: tl.constexpr,
    NK: tl.constexpr,
    BV: tl.constexpr,
    BT: tl.constexpr,
    L2NORM: tl.constexpr,
    FP32: tl.constexpr,
):
    """Program (c, hv, i_v): chunk slot c (the WY kernel's numbering), value head hv, value block i_v; ``u`` holds
    ``v_new`` by now. A pair's second chunk adds the first's share through the pair's cross attention."""
    c = tl.program_id(0)
    hv = tl.program_id(1)
    i_v = tl.program_id(2)
    bos, eos, t0, n = _chunk_of_slot(cu_seqlens_ptr, num_seqs, c, BT)
    if t0 >= eos:
        return
    DT = q_ptr.dtype.element_ty
    second = (t0 - bos) // BT % 2
    pair = bos // (2 * BT) + n + (t0 - bos) // (2 * BT)
    offs_v = i_v * BV + tl.arange(0, BV)
    vmask = offs_v < V
    r = tl.arange(0, BT)
    rows = t0 + r
    live = rows < eos
    h_head = h_ptr + pair.to(tl.int64) * stride_hc + hv * stride_hh
    s0 = _load_slab(h_head, 0, offs_v, V, 1, True, K, V, KS, NK)
    s1 = _load_slab(h_head, 1, offs_v, V, 1, True, K, V, KS, NK)
    s2 = _load_slab(h_head, 2, offs_v, V, 1, True, K, V, KS, NK)
    s3 = _load_slab(h_head, 3, offs_v, V, 1, True, K, V, KS, NK)
    q_head = q_ptr + (hv // GROUP) * stride_qh
    u_head = u_ptr + hv * stride_uh
    a_head = attn_ptr + hv * stride_ah
    qs, _ = _rows_times_state(q_head, rows, live, stride_qt, q_head, rows, live, stride_qt, s0, s1, s2, s3,
                              K, KS, NK, FP32, DT, False, True, True)  # fmt: skip
    gc_head = gc_ptr + hv * stride_gch
    gc = tl.load(gc_head + rows * stride_gct, mask=live, other=0.0)
    rq = _row_inverse_norm(gc_head, rows, live, stride_gct, 1, L2NORM)
    tv_mask = live[:, None] & vmask[None, :]
    v_new = tl.load(u_head + rows[:, None] * stride_ut + offs_v[None, :], mask=tv_mask, other=0.0)
    attn = tl.load(a_head + rows[:, None] * stride_at + second * BT + r[None, :], mask=live[:, None], other=0.0)
    # As the fused state kernel: gates and scale in fp32 after the dots, nothing rounded to 16 bits.
    b_o = qs * (rq * tl.exp(gc))[:, None] + _mm_split_ab(attn, v_new, FP32, DT)
    if second == 1:
        first_rows = rows - BT  # the pair's first chunk: full, since this one follows it
        v_first = tl.load(u_head + first_rows[:, None] * stride_ut + offs_v[None, :], mask=vmask[None, :], other=0.0)
        cross = tl.load(a_head + rows[:, None] * stride_at + r[None, :], mask=live[:, None], other=0.0)
        b_o += _mm_split_ab(cross, v_first, FP32, DT)
    tl.store(out_ptr + hv * stride_oh + rows[:, None] * stride_ot + offs_v[None, :],
             (b_o * scale).to(out_ptr.dtype.element_ty), mask=tv_mask)  # fmt: skip
