"""Writes .exp/variants2/k_chunkbound.py: a timing bound (wrong results) for a chunked form of the token loop.

Experiment (repository root). In main's token loop every token state waits for two row reductions and four
slab-wide operations before it can be stored. Written in chunked form (as FLA's chunk kernels do for prefill),
the per-token state is S_t = a_t S_{t-1} + k_t (x) u_t, where u_t and the outputs need only S_0 . k_i and
S_0 . q_i for all tokens (2T row reductions, all available before the first store) plus small T x T terms.
This variant keeps that structure and drops the small terms:

- phase 1: S_0 . k_t and S_0 . q_t for every token (q/k read from the scratch), no stores;
- phase 2, per token: u = beta (v - decay S_0 . k_t); state = decay state + u (x) k_t; o = u + S_0 . q_t; the
  output and state stores as main.

Its time is a lower bound for a real chunked kernel of this shape (which adds the T x T terms, a few operations
on [BV]-vectors per token). See README.md.
"""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from source_edits import sub  # noqa: E402

src = open("src/caovan/kernels/gdn_spec_decode/triton_kernels.py").read()

src = sub(
    src,
    "    for t in range(0, seq_len):\n        pick = token_rows == t\n",
    """    # BOUND (wrong results), phase 1: every token's S_0 . k_t and S_0 . q_t before any store.
    dk_all = tl.zeros([BT, BV], dtype=tl.float32)
    dq_all = tl.zeros([BT, BV], dtype=tl.float32)
    for t in range(0, seq_len):
        q_t = tl.load(qk_row + (bos + t) * (2 * H * K), mask=k_mask, other=0.0)
        k_t = tl.load(qk_row + (bos + t) * (2 * H * K) + H * K, mask=k_mask, other=0.0)
        here = (token_rows == t)[:, None]
        dk_all = tl.where(here, tl.sum(state * k_t[None, :], axis=1)[None, :], dk_all)
        dq_all = tl.where(here, tl.sum(state * q_t[None, :], axis=1)[None, :], dq_all)
    for t in range(0, seq_len):
        pick = token_rows == t
""",
)
src = sub(
    src,
    """        state *= decay
        v -= tl.sum(state * k[None, :], axis=1)
        v *= beta
        state += v[:, None] * k[None, :]
        o = tl.sum(state * q[None, :], axis=1)
""",
    """        u = beta * (v - decay * tl.sum(tl.where(pick[:, None], dk_all, 0.0), axis=0))
        state = state * decay + u[:, None] * k[None, :]
        o = u + tl.sum(tl.where(pick[:, None], dq_all, 0.0), axis=0)
""",
)
os.makedirs(".exp/variants2", exist_ok=True)
open(".exp/variants2/k_chunkbound.py", "w").write(src)
# Uncapped it takes 213 registers (9 programs per SM, not main's one wave of 12); capped at 168 it does not
# spill on sm_90: k_chunkbound168 launches it so, through the capping wrapper of ../row-reduction-bound/.
here = os.path.dirname(os.path.abspath(__file__))
wrapper = open(os.path.join(here, "..", "row-reduction-bound", "maxnreg168.py")).read()
open(".exp/variants2/k_chunkbound168.py", "w").write(sub(wrapper, 'VARIANT = "bfly"\n', 'VARIANT = "chunkbound"\n'))
