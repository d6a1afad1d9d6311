"""Writes .exp/variants2/k_NAME.py: main's kernels with the normalised q/k handed over in fp16 instead of fp32.

Question: every V/GDN program reads its key head's q and k for every token from the Q/K kernel's scratch, 1 KiB
per token in fp32: at the last shape (27B TP=2, 8 sequences, MTP 4, fp32 state) 1536 programs x 5 tokens, 7.9 MB
of L2 reads beside the 76 MB the call moves to and from DRAM, and with rows of 16 lanes 2 x 8 fp32 registers per
thread for the token read ahead. Half of that in fp16: does it pay, and is the error still within the float64
rule (vLLM rounds the conv output to the activation dtype before its L2 norm; here the normalised values are
rounded)? And with half the q/k registers, do rows of 8 lanes (../row-split-tile/: slower for their q/k
registers) pay now?

  qk16       the Q/K kernel stores q and k as fp16 (the scratch buffer viewed as fp16, same element offsets); the
             V/GDN kernel loads fp16 and widens each token's q and k to fp32 where the step uses them
  qk16r8     qk16 with the split launch's rows of 8 lanes instead of 16 (extend_plan sets ROW_LANES)

Usage (repository root): python3 docs/bench/experiments/qk-scratch-fp16/make_variants.py
"""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from source_edits import sub, write_variants  # noqa: E402

MAIN = open("src/caovan/kernels/gdn_spec_decode/triton_kernels.py").read()
FP16 = "tl.pointer_type(tl.float16)"


def fp16_scratch(text: str) -> str:
    text = sub(
        text,
        "        qk_scratch_ptr + ((bos + rows.to(tl.int64)) * 2 + half)",
        f"        qk_scratch_ptr.to({FP16}) + ((bos + rows.to(tl.int64)) * 2 + half)",
    )
    text = sub(
        text,
        "    tl.store(scratch_ptrs, y, mask=store_mask)",
        "    tl.store(scratch_ptrs, y.to(tl.float16), mask=store_mask)",
    )
    text = sub(
        text,
        "    qk_row = qk_scratch_ptr + i_h * K + qk_cols",
        f"    qk_row = qk_scratch_ptr.to({FP16}) + i_h * K + qk_cols",
    )
    text = sub(
        text,
        "        q = q_next\n        k = k_next\n",
        "        q = q_next.to(tl.float32)\n        k = k_next.to(tl.float32)\n",
    )
    return text + "\n\nVARIANT_QK_KERNEL = True\n"


ROWS8 = '''

def extend_plan(plan, args):
    """The split launch with rows of 8 lanes (ROW_LANES is the V/GDN kernel's last launch value)."""
    import dataclasses

    if plan.row_lanes == 16:
        plan = dataclasses.replace(plan, v_tail=plan.v_tail[:-1] + (8,), row_lanes=8)
    return plan
'''

QK16 = fp16_scratch(MAIN)
VARIANTS = {"qk16": QK16, "qk16r8": QK16 + ROWS8}

if __name__ == "__main__":
    write_variants(VARIANTS)
