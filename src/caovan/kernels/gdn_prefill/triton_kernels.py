"""The two Triton kernels of caovan's chunked gated-delta-rule prefill (the maths: ``docs/prefill-design.md``).

``_caovan_gdn_prefill_wy_kernel``, one program per (chunk of 32 tokens, value head), all chunks of all sequences at
once: the chunk's gate cumsum, its UT transform ``X = (I + A)^-1`` from two 16 x 16 blocks, the WY factors
``w = X (beta exp(gc) k)`` and ``u = X (beta v)``, and the chunk's gated causal attention ``q k^T``, written per
token.

``_caovan_gdn_prefill_state_kernel``, one program per (sequence, value head, value block): the state (K x BV, fp32)
lives in registers as up to four slabs of ``KS`` keys, from the initial state in vLLM's cache to the final state
written back to it, and each chunk's output is made on the way (``q S`` plus the chunk's own attention).

Every reduction runs over at most ``KS`` (32) keys or one chunk: on sm_75 Triton lowers ``tl.dot`` to FMA, each
thread then holding its rows and columns over the whole reduction, and wider ones spill (the sm_75 gate). ``FP32``
runs the dots on fp32 operands (Turing: FMA either way, so nothing is rounded to 16 bits); otherwise they take the
activation dtype on tensor cores, as FLA's do, and the fp32 factors that matter most (``X``, the state update) are
split in a high and a low 16-bit part. q and k enter the dots as they are; their L2 norms scale the results.
"""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def _mm(a, b, FP32: tl.constexpr, DT: tl.constexpr):
    """``a @ b``: fp32 FMA without TF32 (``FP32``), else on 16-bit tensor cores with fp32 accumulation."""
    if FP32:
        return tl.dot(a.to(tl.float32), b.to(tl.float32), input_precision="ieee")
    return tl.dot(a.to(DT), b.to(DT))


@triton.jit
def _mm_split_a(a, b, FP32: tl.constexpr, DT: tl.constexpr):
    """``a @ b`` with an fp32 ``a`` kept to about fp32 accuracy on the 16-bit path (high and low part)."""
    if FP32:
        return tl.dot(a, b.to(tl.float32), input_precision="ieee")
    a_hi = a.to(DT)
    b_d = b.to(DT)
    return tl.dot(a_hi, b_d) + tl.dot((a - a_hi.to(tl.float32)).to(DT), b_d)


@triton.jit
def _mm_split_b(a, b, FP32: tl.constexpr, DT: tl.constexpr):
    """``a @ b`` with an fp32 ``b`` kept to about fp32 accuracy on the 16-bit path (high and low part)."""
    if FP32:
        return tl.dot(a.to(tl.float32), b, input_precision="ieee")
    a_d = a.to(DT)
    b_hi = b.to(DT)
    return tl.dot(a_d, b_hi) + tl.dot(a_d, (b - b_hi.to(tl.float32)).to(DT))


@triton.jit
def _mm_split_ab(a, b, FP32: tl.constexpr, DT: tl.constexpr):
    """``a @ b`` of two fp32 factors kept to about fp32 accuracy on the 16-bit path (``hi hi + lo hi + hi lo``)."""
    if FP32:
        return tl.dot(a, b, input_precision="ieee")
    a_hi = a.to(DT)
    b_hi = b.to(DT)
    a_lo = (a - a_hi.to(tl.float32)).to(DT)
    return tl.dot(a_hi, b_hi) + tl.dot(a_lo, b_hi) + tl.dot(a_hi, (b - b_hi.to(tl.float32)).to(DT))


@triton.jit
def _unit_lower_inverse_16(a):
    """``(I + a)^-1`` of a strictly lower 16 x 16 block: ``(I - a)(I + a^2)(I + a^4)(I + a^8)`` (``a^16 = 0``),
    in fp32 without TF32 (six small products instead of sixteen dependent row steps)."""
    rows = tl.arange(0, 16)
    eye = tl.where(rows[:, None] == rows[None, :], 1.0, 0.0)
    n1 = -a
    n2 = tl.dot(n1, n1, input_precision="ieee")
    n4 = tl.dot(n2, n2, input_precision="ieee")
    n8 = tl.dot(n4, n4, input_precision="ieee")
    x = tl.dot(eye + n1, eye + n2, input_precision="ieee")
    x = tl.dot(x, eye + n4, input_precision="ieee")
    return tl.dot(x, eye + n8, input_precision="ieee")


