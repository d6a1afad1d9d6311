"""Writes .exp/variants2/k_qk2ahead.py: main's V/GDN kernel reading q/k two tokens ahead instead of one.

Experiment (repository root; timed on an H200: see README.md). ``../issue-profile/`` finds 7 % of the stall
samples at the one-token-ahead q/k load of the token loop (an L2 hit, but L2 is busy with the state stores), so
the load is given two token steps to arrive. Costs 8 more registers per thread (two more [K] rows).
"""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from source_edits import sub  # noqa: E402

src = open("src/caovan/kernels/gdn_spec_decode/triton_kernels.py").read()


src = sub(
    src,
    "    k_next = tl.load(qk_row + bos * (2 * H * K) + H * K, mask=k_mask, other=0.0)\n",
    "    k_next = tl.load(qk_row + bos * (2 * H * K) + H * K, mask=k_mask, other=0.0)\n"
    "    second_mask = k_mask & (1 < seq_len)\n"
    "    q_next2 = tl.load(qk_row + (bos + 1) * (2 * H * K), mask=second_mask, other=0.0)\n"
    "    k_next2 = tl.load(qk_row + (bos + 1) * (2 * H * K) + H * K, mask=second_mask, other=0.0)\n",
)
src = sub(
    src,
    """        next_mask = k_mask & (t + 1 < seq_len)
        q_next = tl.load(qk_row + (bos + t + 1) * (2 * H * K), mask=next_mask, other=0.0)
        k_next = tl.load(qk_row + (bos + t + 1) * (2 * H * K) + H * K, mask=next_mask, other=0.0)
""",
    """        q_next = q_next2
        k_next = k_next2
        ahead_mask = k_mask & (t + 2 < seq_len)
        q_next2 = tl.load(qk_row + (bos + t + 2) * (2 * H * K), mask=ahead_mask, other=0.0)
        k_next2 = tl.load(qk_row + (bos + t + 2) * (2 * H * K) + H * K, mask=ahead_mask, other=0.0)
""",
)
open(".exp/variants2/k_qk2ahead.py", "w").write(src)

# k_qk2ahead168: the same launched with maxnreg=168 (no spills on sm_90), so that at BV 16 it keeps main's 12
# programs per SM (194 registers would leave 10 and break the one-wave grid at 27B with 8 sequences).
wrapper = open("docs/bench/experiments/row-reduction-bound/maxnreg168.py").read()
old = 'VARIANT = "bfly"\n'
assert wrapper.count(old) == 1
open(".exp/variants2/k_qk2ahead168.py", "w").write(wrapper.replace(old, 'VARIANT = "qk2ahead"\n'))
