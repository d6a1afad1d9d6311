"""Writes .exp/variants2/k_early.py and k_earlylw.py from the kernel on main (repository root; see README)."""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from source_edits import sub  # noqa: E402

src = open("src/caovan/kernels/gdn_spec_decode/triton_kernels.py").read()


# --- early: the state slab load issued right after its slot index is known, before the V conv (whose window
# store and barrier otherwise keep the compiler from issuing it earlier).
early = src
stagger_block = early[early.index("    if USE_PDL and STAGGER:\n") : early.index("    state = tl.load(head_base")]
state_load = (
    "    state = tl.load(head_base + initial_block * stride_ssm_block + slab_offs, mask=slab_mask, other=0.0)"
    ".to(tl.float32)\n"
)
slab_lines = (
    "    slab_offs = v_offs.to(tl.int64)[:, None] * stride_ssm_v + k_offs.to(tl.int64)[None, :] * stride_ssm_k\n"
    "    slab_mask = v_mask[:, None] & k_mask[None, :]\n"
    "    head_base = ssm_state_ptr + i_hv.to(tl.int64) * stride_ssm_head\n"
)
early = sub(early, slab_lines + stagger_block + state_load, "")
early = sub(
    early,
    "    initial_block = tl.load(si_row_ptr + (num_accepted - 1)).to(tl.int64)\n",
    "    initial_block = tl.load(si_row_ptr + (num_accepted - 1)).to(tl.int64)\n"
    + slab_lines
    + stagger_block
    + "    state = tl.load(\n        head_base + initial_block * stride_ssm_block + slab_offs,\n"
    "        mask=slab_mask & (initial_block > NULL_SLOT_MAX),\n        other=0.0,\n    ).to(tl.float32)\n",
)
open(".exp/variants2/k_early.py", "w").write(early)

# --- earlylw: early + the V conv window written after the token loop (no store or barrier before the loop).
lw = early
conv_fn_start = lw.index("@triton.jit\ndef _conv_update_silu(")
conv_fn_end = lw.index("@triton.jit\ndef _store_zero_rows(")
conv_fn = lw[conv_fn_start:conv_fn_end]
nostore = conv_fn.replace("def _conv_update_silu(", "def _conv_silu_window(")
cut = nostore.index("    # The window is read and rewritten")
nostore = nostore[:cut] + "    return acc / (1.0 + tl.exp(-acc)), new_window\n\n\n"
lw = lw[:conv_fn_end] + nostore + lw[conv_fn_end:]
vk = lw.index("def _caovan_sm75_fused_v_gdn_spec_decode_kernel(")
head, body = lw[:vk], lw[vk:]
body = sub(body, "    v_conv = _conv_update_silu(\n", "    v_conv, v_window = _conv_silu_window(\n")
body = sub(
    body,
    '                cache_modifier=".cs",\n            )\n',
    '                cache_modifier=".cs",\n            )\n'
    "    tl.debug_barrier()\n"
    "    win_rows = tl.arange(0, BU)\n"
    "    win_ptrs = (\n        conv_state_ptr\n        + conv_block * stride_cs_block\n"
    "        + win_rows.to(tl.int64)[:, None] * stride_cs_pos\n"
    "        + (2 * H * K + i_hv * V + v_offs).to(tl.int64)[None, :] * stride_cs_dim\n    )\n"
    "    win_mask = (win_rows < WIDTH - 2 + seq_len)[:, None] & v_mask[None, :]\n"
    "    tl.store(win_ptrs, v_window.to(conv_state_ptr.dtype.element_ty), mask=win_mask)\n",
)
# A sequence without an initial state leaves before the token loop: it still gets its new conv window.
lw = head + body
store = lw[lw.index("    tl.debug_barrier()\n    win_rows") :]
store = store[: store.index("mask=win_mask)\n") + len("mask=win_mask)\n")]
null_exit = (
    "    if initial_block <= NULL_SLOT_MAX:\n"
    "        # No initial state (vLLM returns before writing its output rows): zeros, no state writes.\n"
    "        _store_zero_rows(out_head_ptr, token_index_ptr, stride_out_token, v_mask, bos, seq_len, BV, "
    "HAS_TOKEN_INDEX)\n"
)
lw = sub(
    lw,
    null_exit,
    null_exit + store.replace("\n    ", "\n        ").replace("    tl.debug_barrier", "        tl.debug_barrier", 1),
)
open(".exp/variants2/k_earlylw.py", "w").write(lw)
