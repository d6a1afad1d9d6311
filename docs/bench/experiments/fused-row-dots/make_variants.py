"""Writes .exp/variants2/k_NAME.py: main's split-row token step with its two row reductions independent of each other.

Question: with the slab's rows over 16 lanes (main since 605c32e, the last shape's launch), each token step does
``v -= S k`` (a row reduction), the rank-1 update, then ``o = S q`` (a second row reduction) on the updated
state: the second waits for the first and for the update. Written on the decayed state before the update,
``o = S q + u (k . q)`` with ``u = beta (v - S k)``: both row reductions read the same state and can issue
together, at the price of one more reduction, ``k . q``, which needs no state (4 shuffle rounds over the 16
lanes of a row). The kernel is latency-bound per SM (../issue-profile/): does the shorter chain pay at the last
shape (27B TP=2, 8 sequences, MTP 4, fp32 state), and does it keep the float64 check?

  fused      the split branch's arithmetic as above (rows of 32 lanes unchanged)

Usage (repository root): python3 docs/bench/experiments/fused-row-dots/make_variants.py
"""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from source_edits import sub_in_v_kernel, write_variants  # noqa: E402

MAIN = open("src/caovan/kernels/gdn_spec_decode/triton_kernels.py").read()

SPLIT_STEP = """            v -= _row_dot(state, k)
            v *= beta
            state += v * k
            o = _row_dot(state, q)
"""
FUSED_STEP = """            state_k = _row_dot(state, k)
            state_q = _row_dot(state, q)
            k_q = tl.sum(tl.sum(tl.sum(q * k, axis=5, keep_dims=True), axis=4, keep_dims=True), axis=1, keep_dims=True)
            v = (v - state_k) * beta
            o = state_q + v * k_q
            state += v * k
"""

VARIANTS = {"fused": sub_in_v_kernel(MAIN, SPLIT_STEP, FUSED_STEP)}

if __name__ == "__main__":
    write_variants(VARIANTS)