@triton.jit
def _gated(x, row_scale, col_scale, gc_row, gc_col, DIAGONAL: tl.constexpr, STRICT: tl.constexpr):
    """``x_ij row_scale_i col_scale_j exp(gc_row_i - gc_col_j)``; on a diagonal block only below the diagonal
    (``STRICT``) or on and below it, the exponent masked before ``exp`` so that no ``inf`` is ever made."""
    x = x * row_scale[:, None] * col_scale[None, :]
    diff = gc_row[:, None] - gc_col[None, :]
    if DIAGONAL:
        r = tl.arange(0, x.shape[0])
        if STRICT:
            keep = r[:, None] > r[None, :]
        else:
            keep = r[:, None] >= r[None, :]
        return tl.where(keep, x * tl.exp(tl.where(keep, diff, 0.0)), 0.0)
    return x * tl.exp(diff)


@triton.jit
def _ieee(a, b):
    return tl.dot(a, b, input_precision="ieee")


@triton.jit
def _load_slice(ptr, rows, live, stride_t, col0, WIDTH: tl.constexpr, LIMIT: tl.constexpr):
    """Rows ``rows`` (masked by ``live``) x columns ``col0 .. col0 + WIDTH`` (masked at ``LIMIT``), as stored."""
    cols = col0 + tl.arange(0, WIDTH)
    mask = live[:, None] & (cols[None, :] < LIMIT)
    return tl.load(ptr + rows[:, None] * stride_t + cols[None, :], mask=mask, other=0.0)


@triton.jit
def _inverse_norms(ptr, rows, live, stride_t, K: tl.constexpr, KS: tl.constexpr, NK: tl.constexpr):
    """``1 / sqrt(|x|^2 + 1e-6)`` per row, FLA's ``l2norm_fwd``, over the row's ``NK`` slices of ``KS``."""
    acc = tl.zeros([rows.shape[0]], dtype=tl.float32)
    for j in tl.static_range(NK):
        x = _load_slice(ptr, rows, live, stride_t, j * KS, KS, K).to(tl.float32)
        acc += tl.sum(x * x, axis=1)
    return 1.0 / tl.sqrt(acc + 1e-6)


@triton.jit
def _row_inverse_norm(gc_head, rows, live, stride_gct, WHICH: tl.constexpr, L2NORM: tl.constexpr):
    """1 / |q| (``WHICH`` 1) or 1 / |k| (2) of ``rows``, as the WY kernel stored them beside each row's gate cumsum
    (``L2NORM``; ones otherwise): the later kernels never reread q and k for their norms."""
    if L2NORM:
        return tl.load(gc_head + rows * stride_gct + WHICH, mask=live, other=1.0)
    return tl.full([rows.shape[0]], 1.0, tl.float32)


