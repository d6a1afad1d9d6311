"""Writes .exp/variants2/k_NAME.py: main's split-row token step with its row reductions as a transposed butterfly.

Question: at the last shape (Qwen3.6-27B TP=2, 8 sequences, MTP 4, fp32 state) main's V/GDN kernel holds the
[16, 128] state slab as rows of 16 lanes (../row-split-tile/): each thread keeps 8 rows x 8 key columns, and each
of the token step's two row reductions is, after the in-thread sums, 8 rows x 4 shuffle rounds (32 shuffles and
32 adds per thread). Done as a reduce-scatter (each exchange halves the rows a lane keeps: 4 + 2 + 1 shuffles,
then 1 to finish the sum), a row's total is in 2 of its 16 lanes after 8 shuffles; state . k then needs it back
in every lane of the row (8 indexed shuffles), state . q only in one lane, which stores the output. 16 + 8
shuffles per token instead of 64. ``../row-reduction-bound/``'s ``bfly`` did this for rows of 32 lanes (before the
split rows, at 194-197 registers) and found no gain at the last shape; ``../skeleton-to-floor/`` then measured
each reduction at 0.77 us there, and the split rows took 0.5-0.6 us of it. Is the rest worth a layout-bound
inline-PTX reduction?

The PTX assumes the layout Triton 3.6 gives the slab at that launch (TTGIR, sm_90: ``sizePerThread
[1,1,1,1,1,4], threadsPerWarp [2,16,1,1,1,1], order [5,0,1,2,3,4]``): lane bit 0 is ``RL``, lane bits 1-4 are
``KT``, and a thread's 8 partial sums after the in-thread reductions are its rows ``rh = 0..7`` in register
order (``pack=8``). Where that does not hold the float64 check fails (the H200 harness lists it in ``problems``).

  bfly16     both row reductions as above
  bfly16o    only state . q (the output) as a butterfly; state . k as main
  bfly16f    the reductions of one token step regrouped: state_t . q_t (token t's output) and state_t . k_{t+1}
             (token t+1's correction, times its decay) read the same state and go through one butterfly of 16
             values (8 rows x 2 vectors: 15 exchanges, then 8 broadcasts), so each token step waits for one
             reduction instead of two in a row; state_0 . k_0 before the loop, k read two tokens ahead
  bfly16s    bfly16 with the token's scalars read one token ahead (its row, a, b and state slot, as scalar
             loads; the gating computed per token) instead of picked out of [BT] tiles, which costs cross-lane
             reductions: 12 of the 32 shuffles per token step that are not the row reductions
  bfly16sv   (bound, wrong results) bfly16s with token 0's V row used for every token: no per-token V pick (12
             shuffles) and no conversion of it to the slab's row layout (8)
  mainsa     main (the butterfly in) with bfly16s's scalars read one token ahead
  nocross16sv (bound, wrong results) nocross16 with bfly16sv's edits: no shuffle left in the token loop
  nocross16  (bound, wrong results) both reductions without any cross-lane step: each lane's own partial sums
             used as the row's total, the rest of the step as in bfly16

Usage (repository root): python3 docs/bench/experiments/row16-butterfly/make_variants.py
"""

import os
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from source_edits import V_GDN_KERNEL, sub, sub_in_v_kernel, write_variants  # noqa: E402

