"""Writes .exp/variants2/k_NAME.py: the state slab as a tile whose rows span fewer lanes (fewer shuffles per token).

Question: ``../skeleton-to-floor/`` (``pieces-h200.json``) split the token step's arithmetic at the last shape
(Qwen3.6-27B TP=2, 8 sequences, MTP 4, fp32 state, BV 16, one warp): leaving out either row reduction saves
0.77 µs, the decay and the rank-1 update (64 multiplies or FMAs per thread each) nothing. A row of main's [16, 128]
slab spans all 32 lanes (4 values each): a reduction is 16 rows x 5 shuffle rounds, and one warp-wide shuffle
issues per clock per SM (12 programs per SM share it with the stores). ``../value-block-waves/`` once built the
slab as a 6-D tile whose rows span 8 lanes (36 shuffles per step instead of 104 at BV 8) and found it slower,
but measured it before the one-wave rule and the staggered start, and at BV 16 never compared registers: a tile
that needs 128 registers or fewer lets 16 programs share an SM instead of 12, which ``../issue-profile/``'s
constant slab offsets (128 registers) and ``../residency-cap/`` found slower by itself at this shape. Here the
same 6-D tile on today's kernel, at several row widths:

  rowsL        rows of L lanes (L = 8 or 16; 32 // L rows share a warp's lanes), q/k read one token ahead as on main:
               a reduction is (BV * L / 32) rows x log2(L) shuffles per thread; each thread holds 128 / L key
               columns of q and k (so L = 8 holds 4 times main's q/k registers)
  rowsLn       the same with q/k read at the top of each step (no read-ahead registers)
  rows16q      rows16 with ``../token-step-placement/``'s qkafter32 edits: the next token's q/k read after the
               token's arithmetic, before its stores; token rows and slots picked as int32
  rows16skel   a bound (wrong results): rows16 without the state arithmetic (as ``../skeleton-to-floor/``'s
               ``askel``): what the token step of this tile costs
  rows16qs3    rows16q with a third of the value heads staggered (``i_nhv % 3 == 1`` wait for the Q/K kernel)
  rows16qs34   rows16q with three quarters of them staggered (``i_nhv % 4 != 0``)
  arows16      rows16 alone (``NO_QK_KERNEL``, as ``../skeleton-to-floor/``'s ``alone``: wrong by design)

The tile is [RL, KT, 1, RH, KR, KS] (one warp: no warp axis): value row rl * RH + rh, key column
(kr * KT + kt) * KS + ks; Triton gives the warp's lanes to KS's vectors first, then KT, then RL.

Usage (repository root): python3 docs/bench/experiments/row-split-tile/make_variants.py
"""

import importlib.util
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from source_edits import NO_QK_KERNEL_FLAGS, V_GDN_KERNEL, sub_in_v_kernel, write_variants  # noqa: E402

# rows16q takes token-step-placement's int32 picks as they are (the folder is no package: loaded by path).
_placement = importlib.util.spec_from_file_location(
    "token_step_placement_variants",
    os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "token-step-placement", "make_variants.py"),
)
_placement_module = importlib.util.module_from_spec(_placement)
_placement.loader.exec_module(_placement_module)
idx32 = _placement_module.idx32

MAIN = open("src/caovan/kernels/gdn_spec_decode/triton_kernels.py").read()


ROW_DOT = '''

@triton.jit
def _row_dot(slab, x):
    """Per value row of a [RL, KT, 1, RH, KR, KS] slab: the dot product with x over the key axes (KT, KR, KS)."""
    partial = tl.sum(tl.sum(slab * x, axis=5, keep_dims=True), axis=4, keep_dims=True)
    return tl.sum(partial, axis=1, keep_dims=True)


@triton.jit
def _caovan_sm75_fused_v_gdn_spec_decode_kernel('''

