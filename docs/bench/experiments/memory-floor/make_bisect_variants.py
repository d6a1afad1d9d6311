"""Bisect variants between caovan's V/GDN kernel and the memory floor (timing only; wrong results by design)."""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from source_edits import sub  # noqa: E402

base = open("src/caovan/kernels/gdn_spec_decode/triton_kernels.py").read()  # = .exp/variants2/k_base3.py


MATH = """        state *= decay
        v -= tl.sum(state * k[None, :], axis=1)
        v *= beta
        state += v[:, None] * k[None, :]
        o = tl.sum(state * q[None, :], axis=1)
"""
# skel: no state arithmetic (state stored as loaded), q/k/v/gating still read and used in the output.
skel = sub(base, MATH, "        o = v * beta * decay + tl.sum(q * k)\n")
open(".exp/variants2/k_skel.py", "w").write(skel)

# skel_noconv: the V rows read straight from mixed_qkv: no conv-state loads, window store or barrier.
vk = skel.index("def _caovan_sm75_fused_v_gdn_spec_decode_kernel(")
call_start = skel.index("    v_conv = _conv_update_silu(\n", vk)
call_end = skel.index("    )\n", call_start) + len("    )\n")
noconv = (
    skel[:call_start]
    + (
        "    v_rows = tl.arange(0, BU)\n"
        "    v_conv = tl.load(\n        mixed_qkv_ptr + (bos + v_rows.to(tl.int64))[:, None] * stride_x_token"
        " + (2 * H * K + i_hv * V + v_offs)[None, :],\n"
        "        mask=(v_rows < seq_len)[:, None] & v_mask[None, :],\n        other=0.0,\n    ).to(tl.float32)\n"
    )
    + skel[call_end:]
)
open(".exp/variants2/k_skel_noconv.py", "w").write(noconv)

# skel_noconv_nowait: no gdc_wait in the V/GDN kernel (stale q/k scratch; run with s0, no staggered start).
vk = noconv.index("def _caovan_sm75_fused_v_gdn_spec_decode_kernel(")
head, body = noconv[:vk], noconv[vk:]
nowait = head + body.replace("gdc_wait()", "pass")
open(".exp/variants2/k_skel_noconv_nowait.py", "w").write(nowait)

# skel_bare: also no q/k scratch loads (q = k = 0): the state fan-out plus V rows, gating, output stores.
vk = nowait.index("def _caovan_sm75_fused_v_gdn_spec_decode_kernel(")
head, body = nowait[:vk], nowait[vk:]
body = sub(
    body,
    "    q_next = tl.load(qk_row + bos * (2 * H * K), mask=k_mask, other=0.0)\n",
    "    q_next = tl.zeros([BK], dtype=tl.float32)\n",
)
body = sub(
    body,
    "    k_next = tl.load(qk_row + bos * (2 * H * K) + H * K, mask=k_mask, other=0.0)\n",
    "    k_next = tl.zeros([BK], dtype=tl.float32)\n",
)
body = sub(body, "        q_next = tl.load(qk_row + (bos + t + 1) * (2 * H * K), mask=next_mask, other=0.0)\n", "")
body = sub(
    body, "        k_next = tl.load(qk_row + (bos + t + 1) * (2 * H * K) + H * K, mask=next_mask, other=0.0)\n", ""
)
open(".exp/variants2/k_skel_bare.py", "w").write(head + body)