# The kernels of 12e0b95, before the butterfly was taken into main, given the constexpr the launch entry passes
# since then (unused here: each variant's own token step decides).
MAIN = sub(
    subprocess.run(
        ["git", "show", "12e0b95:src/caovan/kernels/gdn_spec_decode/triton_kernels.py"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout,
    "    ROW_LANES: tl.constexpr = 32,\n",
    "    ROW_LANES: tl.constexpr = 32,\n"
    "    ROW_BUTTERFLY: tl.constexpr = False,  # passed by the entry since the butterfly (unused here)\n",
)
# Main as it is now (the butterfly in), for the variants that build on it.
CURRENT = sub(
    open("src/caovan/kernels/gdn_spec_decode/triton_kernels.py").read(),
    "from . import row_butterfly\n",
    "from caovan.kernels.gdn_spec_decode import row_butterfly\n",  # the variants load outside the package
)


def reduce_scatter(count: int, first_input: int, mask: int) -> list[str]:
    """PTX lines that load ``count`` partials (``$first_input..``) into ``%c0..`` and halve them over lane bits
    ``mask``, ``mask / 2``, ...: the lane with the bit set keeps the upper half and sends the lower half."""
    lines = ["{", ".reg .pred %p;", ".reg .b32 %lid, %bit, %rl, %src;", f".reg .f32 %c<{count}>, %snd, %kp, %rcv;"]
    lines.append("mov.u32 %lid, %laneid;")
    lines += [f"mov.f32 %c{i}, ${first_input + i};" for i in range(count)]
    while count > 1:
        half = count // 2
        lines += [f"and.b32 %bit, %lid, {mask};", "setp.ne.u32 %p, %bit, 0;"]
        for i in range(half):
            lines += [
                f"selp.f32 %snd, %c{i}, %c{i + half}, %p;",
                f"selp.f32 %kp, %c{i + half}, %c{i}, %p;",
                f"shfl.sync.bfly.b32 %rcv, %snd, {mask}, 31, -1;",
                f"add.f32 %c{i}, %kp, %rcv;",
            ]
        count, mask = half, mask >> 1
    return lines


def butterfly_ptx(broadcast: bool) -> str:
    """8 row partials per lane over lane bits 1-4 (xor 16, 8, 4, 2); inputs $8..$15, outputs $0..$7.

    After the three halving exchanges lane L keeps row 4*b4 + 2*b3 + b2 (bN: bit N of L) summed over the 8 lanes
    that differ in b2-b4; one exchange over b1 completes it. ``broadcast``: output j is row j's total (of the
    lane's own RL, lane bit 0), fetched from lane (L & 1) | j's bits at 2-4; otherwise every output is the
    lane's own row total."""
    lines = reduce_scatter(8, 8, 16)
    lines += ["shfl.sync.bfly.b32 %rcv, %c0, 2, 31, -1;", "add.f32 %c0, %c0, %rcv;"]
    if broadcast:
        lines.append("and.b32 %rl, %lid, 1;")
        for j in range(8):
            bits = ((j & 1) << 2) | (((j >> 1) & 1) << 3) | ((j >> 2) << 4)
            lines += [f"or.b32 %src, %rl, {bits};", f"shfl.sync.idx.b32 ${j}, %c0, %src, 31, -1;"]
    else:
        lines += [f"mov.f32 ${j}, %c0;" for j in range(8)]
    lines.append("}")
    return "\n".join(lines)


def fused_butterfly_ptx() -> str:
    """16 partials per lane (rows 0-7 of q at $16..$23, of k at $24..$31) over lane bits 1-4 (xor 16, 8, 4, 2).

    After the four halving exchanges lane L holds the total of vector b4 (0: q, 1: k), row 4*b3 + 2*b2 + b1.
    Outputs $0..$7: the lane's own total (its q row's output where b4 = 0); $8..$15: k rows 0-7 of the lane's
    RL (lane bit 0), fetched from lane (L & 1) | 16 | the row's bits at 1-3."""
    lines = reduce_scatter(16, 16, 16)
    lines += [f"mov.f32 ${j}, %c0;" for j in range(8)]
    lines.append("and.b32 %rl, %lid, 1;")
    for j in range(8):
        bits = 16 | (((j >> 2) & 1) << 3) | (((j >> 1) & 1) << 2) | ((j & 1) << 1)
        lines += [f"or.b32 %src, %rl, {bits};", f"shfl.sync.idx.b32 ${8 + j}, %c0, %src, 31, -1;"]
    lines.append("}")
    return "\n".join(lines)


HELPERS = f'''_BFLY_BCAST = tl.constexpr("""{butterfly_ptx(True)}""")
_BFLY_OWN = tl.constexpr("""{butterfly_ptx(False)}""")
_BFLY_CONSTRAINTS = tl.constexpr("{",".join(["=f"] * 8 + ["f"] * 8)}")
_BFLY_FUSED = tl.constexpr("""{fused_butterfly_ptx()}""")
_BFLY_FUSED_CONSTRAINTS = tl.constexpr("{",".join(["=f"] * 16 + ["f"] * 16)}")


@triton.jit
def _lane_row_partials(slab, x):
    """[RL, KT, 1, RH] (no size-1 axes kept: their layout would hold copies per thread): per thread, its part of
    each row's dot product with x (the in-thread sums of ``_row_dot``)."""
    return tl.sum(tl.sum(slab * x, axis=5), axis=4)


@triton.jit
def _row_dot_bfly(slab, x, BROADCAST: tl.constexpr, CROSS: tl.constexpr):
    """[RL, KT, 1, RH, 1, 1]: BROADCAST, every lane its rows' totals; else every slot the lane's own row total."""
    partial = _lane_row_partials(slab, x)
    if CROSS:
        if BROADCAST:
            partial = tl.inline_asm_elementwise(
                _BFLY_BCAST, _BFLY_CONSTRAINTS, [partial], dtype=tl.float32, is_pure=True, pack=8
            )
        else:
            partial = tl.inline_asm_elementwise(
                _BFLY_OWN, _BFLY_CONSTRAINTS, [partial], dtype=tl.float32, is_pure=True, pack=8
            )
    return tl.expand_dims(tl.expand_dims(partial, 4), 5)


@triton.jit
def _row_dots_fused_bfly(slab, q, k):
    """(lane's own total: its q row's output on the lanes with b4 = 0, every lane's k rows' totals)."""
    own, k_rows = tl.inline_asm_elementwise(
        _BFLY_FUSED,
        _BFLY_FUSED_CONSTRAINTS,
        [_lane_row_partials(slab, q), _lane_row_partials(slab, k)],
        dtype=(tl.float32, tl.float32),
        is_pure=True,
        pack=8,
    )
    return tl.expand_dims(tl.expand_dims(own, 4), 5), tl.expand_dims(tl.expand_dims(k_rows, 4), 5)


@triton.jit
'''

SPLIT_STEP = """            v -= _row_dot(state, k)
            v *= beta
            state += v * k
            o = _row_dot(state, q)
"""
STORE = """            tl.store(out_row_ptr + row * stride_out_token, o.to(out_ptr.dtype.element_ty), mask=v6_mask)
"""
OWN_STORE = """            o_own = tl.max(o, axis=3, keep_dims=True)  # in-thread: every slot holds the lane's row total
            tl.store(own_out_ptr + row * stride_out_token, o_own.to(out_ptr.dtype.element_ty), mask=own_mask)
"""
OUT_PTR = """        out_row_ptr = out_ptr + i_hv * stride_out_head + v6
"""
# Lane (rl, kt) holds row 4*b4 + 2*b3 + b2 of its RL half after the exchanges (kt = lane >> 1, so bN = bit N-1
# of kt); the lanes with kt odd hold a copy and do not store.
OWN_PTR = """        out_row_ptr = out_ptr + i_hv * stride_out_head + v6
        kt6 = tl.arange(0, KT)[None, :, None, None, None, None]
        own_v = (
            i_vb * BV
            + tl.arange(0, RL)[:, None, None, None, None, None] * RH
            + ((kt6 >> 3) & 1) * 4 + ((kt6 >> 2) & 1) * 2 + ((kt6 >> 1) & 1)
        )
        own_out_ptr = out_ptr + i_hv * stride_out_head + own_v
        own_mask = ((kt6 & 1) == 0) & (own_v < V)
"""


def variant(k_step: str, q_step: str, cross: bool) -> str:
    text = sub(MAIN, "@triton.jit\n" + V_GDN_KERNEL, HELPERS + V_GDN_KERNEL)
    step = f"""            u = (v - {k_step}) * beta
            state += u * k
            o = {q_step}
"""
    text = sub_in_v_kernel(text, SPLIT_STEP, step)
    text = sub_in_v_kernel(text, OUT_PTR, OWN_PTR)
    return sub_in_v_kernel(text, STORE, OWN_STORE).replace("CROSS_FLAG", str(cross))


LOOP_HEAD = """    conv_rows = tl.arange(0, BU)
    for t in range(0, seq_len):
"""
STATE_STORES = "        block_t = tl.sum(tl.where(pick, blocks_all, 0)).to(tl.int64)\n"
# Lane (rl, kt) holds vector b4 (kt bit 3), row 4*b3 + 2*b2 + b1 after the fused exchanges; the q lanes store.
FUSED_LOOP = """    conv_rows = tl.arange(0, BU)
    if ROW_LANES < 32:
        kt6 = tl.arange(0, KT)[None, :, None, None, None, None]
        own_v = (
            i_vb * BV
            + tl.arange(0, RL)[:, None, None, None, None, None] * RH
            + ((kt6 >> 2) & 1) * 4 + ((kt6 >> 1) & 1) * 2 + (kt6 & 1)
        )
        own_out_ptr = out_ptr + i_hv * stride_out_head + own_v
        own_mask = (((kt6 >> 3) & 1) == 0) & (own_v < V)
        q_cur = q_next
        k_cur = k_next
        k_ahead = tl.load(qk_row + (bos + 1) * (2 * H * K) + H * K, mask=qk_mask & (1 < seq_len), other=0.0)
        state_k = _row_dot_bfly(state, k_cur, True, True)
        for t in range(0, seq_len):
            pick = token_rows == t
            row = tl.sum(tl.where(pick, rows_all, 0)).to(tl.int64)
            v = tl.reshape(tl.sum(tl.where((conv_rows == t)[:, None], v_conv, 0.0), axis=0), [RL, 1, 1, RH, 1, 1])
            decay = tl.sum(tl.where(pick, decay_all, 0.0))
            beta = tl.sum(tl.where(pick, beta_all, 0.0))
            u = (v - decay * state_k) * beta
            state = state * decay + u * k_cur
            o, state_k = _row_dots_fused_bfly(state, q_cur, k_ahead)
            q_cur = tl.load(qk_row + (bos + t + 1) * (2 * H * K), mask=qk_mask & (t + 1 < seq_len), other=0.0)
            k_cur = k_ahead
            k_ahead = tl.load(
                qk_row + (bos + t + 2) * (2 * H * K) + H * K, mask=qk_mask & (t + 2 < seq_len), other=0.0
            )
            o_own = tl.max(o, axis=3, keep_dims=True)
            tl.store(own_out_ptr + row * stride_out_token, o_own.to(out_ptr.dtype.element_ty), mask=own_mask)
STORES_HERE
    else:
        for t in range(0, seq_len):
"""


def indent(text: str) -> str:
    return "".join("    " + line if line.strip() else line for line in text.splitlines(keepends=True))


def fused_variant() -> str:
    text = sub(MAIN, "@triton.jit\n" + V_GDN_KERNEL, HELPERS + V_GDN_KERNEL)
    head, loop = text.split(LOOP_HEAD)
    stores = indent(STATE_STORES + loop.split(STATE_STORES)[1])
    return head + FUSED_LOOP.replace("STORES_HERE\n", stores) + indent(loop)


SCALARS_AHEAD = """    a_head = a_ptr + i_hv * stride_a_head
    b_head = b_ptr + i_hv * stride_b_head
    if HAS_TOKEN_INDEX:
        row_ahead = tl.load(token_index_ptr + bos).to(tl.int64)
    else:
        row_ahead = bos
    a_ahead = tl.load(a_head + row_ahead * stride_a_token)
    b_ahead = tl.load(b_head + row_ahead * stride_b_token)
    block_ahead = tl.load(si_row_ptr).to(tl.int64)
"""
PICK_ROW = """        pick = token_rows == t
        row = tl.sum(tl.where(pick, rows_all, 0)).to(tl.int64)
"""
TAKE_AHEAD = """        row = row_ahead
        x_t = a_ahead.to(tl.float32) + dt_bias
        decay = tl.exp(neg_A * tl.where(x_t <= 20.0, tl.log(1.0 + tl.exp(x_t)), x_t))
        beta = tl.sigmoid(b_ahead.to(tl.float32))
        block_t = block_ahead
        ahead = t + 1 < seq_len
        if HAS_TOKEN_INDEX:
            row_ahead = tl.load(token_index_ptr + bos + t + 1, mask=ahead, other=0).to(tl.int64)
        else:
            row_ahead = bos + t + 1
        a_ahead = tl.load(a_head + row_ahead * stride_a_token, mask=ahead, other=0.0)
        b_ahead = tl.load(b_head + row_ahead * stride_b_token, mask=ahead, other=0.0)
        block_ahead = tl.load(si_row_ptr + t + 1, mask=ahead, other=NULL_SLOT_MAX).to(tl.int64)
"""
PICKS = """        decay = tl.sum(tl.where(pick, decay_all, 0.0))
        beta = tl.sum(tl.where(pick, beta_all, 0.0))
"""
PICK_BLOCK = """        block_t = tl.sum(tl.where(pick, blocks_all, 0)).to(tl.int64)
"""
V_PICK = (
    "            v = tl.reshape(tl.sum(tl.where((conv_rows == t)[:, None], v_conv, 0.0), axis=0), "
    "[RL, 1, 1, RH, 1, 1])\n"
)


def scalars_ahead(text: str) -> str:
    text = sub_in_v_kernel(
        text,
        "    if USE_PDL:\n        # Launched as a programmatic",
        SCALARS_AHEAD + "    if USE_PDL:\n        # Launched as a programmatic",
    )
    text = sub_in_v_kernel(text, PICK_ROW, TAKE_AHEAD)
    text = sub_in_v_kernel(text, PICKS, "")
    return sub_in_v_kernel(text, PICK_BLOCK, "")


def v_hoisted(text: str) -> str:
    hoisted = V_PICK.replace("conv_rows == t", "conv_rows == 0").replace("            v = ", "    v_token0 = ")
    text = sub_in_v_kernel(text, LOOP_HEAD, LOOP_HEAD.replace("    for t", hoisted + "    for t"))
    return sub_in_v_kernel(text, V_PICK, "            v = v_token0\n")


BFLY16 = variant("_row_dot_bfly(state, k, True, CROSS_FLAG)", "_row_dot_bfly(state, q, False, CROSS_FLAG)", True)
NOCROSS16 = variant("_row_dot_bfly(state, k, True, CROSS_FLAG)", "_row_dot_bfly(state, q, False, CROSS_FLAG)", False)

VARIANTS = {
    "bfly16s": scalars_ahead(BFLY16),
    "mainsa": scalars_ahead(CURRENT),
    "bfly16sv": v_hoisted(scalars_ahead(BFLY16)),
    "nocross16sv": v_hoisted(scalars_ahead(NOCROSS16)),
    "bfly16f": fused_variant(),
    "bfly16": BFLY16,
    "bfly16o": variant("_row_dot(state, k)", "_row_dot_bfly(state, q, False, CROSS_FLAG)", True),
    "nocross16": NOCROSS16,
}

if __name__ == "__main__":
    write_variants(VARIANTS)