@triton.jit
def _chunk_of_slot(cu_seqlens_ptr, num_seqs, c, BT: tl.constexpr):
    """(bos, eos, first token, sequence) of chunk slot ``c`` of a launch's numbering by chunks of ``BT``: sequence
    i's chunks start at slot ``cu_seqlens[i] // BT + i``, which leaves gaps but never overlaps (a slot in a gap:
    first token >= eos). The sequence is the last i whose first slot is <= c, found by binary search over
    ``cu_seqlens``."""
    lo = c * 0
    hi = lo + num_seqs - 1
    while lo < hi:
        mid = (lo + hi + 1) // 2
        first = tl.load(cu_seqlens_ptr + mid).to(tl.int32) // BT + mid
        up = first <= c
        lo = tl.where(up, mid, lo)
        hi = tl.where(up, hi, mid - 1)
    bos = tl.load(cu_seqlens_ptr + lo).to(tl.int32)
    eos = tl.load(cu_seqlens_ptr + lo + 1).to(tl.int32)
    return bos, eos, bos + (c - (bos // BT + lo)) * BT, lo


@triton.jit
def _caovan_gdn_prefill_wy_kernel(
    q_ptr,
    k_ptr,
    v_ptr,
    g_ptr,
    beta_ptr,
    cu_seqlens_ptr,
    w_ptr,
    u_ptr,
    gc_ptr,
    attn_ptr,
    num_seqs,
    stride_qt,
    stride_qh,
    stride_kt,
    stride_kh,
    stride_vt,
    stride_vh,
    stride_gt,
    stride_gh,
    stride_bt,
    stride_bh,
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
    PAIRED: tl.constexpr,
):
    """Program (c, hv): chunk slot c of the launch's chunk numbering (``_chunk_of_slot``; a program in a gap
    returns at once). ``PAIRED`` (the chunked path): the attention rows are 2 x BT wide, one per pair of chunks,
    and the second chunk of a pair writes its block in their second half (``chunked_kernels.py``)."""
    tl.static_assert(BT == 32, "the UT transform is built from two 16-row blocks")
    c = tl.program_id(0)
    hv = tl.program_id(1)
    bos, eos, t0, _ = _chunk_of_slot(cu_seqlens_ptr, num_seqs, c, BT)
    if t0 >= eos:
        return
    DT = k_ptr.dtype.element_ty
    r = tl.arange(0, 16)
    rows0, rows1 = t0 + r, t0 + 16 + r
    live0, live1 = rows0 < eos, rows1 < eos
    q_head = q_ptr + (hv // GROUP) * stride_qh
    k_head = k_ptr + (hv // GROUP) * stride_kh
    v_head = v_ptr + hv * stride_vh
    w_head = w_ptr + hv * stride_wh
    u_head = u_ptr + hv * stride_uh

    g0 = tl.load(g_ptr + hv * stride_gh + rows0 * stride_gt, mask=live0, other=0.0).to(tl.float32)
    g1 = tl.load(g_ptr + hv * stride_gh + rows1 * stride_gt, mask=live1, other=0.0).to(tl.float32)
    beta0 = tl.load(beta_ptr + hv * stride_bh + rows0 * stride_bt, mask=live0, other=0.0).to(tl.float32)
    beta1 = tl.load(beta_ptr + hv * stride_bh + rows1 * stride_bt, mask=live1, other=0.0).to(tl.float32)
    gc0 = tl.cumsum(g0, 0)
    gc1 = tl.cumsum(g1, 0) + tl.sum(g0, 0)
    tl.store(gc_ptr + hv * stride_gch + rows0 * stride_gct, gc0, mask=live0)
    tl.store(gc_ptr + hv * stride_gch + rows1 * stride_gct, gc1, mask=live1)
    if L2NORM:
        rk0 = _inverse_norms(k_head, rows0, live0, stride_kt, K, KS, NK)
        rk1 = _inverse_norms(k_head, rows1, live1, stride_kt, K, KS, NK)
        rq0 = _inverse_norms(q_head, rows0, live0, stride_qt, K, KS, NK)
        rq1 = _inverse_norms(q_head, rows1, live1, stride_qt, K, KS, NK)
        gc_head = gc_ptr + hv * stride_gch
        tl.store(gc_head + rows0 * stride_gct + 1, rq0, mask=live0)
        tl.store(gc_head + rows1 * stride_gct + 1, rq1, mask=live1)
        tl.store(gc_head + rows0 * stride_gct + 2, rk0, mask=live0)
        tl.store(gc_head + rows1 * stride_gct + 2, rk1, mask=live1)
    else:
        rk0 = tl.full([16], 1.0, tl.float32)
        rk1 = tl.full([16], 1.0, tl.float32)
        rq0 = tl.full([16], 1.0, tl.float32)
        rq1 = tl.full([16], 1.0, tl.float32)

    # A = strictly lower (beta k k^T exp(gc_i - gc_j)) by 16-row blocks, reduced over slices of KS keys.
    # The chunk's attention q k^T (gated, causal) by the same blocks: the state kernel reads it, not remakes it
    # for each of its value blocks.
    a00 = tl.zeros([16, 16], dtype=tl.float32)
    a11 = tl.zeros([16, 16], dtype=tl.float32)
    a10 = tl.zeros([16, 16], dtype=tl.float32)
    p00 = tl.zeros([16, 16], dtype=tl.float32)
    p11 = tl.zeros([16, 16], dtype=tl.float32)
    p10 = tl.zeros([16, 16], dtype=tl.float32)
    for j in tl.static_range(NK):
        k0 = _load_slice(k_head, rows0, live0, stride_kt, j * KS, KS, K)
        k1 = _load_slice(k_head, rows1, live1, stride_kt, j * KS, KS, K)
        q0 = _load_slice(q_head, rows0, live0, stride_qt, j * KS, KS, K)
        q1 = _load_slice(q_head, rows1, live1, stride_qt, j * KS, KS, K)
        a00 += _mm(k0, tl.trans(k0), FP32, DT)
        a11 += _mm(k1, tl.trans(k1), FP32, DT)
        a10 += _mm(k1, tl.trans(k0), FP32, DT)
        p00 += _mm(q0, tl.trans(k0), FP32, DT)
        p11 += _mm(q1, tl.trans(k1), FP32, DT)
        p10 += _mm(q1, tl.trans(k0), FP32, DT)
    p00 = _gated(p00, rq0, rk0, gc0, gc0, True, False)
    p11 = _gated(p11, rq1, rk1, gc1, gc1, True, False)
    p10 = _gated(p10, rq1, rk0, gc1, gc0, False, False)
    a_head = attn_ptr + hv * stride_ah
    if PAIRED:
        a_head += ((t0 - bos) // BT % 2) * BT
    tl.store(a_head + rows0[:, None] * stride_at + r[None, :], p00, mask=live0[:, None])
    zero = tl.zeros([16, 16], dtype=tl.float32)
    tl.store(a_head + rows0[:, None] * stride_at + 16 + r[None, :], zero, mask=live0[:, None])
    tl.store(a_head + rows1[:, None] * stride_at + r[None, :], p10, mask=live1[:, None])
    tl.store(a_head + rows1[:, None] * stride_at + 16 + r[None, :], p11, mask=live1[:, None])
    a00 = _gated(a00, beta0 * rk0, rk0, gc0, gc0, True, True)
    a11 = _gated(a11, beta1 * rk1, rk1, gc1, gc1, True, True)
    a10 = _gated(a10, beta1 * rk1, rk0, gc1, gc0, False, False)
    x00 = _unit_lower_inverse_16(a00)
    x11 = _unit_lower_inverse_16(a11)
    x10 = -_ieee(x11, _ieee(a10, x00))

    # w = X diag(beta exp(gc) / |k|) k and u = X diag(beta) v, the scales folded into X's columns (fp32, split on
    # the 16-bit path) so that k and v enter the dots exactly as stored: rounding beta v to 16 bits first was the
    # largest error in the final states.
    ck0 = beta0 * tl.exp(gc0) * rk0
    ck1 = beta1 * tl.exp(gc1) * rk1
    xk00, xk10, xk11 = x00 * ck0[None, :], x10 * ck0[None, :], x11 * ck1[None, :]
    for j in tl.static_range(NK):
        k0 = _load_slice(k_head, rows0, live0, stride_kt, j * KS, KS, K)
        k1 = _load_slice(k_head, rows1, live1, stride_kt, j * KS, KS, K)
        w0 = _mm_split_a(xk00, k0, FP32, DT)
        w1 = _mm_split_a(xk10, k0, FP32, DT) + _mm_split_a(xk11, k1, FP32, DT)
        cols = j * KS + tl.arange(0, KS)
        tl.store(w_head + rows0[:, None] * stride_wt + cols[None, :], w0.to(w_ptr.dtype.element_ty),
                 mask=live0[:, None] & (cols[None, :] < K))  # fmt: skip
        tl.store(w_head + rows1[:, None] * stride_wt + cols[None, :], w1.to(w_ptr.dtype.element_ty),
                 mask=live1[:, None] & (cols[None, :] < K))  # fmt: skip
    xv00, xv10, xv11 = x00 * beta0[None, :], x10 * beta0[None, :], x11 * beta1[None, :]
    for i in range(0, V, VS):
        v0 = _load_slice(v_head, rows0, live0, stride_vt, i, VS, V)
        v1 = _load_slice(v_head, rows1, live1, stride_vt, i, VS, V)
        u0 = _mm_split_a(xv00, v0, FP32, DT)
        u1 = _mm_split_a(xv10, v0, FP32, DT) + _mm_split_a(xv11, v1, FP32, DT)
        vcols = i + tl.arange(0, VS)
        tl.store(u_head + rows0[:, None] * stride_ut + vcols[None, :], u0,
                 mask=live0[:, None] & (vcols[None, :] < V))  # fmt: skip
        tl.store(u_head + rows1[:, None] * stride_ut + vcols[None, :], u1,
                 mask=live1[:, None] & (vcols[None, :] < V))  # fmt: skip


@triton.jit
def _state_product(x, s, SPLIT: tl.constexpr, FP32: tl.constexpr, DT: tl.constexpr):
    """``x S`` over one slab; ``SPLIT``: S as a high and a low 16-bit part on the 16-bit path (the outputs' ``q S``:
    rounding S to 16 bits there was the output's largest error), else S rounded, as FLA's ``w S``."""
    if SPLIT:
        return _mm_split_b(x, s, FP32, DT)
    return _mm(x, s, FP32, DT)


@triton.jit
def _slab_terms(x_head, x_rows, x_live, stride_xt, y_head, y_rows, y_live, stride_yt, col0, s,
                K: tl.constexpr, KS: tl.constexpr, FP32: tl.constexpr, DT: tl.constexpr,
                TWO: tl.constexpr, SPLIT_X: tl.constexpr, SPLIT_Y: tl.constexpr):  # fmt: skip
    """One key slab's share of ``x S`` and ``y S`` over its ``KS`` keys (not ``TWO``: ``x S`` twice)."""
    xs = _state_product(_load_slice(x_head, x_rows, x_live, stride_xt, col0, KS, K), s, SPLIT_X, FP32, DT)
    if not TWO:
        return xs, xs
    return xs, _state_product(_load_slice(y_head, y_rows, y_live, stride_yt, col0, KS, K), s, SPLIT_Y, FP32, DT)


@triton.jit
def _rows_times_state(x_head, x_rows, x_live, stride_xt, y_head, y_rows, y_live, stride_yt, s0, s1, s2, s3,
                      K: tl.constexpr, KS: tl.constexpr, NK: tl.constexpr, FP32: tl.constexpr, DT: tl.constexpr,
                      TWO: tl.constexpr, SPLIT_X: tl.constexpr, SPLIT_Y: tl.constexpr):  # fmt: skip
    """``(x S, y S)`` for two row sets (w and q of a chunk, or two chunks' rows; not ``TWO``: x alone), the
    state held as ``NK`` slabs of ``KS`` keys; slab by slab, both at once (sm_75: one slab's operands live at a
    time, which keeps the state kernels free of spills). ``SPLIT_X``/``SPLIT_Y``: ``_state_product``."""
    xs, ys = _slab_terms(x_head, x_rows, x_live, stride_xt, y_head, y_rows, y_live, stride_yt, 0, s0,
                         K, KS, FP32, DT, TWO, SPLIT_X, SPLIT_Y)  # fmt: skip
    if NK > 1:
        a, b = _slab_terms(x_head, x_rows, x_live, stride_xt, y_head, y_rows, y_live, stride_yt, KS, s1,
                           K, KS, FP32, DT, TWO, SPLIT_X, SPLIT_Y)  # fmt: skip
        xs, ys = xs + a, ys + b
    if NK > 2:
        a, b = _slab_terms(x_head, x_rows, x_live, stride_xt, y_head, y_rows, y_live, stride_yt, 2 * KS, s2,
                           K, KS, FP32, DT, TWO, SPLIT_X, SPLIT_Y)  # fmt: skip
        xs, ys = xs + a, ys + b
    if NK > 3:
        a, b = _slab_terms(x_head, x_rows, x_live, stride_xt, y_head, y_rows, y_live, stride_yt, 3 * KS, s3,
                           K, KS, FP32, DT, TWO, SPLIT_X, SPLIT_Y)  # fmt: skip
        xs, ys = xs + a, ys + b
    return xs, ys


@triton.jit
def _slab_update(k_head, rows, live, stride_kt, col0, s, decay, v_decay,
                 K: tl.constexpr, KS: tl.constexpr, FP32: tl.constexpr, DT: tl.constexpr):  # fmt: skip
    """The slab at the chunk's end: ``S exp(g_last) + k^T v_decay`` over its ``KS`` keys."""
    k = _load_slice(k_head, rows, live, stride_kt, col0, KS, K)
    return s * decay + _mm_split_b(tl.trans(k), v_decay, FP32, DT)


@triton.jit
def _state_update(k_head, rows, live, stride_kt, s0, s1, s2, s3, decay, v_decay,
                  K: tl.constexpr, KS: tl.constexpr, NK: tl.constexpr,
                  FP32: tl.constexpr, DT: tl.constexpr):  # fmt: skip
    """Every slab of the state after the rows ``rows``: ``S decay + k^T v_decay``."""
    s0 = _slab_update(k_head, rows, live, stride_kt, 0, s0, decay, v_decay, K, KS, FP32, DT)
    if NK > 1:
        s1 = _slab_update(k_head, rows, live, stride_kt, KS, s1, decay, v_decay, K, KS, FP32, DT)
    if NK > 2:
        s2 = _slab_update(k_head, rows, live, stride_kt, 2 * KS, s2, decay, v_decay, K, KS, FP32, DT)
    if NK > 3:
        s3 = _slab_update(k_head, rows, live, stride_kt, 3 * KS, s3, decay, v_decay, K, KS, FP32, DT)
    return s0, s1, s2, s3


@triton.jit
def _slab_pointers(ssm_head, col0, offs_v, stride_sk, stride_sv, K: tl.constexpr, V: tl.constexpr, KS: tl.constexpr):
    keys = col0 + tl.arange(0, KS)
    ptrs = ssm_head + keys[:, None] * stride_sk + offs_v[None, :] * stride_sv
    return ptrs, (keys[:, None] < K) & (offs_v[None, :] < V)


@triton.jit
def _state_slot(n, state_indices_ptr, has_initial_state_ptr, null_slot_max):
    """(slot, live, read_initial) of sequence n: ``state_indices_ptr`` None, slot n (vLLM's gathered initial
    states); otherwise a slot ``<= null_slot_max`` is null: zeros in, nothing written back."""
    if state_indices_ptr is None:
        slot = n.to(tl.int64)
        live_slot = n >= 0
    else:
        slot = tl.load(state_indices_ptr + n).to(tl.int64)
        live_slot = slot > null_slot_max
    read_initial = live_slot
    if has_initial_state_ptr is not None:
        read_initial = read_initial & (tl.load(has_initial_state_ptr + n) != 0)
    return slot, live_slot, read_initial


@triton.jit
def _load_slab(ssm_head, j: tl.constexpr, offs_v, stride_sk, stride_sv, read,
               K: tl.constexpr, V: tl.constexpr, KS: tl.constexpr, NK: tl.constexpr):  # fmt: skip
    """Key slab j (``KS`` keys x the program's values) of a cached state in fp32; zeros where ``read`` is false
    or the state has fewer than ``j + 1`` slabs."""
    if j < NK:
        ptrs, mask = _slab_pointers(ssm_head, j * KS, offs_v, stride_sk, stride_sv, K, V, KS)
        return tl.load(ptrs, mask=mask & read, other=0.0).to(tl.float32)
    return tl.zeros([KS, offs_v.shape[0]], dtype=tl.float32)


@triton.jit
def _store_slab(ssm_head, j: tl.constexpr, offs_v, stride_sk, stride_sv, s, live,
                K: tl.constexpr, V: tl.constexpr, KS: tl.constexpr, NK: tl.constexpr):  # fmt: skip
    """Key slab j of a final state back into the cache, in its dtype, where ``live``."""
    if j < NK:
        ptrs, mask = _slab_pointers(ssm_head, j * KS, offs_v, stride_sk, stride_sv, K, V, KS)
        tl.store(ptrs, s.to(ssm_head.dtype.element_ty), mask=mask & live)


@triton.jit
def _caovan_gdn_prefill_state_kernel(
    q_ptr,
    k_ptr,
    w_ptr,
    u_ptr,
    gc_ptr,
    attn_ptr,
    out_ptr,
    ssm_ptr,
    cu_seqlens_ptr,
    state_indices_ptr,
    has_initial_state_ptr,
    scale,
    null_slot_max,
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
    stride_ot,
    stride_oh,
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
    """Program (i_v, hv, n): value block i_v of value head hv of sequence n, over all its chunks in order.

    The state is ``S[k, v]`` (the transpose of vLLM's ``(V, K)`` per head when ``stride_sk == 1``); the strides say
    where each element lives in the cache, so both of vLLM's layouts are read and written in place.
    ``state_indices_ptr`` None: sequence n's state is slot n (vLLM's gathered initial states); otherwise a slot
    ``<= null_slot_max`` is null: the sequence starts from zeros and its final state is not stored.
    """
    tl.static_assert(NK <= 4, "the state is held as at most four slabs of KS keys")
    i_v = tl.program_id(0)
    hv = tl.program_id(1)
    n = tl.program_id(2)
    bos = tl.load(cu_seqlens_ptr + n).to(tl.int32)
    eos = tl.load(cu_seqlens_ptr + n + 1).to(tl.int32)
    DT = q_ptr.dtype.element_ty
    offs_v = i_v * BV + tl.arange(0, BV)
    offs_t = tl.arange(0, BT)
    slot, live_slot, read_initial = _state_slot(n, state_indices_ptr, has_initial_state_ptr, null_slot_max)
    ssm_head = ssm_ptr + slot * stride_slot + hv * stride_sh
    s0 = _load_slab(ssm_head, 0, offs_v, stride_sk, stride_sv, read_initial, K, V, KS, NK)
    s1 = _load_slab(ssm_head, 1, offs_v, stride_sk, stride_sv, read_initial, K, V, KS, NK)
    s2 = _load_slab(ssm_head, 2, offs_v, stride_sk, stride_sv, read_initial, K, V, KS, NK)
    s3 = _load_slab(ssm_head, 3, offs_v, stride_sk, stride_sv, read_initial, K, V, KS, NK)

    q_head = q_ptr + (hv // GROUP) * stride_qh
    k_head = k_ptr + (hv // GROUP) * stride_kh
    w_head = w_ptr + hv * stride_wh
    u_head = u_ptr + hv * stride_uh
    gc_head = gc_ptr + hv * stride_gch
    attn_head = attn_ptr + hv * stride_ah
    o_head = out_ptr + hv * stride_oh
    vmask = offs_v < V
    for t0 in range(bos, eos, BT):
        rows = t0 + offs_t
        live = rows < eos
        b_gc = tl.load(gc_head + rows * stride_gct, mask=live, other=0.0)
        b_gl = tl.load(gc_head + (tl.minimum(eos, t0 + BT) - 1) * stride_gct)
        rq = _row_inverse_norm(gc_head, rows, live, stride_gct, 1, L2NORM)
        rk = _row_inverse_norm(gc_head, rows, live, stride_gct, 2, L2NORM)

        ws, qs = _rows_times_state(w_head, rows, live, stride_wt, q_head, rows, live, stride_qt, s0, s1, s2, s3,
                                   K, KS, NK, FP32, DT, True, False, True)  # fmt: skip

        tv_mask = live[:, None] & vmask[None, :]
        u = tl.load(u_head + rows[:, None] * stride_ut + offs_v[None, :], mask=tv_mask, other=0.0)
        v_new = u - ws
        attn = tl.load(attn_head + rows[:, None] * stride_at + offs_t[None, :], mask=live[:, None], other=0.0)
        # As FLA's chunk_fwd_o: gates and scale in fp32 after the dots; unlike FLA, neither the attention nor
        # v_new rounded to 16 bits (the output's second largest error).
        b_o = (qs * (rq * tl.exp(b_gc))[:, None] + _mm_split_ab(attn, v_new, FP32, DT)) * scale
        tl.store(o_head + rows[:, None] * stride_ot + offs_v[None, :], b_o.to(out_ptr.dtype.element_ty), mask=tv_mask)

        # As FLA's chunk_fwd_h: v_new decayed to the chunk's end in fp32; 1 / |k| folded into it.
        v_decay = v_new * (tl.exp(b_gl - b_gc) * rk)[:, None]
        s0, s1, s2, s3 = _state_update(k_head, rows, live, stride_kt, s0, s1, s2, s3, tl.exp(b_gl), v_decay,
                                       K, KS, NK, FP32, DT)  # fmt: skip
    if WRITE_FINAL_STATE:
        _store_slab(ssm_head, 0, offs_v, stride_sk, stride_sv, s0, live_slot, K, V, KS, NK)
        _store_slab(ssm_head, 1, offs_v, stride_sk, stride_sv, s1, live_slot, K, V, KS, NK)
        _store_slab(ssm_head, 2, offs_v, stride_sk, stride_sv, s2, live_slot, K, V, KS, NK)
        _store_slab(ssm_head, 3, offs_v, stride_sk, stride_sv, s3, live_slot, K, V, KS, NK)