SLAB_OLD_START = "    if CONST_SLAB_OFFSETS:\n"
SLAB_OLD_END = "    slab_mask = v_mask[:, None] & k_mask[None, :]\n"
SLAB_NEW = """    KS: tl.constexpr = 4
    # Rows of ROW_COLUMNS key columns (4 per lane), fewer where K is shorter (the small cases of the CPU check, K = 32).
    KT: tl.constexpr = ROW_COLUMNS // KS if BK >= ROW_COLUMNS else BK // KS
    RL: tl.constexpr = 32 // KT
    RH: tl.constexpr = BV // RL
    KR: tl.constexpr = BK // (KT * KS)
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
"""
QK_OLD = """    qk_row = qk_scratch_ptr + i_h * K + k_offs
    q_next = tl.load(qk_row + bos * (2 * H * K), mask=k_mask, other=0.0)
    k_next = tl.load(qk_row + bos * (2 * H * K) + H * K, mask=k_mask, other=0.0)
"""
QK_NEW = """    qk_cols = tl.zeros([RL, 1, 1, 1, 1, 1], dtype=tl.int32) + k6
    qk_mask = qk_cols < K
    qk_row = qk_scratch_ptr + i_h * K + qk_cols
    q_next = tl.load(qk_row + bos * (2 * H * K), mask=qk_mask, other=0.0)
    k_next = tl.load(qk_row + bos * (2 * H * K) + H * K, mask=qk_mask, other=0.0)
    out_row_ptr = out_ptr + i_hv * stride_out_head + v6
"""
NEXT_OLD = "        next_mask = k_mask & (t + 1 < seq_len)\n"
NEXT_NEW = "        next_mask = qk_mask & (t + 1 < seq_len)\n"
V_OLD = "        v = tl.sum(tl.where((conv_rows == t)[:, None], v_conv, 0.0), axis=0)\n"
V_NEW = (
    "        v = tl.reshape(tl.sum(tl.where((conv_rows == t)[:, None], v_conv, 0.0), axis=0), [RL, 1, 1, RH, 1, 1])\n"
)
MATH_OLD = """        v -= tl.sum(state * k[None, :], axis=1)
        v *= beta
        state += v[:, None] * k[None, :]
        o = tl.sum(state * q[None, :], axis=1)
        tl.store(out_head_ptr + row * stride_out_token, o.to(out_ptr.dtype.element_ty), mask=v_mask)
"""
MATH_NEW = """        v -= _row_dot(state, k)
        v *= beta
        state += v * k
        o = _row_dot(state, q)
        tl.store(out_row_ptr + row * stride_out_token, o.to(out_ptr.dtype.element_ty), mask=v6_mask)
"""
READ_AHEAD = """        q = q_next
        k = k_next
        next_mask = qk_mask & (t + 1 < seq_len)
        q_next = tl.load(qk_row + (bos + t + 1) * (2 * H * K), mask=next_mask, other=0.0)
        k_next = tl.load(qk_row + (bos + t + 1) * (2 * H * K) + H * K, mask=next_mask, other=0.0)
"""
AT_TOP = """        q = tl.load(qk_row + (bos + t) * (2 * H * K), mask=qk_mask, other=0.0)
        k = tl.load(qk_row + (bos + t) * (2 * H * K) + H * K, mask=qk_mask, other=0.0)
"""


def rows(lanes, read_ahead=True):
    text = MAIN.replace("\n\n@triton.jit\ndef _caovan_sm75_fused_v_gdn_spec_decode_kernel(", ROW_DOT, 1)
    i = text.index(V_GDN_KERNEL)
    start = text.index(SLAB_OLD_START, i)
    end = text.index(SLAB_OLD_END, start) + len(SLAB_OLD_END)
    text = text[:start] + SLAB_NEW.replace("ROW_COLUMNS", str(lanes * 4)) + text[end:]
    text = sub_in_v_kernel(text, QK_OLD, QK_NEW)
    text = sub_in_v_kernel(text, NEXT_OLD, NEXT_NEW)
    text = sub_in_v_kernel(text, V_OLD, V_NEW)
    text = sub_in_v_kernel(text, MATH_OLD, MATH_NEW)
    if not read_ahead:
        text = sub_in_v_kernel(text, READ_AHEAD, AT_TOP)
        text = sub_in_v_kernel(
            text,
            "    q_next = tl.load(qk_row + bos * (2 * H * K), mask=qk_mask, other=0.0)\n"
            "    k_next = tl.load(qk_row + bos * (2 * H * K) + H * K, mask=qk_mask, other=0.0)\n",
            "",
        )
    return text


def rows16q():
    text = rows(16)
    loads = (
        "        next_mask = qk_mask & (t + 1 < seq_len)\n"
        "        q_next = tl.load(qk_row + (bos + t + 1) * (2 * H * K), mask=next_mask, other=0.0)\n"
        "        k_next = tl.load(qk_row + (bos + t + 1) * (2 * H * K) + H * K, mask=next_mask, other=0.0)\n"
    )
    text = sub_in_v_kernel(text, loads, "")
    after = "        o = _row_dot(state, q)\n"
    text = sub_in_v_kernel(text, after, after + loads)
    return idx32(text)


def rows16skel():
    return sub_in_v_kernel(
        rows(16),
        MATH_NEW.replace("        tl.store(out_row_ptr", "        # tl.store(out_row_ptr", 1).split("        # ")[0],
        "        o = v * beta * decay + tl.sum(q * k)\n",
    ).replace("        state *= decay\n        o = v", "        o = v", 1)


VARIANTS = {f"rows{lanes}{'' if ahead else 'n'}": rows(lanes, ahead) for lanes in (8, 16) for ahead in (True, False)}
VARIANTS["rows16q"] = rows16q()
VARIANTS["rows16skel"] = rows16skel()
VARIANTS["rows16qs3"] = sub_in_v_kernel(rows16q(), "        if i_nhv % 2 == 1:\n", "        if i_nhv % 3 == 1:\n")
VARIANTS["rows16qs34"] = sub_in_v_kernel(rows16q(), "        if i_nhv % 2 == 1:\n", "        if i_nhv % 4 != 0:\n")
VARIANTS["arows16"] = rows(16) + NO_QK_KERNEL_FLAGS

if __name__ == "__main__":
    write_variants(VARIANTS)
