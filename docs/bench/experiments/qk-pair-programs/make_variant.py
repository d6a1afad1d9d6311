"""Writes .exp/variants2/k_qkpair.py: main's kernels (commit 5fb0b13) with the Q/K work of a key head in one program.

qkpair  Q/K kernel: the grid stays (N, H, 2) (the launch is main's), but programs with axis 2 = 1 leave at once
        after the launch-chain calls, and each axis 2 = 0 program does q and k of its key head as one
        [BU, 2*BK] tile (both halves' loads issued together, one L2 norm per half, q scaled). Half as many SMs
        hold a Q/K program while the V/GDN kernel fills them.
The module sets VARIANT_QK_KERNEL (its Q/K kernel differs from main's). Run from the repository root.
"""

import os
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from source_edits import sub  # noqa: E402

BASE_COMMIT = "5fb0b13"
MAIN = subprocess.check_output(
    ["git", "show", f"{BASE_COMMIT}:src/caovan/kernels/gdn_spec_decode/triton_kernels.py"], text=True
)

OLD_HEAD = """    half = tl.program_id(2)  # 0: q, 1: k (separate programs: two short dependency chains in parallel)
    bos = tl.load(query_start_loc_ptr + i_n).to(tl.int64)"""
NEW_HEAD = """    if tl.program_id(2) == 1:
        return  # the axis 2 = 0 program of this key head does q and k
    bos = tl.load(query_start_loc_ptr + i_n).to(tl.int64)"""

OLD_BODY = """    k_offs = tl.arange(0, BK)
    channel_mask = k_offs < K
    rows = tl.arange(0, BU)
    store_mask = (rows < seq_len)[:, None] & channel_mask[None, :]
    channels = half * (H * K) + i_h * K + k_offs
"""
NEW_BODY = """    c_offs = tl.arange(0, 2 * BK)  # q channels of the head in [0, BK), k channels in [BK, 2 BK)
    half = c_offs // BK
    k_offs = c_offs % BK
    channel_mask = k_offs < K
    rows = tl.arange(0, BU)
    store_mask = (rows < seq_len)[:, None] & channel_mask[None, :]
    channels = half * (H * K) + i_h * K + k_offs
"""

OLD_NORM = """    y = y * (tl.rsqrt(tl.sum(y * y, axis=1) + 1e-6) * tl.where(half == 0, scale, 1.0))[:, None]
    # scratch (num_spec_tokens, 2, H, K): row bos + t, slot `half`, head i_h
    scratch_ptrs = (
        qk_scratch_ptr + ((bos + rows.to(tl.int64)) * 2 + half)[:, None] * (H * K) + (i_h * K + k_offs)[None, :]
    )"""
NEW_NORM = """    y3 = tl.reshape(y, [BU, 2, BK])
    inv = tl.rsqrt(tl.sum(y3 * y3, axis=2) + 1e-6)  # [BU, 2]: one norm per half
    inv = inv * tl.where(tl.arange(0, 2) == 0, scale, 1.0)[None, :]
    y = tl.reshape(y3 * inv[:, :, None], [BU, 2 * BK])
    # scratch (num_spec_tokens, 2, H, K): row bos + t, slot `half`, head i_h
    scratch_ptrs = (
        qk_scratch_ptr
        + ((bos + rows.to(tl.int64))[:, None] * 2 + half[None, :]) * (H * K)
        + (i_h * K + k_offs)[None, :]
    )"""

text = sub(MAIN, OLD_HEAD, NEW_HEAD)
text = sub(text, OLD_BODY, NEW_BODY)
text = sub(text, OLD_NORM, NEW_NORM)
text += "\n\nVARIANT_QK_KERNEL = True\n"
os.makedirs(".exp/variants2", exist_ok=True)
with open(".exp/variants2/k_qkpair.py", "w") as f:
    f.write(text)
print("wrote .exp/variants2/k_qkpair.py")
