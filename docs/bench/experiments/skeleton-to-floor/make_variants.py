"""Writes .exp/variants2/k_NAME.py: main's V/GDN kernel stripped one piece at a time down to the bare state fan-out.

Question: ``../memory-floor/``'s bisect stopped at a skeleton (no state arithmetic, no V conv, no q/k) still ~2 µs
over the fan-out floor, but that skeleton ran behind the Q/K kernel and the floor did not. With every variant
alone (``NO_QK_KERNEL``: ``../last-token-write-through/ab.py`` launches no Q/K kernel), which of the pieces between
the skeleton and the fan-out costs the time? Timing only: every variant but ``alone`` is wrong by design (the
float64 check lists them under ``problems``), and ``alone`` too, since nobody writes the q/k scratch.

Cumulative, each variant removing one more piece from the one before:

  alone     main's kernel as it is (its waits find no Q/K kernel)
  askel     no state arithmetic: the slab is stored as loaded; q, k, v and the gating still feed the output
  anoconv   also no V conv: the V rows read straight from ``mixed_qkv`` (no window load, store or barrier)
  abare     also no q/k scratch loads (q = k = 0)
  aoutoff   also the output stores predicated off at run time (``row < 0``): still issued, no memory traffic
  anogate   also no gating inputs (decay = beta = 1: no ``a``/``b``/``A_log``/``dt_bias`` loads)
  anov      also no V rows (v = 0)
  anopick   also no output store and no [BT] picks: the token's slot loaded in the loop, as the fan-out does
  afloor    ``../memory-floor/fanout.py``'s body in main's signature and grid: the fan-out itself

and, to split the arithmetic (each is main's kernel with one piece of the token step left out; ``a`` prefix: alone
as above, none: behind the Q/K kernel as main):

  [a]nodecay   the state not decayed (no ``state *= decay``: 64 multiplies per thread and token)
  [a]nokv      no state·k reduction (v enters the update as loaded)
  [a]noupd     no rank-1 update (the state only decays)
  [a]noo       no state·q reduction (the output is v)

Usage (repository root): python3 docs/bench/experiments/skeleton-to-floor/make_variants.py
"""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from source_edits import NO_QK_KERNEL_FLAGS, V_GDN_KERNEL, sub_in_v_kernel, write_variants  # noqa: E402

MAIN = open("src/caovan/kernels/gdn_spec_decode/triton_kernels.py").read()


MATH = """        state *= decay
        v -= tl.sum(state * k[None, :], axis=1)
        v *= beta
        state += v[:, None] * k[None, :]
        o = tl.sum(state * q[None, :], axis=1)
"""
V_CONV_CALL_START = "    v_conv = _conv_update_silu(\n"
V_ROWS = """    v_rows = tl.arange(0, BU)
    v_conv = tl.load(
        mixed_qkv_ptr
        + (bos + v_rows.to(tl.int64))[:, None] * stride_x_token
        + (2 * H * K + i_hv * V + v_offs)[None, :],
        mask=(v_rows < seq_len)[:, None] & v_mask[None, :],
        other=0.0,
    ).to(tl.float32)
"""
OUT_STORE = "        tl.store(out_head_ptr + row * stride_out_token, o.to(out_ptr.dtype.element_ty), mask=v_mask)\n"
GATING = """    x_all = tl.load(a_ptr + rows_all * stride_a_token + i_hv * stride_a_head, mask=row_mask, other=0.0)
    x_all = x_all.to(tl.float32) + dt_bias
    decay_all = tl.exp(neg_A * tl.where(x_all <= 20.0, tl.log(1.0 + tl.exp(x_all)), x_all))
    b_all = tl.load(b_ptr + rows_all * stride_b_token + i_hv * stride_b_head, mask=row_mask, other=0.0)
    beta_all = tl.sigmoid(b_all.to(tl.float32))
"""
GATING_SCALARS = """    neg_A = -tl.exp(tl.load(A_log_ptr + i_hv).to(tl.float32))
    dt_bias = tl.load(dt_bias_ptr + i_hv).to(tl.float32)
"""
LOOP_PICKS = """        pick = token_rows == t
        row = tl.sum(tl.where(pick, rows_all, 0))
"""
BLOCK_PICK = "        block_t = tl.sum(tl.where(pick, blocks_all, 0))\n"


