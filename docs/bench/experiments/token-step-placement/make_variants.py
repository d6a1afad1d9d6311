"""Writes .exp/variants2/k_NAME.py: what sits where in the V/GDN kernel's token step (q/k loads, V pick, stores).

Question: ``../skeleton-to-floor/`` found the q/k scratch loads costing 0.8 µs at the last shape (27B TP=2, 8
sequences, MTP 4, fp32 state) with the V/GDN kernel alone, though they move 7.5 MB against the state's 72 MiB. On
main they are issued at the top of token t's step for token t + 1, right behind token t − 1's 16 (with the
write-through of the last token, 32 predicated) state stores: in the warp's in-order queue they wait for those
stores, and ``../issue-profile/`` found 7 % of the stall samples at that load. Issued after token t's arithmetic
and before its stores instead, they go out ahead of them, and q/k of token t are dead by then (fewer registers).

  qkafter     the two loads after token t's arithmetic, before its output and state stores
  idx32       the [BT] tiles of token rows and state slots picked as int32 (widened per token where used):
              fewer registers and half the pick instructions (the values fit: the entry checks them)
  qkafter32   both
  aqkafter    qkafter alone (NO_QK_KERNEL, as ``../skeleton-to-floor/``'s ``alone``: wrong by design)
  vonce       a bound (wrong results): the V row of token 0 used for every token, so the per-token pick of the
              V row and its conversion into the state's row layout (a shared-memory round trip and a barrier
              in the SASS) leave the token loop
  wtbranch    the last token's write-through and the other tokens' streaming store under a branch on the token
              (uniform per warp) instead of both issued every token under complementary predicates: 16 store
              instructions per token instead of 32
  wtbranch32  wtbranch with qkafter32's two edits

Usage (repository root): python3 docs/bench/experiments/token-step-placement/make_variants.py
"""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from source_edits import NO_QK_KERNEL_FLAGS, sub_in_v_kernel, write_variants  # noqa: E402

MAIN = open("src/caovan/kernels/gdn_spec_decode/triton_kernels.py").read()


QK_LOADS = """        next_mask = k_mask & (t + 1 < seq_len)
        q_next = tl.load(qk_row + (bos + t + 1) * (2 * H * K), mask=next_mask, other=0.0)
        k_next = tl.load(qk_row + (bos + t + 1) * (2 * H * K) + H * K, mask=next_mask, other=0.0)
"""
AFTER_MATH = "        o = tl.sum(state * q[None, :], axis=1)\n"


def qkafter(text):
    text = sub_in_v_kernel(text, QK_LOADS, "")
    return sub_in_v_kernel(text, AFTER_MATH, AFTER_MATH + QK_LOADS)


def idx32(text):
    text = sub_in_v_kernel(
        text,
        "        rows_all = tl.load(token_index_ptr + spec_tokens, mask=row_mask, other=0).to(tl.int64)\n"
        "    else:\n        rows_all = spec_tokens\n",
        "        rows_all = tl.load(token_index_ptr + spec_tokens, mask=row_mask, other=0).to(tl.int32)\n"
        "    else:\n        rows_all = spec_tokens.to(tl.int32)\n",
    )
    # The gating loads index with rows_all: keep their offsets 64-bit.
    text = sub_in_v_kernel(text, "a_ptr + rows_all * stride_a_token", "a_ptr + rows_all.to(tl.int64) * stride_a_token")
    text = sub_in_v_kernel(text, "b_ptr + rows_all * stride_b_token", "b_ptr + rows_all.to(tl.int64) * stride_b_token")
    text = sub_in_v_kernel(
        text,
        "    blocks_all = tl.load(si_row_ptr + token_rows, mask=row_mask, other=NULL_SLOT_MAX).to(tl.int64)\n",
        "    blocks_all = tl.load(si_row_ptr + token_rows, mask=row_mask, other=NULL_SLOT_MAX).to(tl.int32)\n",
    )
    text = sub_in_v_kernel(
        text,
        "        row = tl.sum(tl.where(pick, rows_all, 0))\n",
        "        row = tl.sum(tl.where(pick, rows_all, 0)).to(tl.int64)\n",
    )
    return sub_in_v_kernel(
        text,
        "        block_t = tl.sum(tl.where(pick, blocks_all, 0))\n",
        "        block_t = tl.sum(tl.where(pick, blocks_all, 0)).to(tl.int64)\n",
    )


V_PICK = "        v = tl.sum(tl.where((conv_rows == t)[:, None], v_conv, 0.0), axis=0)\n"
LOOP_HEAD = "    for t in range(0, seq_len):\n"


def vonce(text):
    text = sub_in_v_kernel(text, V_PICK, "        v = v0\n")
    first_row = V_PICK.replace("        v = ", "    v0 = ").replace("== t", "== 0")
    return sub_in_v_kernel(text, LOOP_HEAD, first_row + LOOP_HEAD)


WT_STORES = """            last = t == seq_len - 1
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
"""
WT_BRANCH = """            if block_t > NULL_SLOT_MAX:
                if t == seq_len - 1:
                    tl.store(
                        head_base + block_t * stride_ssm_block + slab_offs,
                        state.to(ssm_state_ptr.dtype.element_ty),
                        mask=slab_mask,
                        cache_modifier=".wt",
                    )
                else:
                    tl.store(
                        head_base + block_t * stride_ssm_block + slab_offs,
                        state.to(ssm_state_ptr.dtype.element_ty),
                        mask=slab_mask,
                        cache_modifier=".cs",
                    )
"""


VARIANTS = {
    "wtbranch": sub_in_v_kernel(MAIN, WT_STORES, WT_BRANCH),
    "wtbranch32": idx32(qkafter(sub_in_v_kernel(MAIN, WT_STORES, WT_BRANCH))),
    "vonce": vonce(MAIN),
    "qkafter": qkafter(MAIN),
    "idx32": idx32(MAIN),
    "qkafter32": idx32(qkafter(MAIN)),
    "aqkafter": qkafter(MAIN) + NO_QK_KERNEL_FLAGS,
}

if __name__ == "__main__":
    write_variants(VARIANTS)