def variants():
    out = {"alone": MAIN}
    text = sub_in_v_kernel(MAIN, MATH, "        o = v * beta * decay + tl.sum(q * k)\n")
    out["askel"] = text
    i = text.index(V_GDN_KERNEL)
    start = text.index(V_CONV_CALL_START, i)
    end = text.index("    )\n", start) + len("    )\n")
    text = text[:start] + V_ROWS + text[end:]
    out["anoconv"] = text
    text = sub_in_v_kernel(
        text,
        "    q_next = tl.load(qk_row + bos * (2 * H * K), mask=k_mask, other=0.0)\n"
        "    k_next = tl.load(qk_row + bos * (2 * H * K) + H * K, mask=k_mask, other=0.0)\n",
        "    q_next = tl.zeros([BK], dtype=tl.float32)\n    k_next = tl.zeros([BK], dtype=tl.float32)\n",
    )
    text = sub_in_v_kernel(
        text,
        "        q_next = tl.load(qk_row + (bos + t + 1) * (2 * H * K), mask=next_mask, other=0.0)\n"
        "        k_next = tl.load(qk_row + (bos + t + 1) * (2 * H * K) + H * K, mask=next_mask, other=0.0)\n",
        "",
    )
    out["abare"] = text
    text = sub_in_v_kernel(text, OUT_STORE, OUT_STORE.replace("mask=v_mask", "mask=v_mask & (row < 0)"))
    out["aoutoff"] = text
    text = sub_in_v_kernel(
        text, GATING, "    decay_all = tl.full([BT], 1.0, tl.float32)\n    beta_all = tl.full([BT], 1.0, tl.float32)\n"
    )
    text = sub_in_v_kernel(text, GATING_SCALARS, "")
    out["anogate"] = text
    text = sub_in_v_kernel(text, V_ROWS, "    v_conv = tl.zeros([BU, BV], dtype=tl.float32)\n")
    out["anov"] = text
    text = sub_in_v_kernel(text, OUT_STORE.replace("mask=v_mask", "mask=v_mask & (row < 0)"), "")
    text = sub_in_v_kernel(text, LOOP_PICKS, "        pick = token_rows == t  # only dead values use it now\n")
    text = sub_in_v_kernel(text, BLOCK_PICK, "        block_t = tl.load(si_row_ptr + t).to(tl.int64)\n")
    out["anopick"] = text
    # The fan-out itself, in main's signature and grid: everything after the null-slot exits replaced by its loop.
    i = text.index(V_GDN_KERNEL)
    start = text.index("    if CONST_SLAB_OFFSETS:\n", i)
    out["afloor"] = text[:start] + FLOOR_TAIL
    out = {name: body + NO_QK_KERNEL_FLAGS for name, body in out.items()}
    for name, (old, new) in ARITHMETIC_PIECES.items():
        out[name] = sub_in_v_kernel(MAIN, old, new)
        out["a" + name] = out[name] + NO_QK_KERNEL_FLAGS
    return out


ARITHMETIC_PIECES = {
    "nodecay": ("        state *= decay\n", "        v *= decay  # keeps decay live\n"),
    "nokv": ("        v -= tl.sum(state * k[None, :], axis=1)\n", ""),
    "noupd": ("        state += v[:, None] * k[None, :]\n", "        q += tl.sum(v)  # keeps v live\n"),
    "noo": ("        o = tl.sum(state * q[None, :], axis=1)\n", "        o = v + tl.sum(q)  # keeps q live\n"),
}


FLOOR_TAIL = """    slab_offs = (
        v_offs.to(tl.int64)[:, None] * stride_ssm_v + k_offs.to(tl.int64)[None, :] * stride_ssm_k
    )
    head_base = ssm_state_ptr + i_hv.to(tl.int64) * stride_ssm_head
    slab = tl.load(head_base + initial_block * stride_ssm_block + slab_offs)
    for t in range(0, seq_len):
        block_t = tl.load(si_row_ptr + t).to(tl.int64)
        if block_t > NULL_SLOT_MAX:
            tl.store(head_base + block_t * stride_ssm_block + slab_offs, slab, cache_modifier=".cs")
"""

if __name__ == "__main__":
    write_variants(variants())
