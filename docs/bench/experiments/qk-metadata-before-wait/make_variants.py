"""Writes .exp/variants2/k_NAME.py: main's Q/K kernel with its loads of what no preceding kernel writes issued
before its ``gdc_wait()``.

Question: the Q/K kernel is on the critical path of the largest calls (../qk-pair-programs/, ../row-split-tile/:
0.6 us of the last shape's time is the Q/K kernel in front). After its ``gdc_wait()`` it runs a chain of three
dependent loads: ``query_start_loc`` (for the early exit), then the conv slot and accepted count, then the conv
window and the new inputs; only the last level reads what the kernel before it may have written (``mixed_qkv``).
The metadata are written before the forward pass starts (host-to-device copies, or kernels long done), the conv
weights never; the conv window of the q/k channels only by this layer's previous call. Issued before the wait, they
arrive while the kernel before finishes. Does that shorten the chain enough to show at the last shape (27B TP=2,
8 sequences, MTP 4, fp32 state)?

  mdpre      query_start_loc, the conv slot and num_accepted_tokens loaded before gdc_wait()
  mdspre     also the conv weights (and bias) and the conv window's state rows before gdc_wait(); only the new
             inputs (mixed_qkv) after it

Usage (repository root): python3 docs/bench/experiments/qk-metadata-before-wait/make_variants.py
"""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from source_edits import QK_METADATA_LOADS, QK_METADATA_LOADS_TOGETHER, V_GDN_KERNEL, sub, write_variants  # noqa: E402

MAIN = open("src/caovan/kernels/gdn_spec_decode/triton_kernels.py").read()
QK_KERNEL = "def _caovan_sm75_prepare_qk_conv_spec_decode_kernel("

MAIN_HEAD = (
    """    if USE_PDL:
        # This launch is itself a programmatic dependent of whatever kernel ran before it (its launch overlaps
        # that kernel's tail): wait for that kernel to finish before touching memory, and only then let the V/GDN
        # kernel start, whose early SSM-state loads must see that kernel's (or the previous call's) writes.
        gdc_wait()
        # Let the V/GDN kernel start now: everything it does before its gdc_wait() is independent of
        # this kernel (other conv channels, the SSM state), so it overlaps this launch.
        gdc_launch_dependents()
    i_n = tl.program_id(0)
    i_h = tl.program_id(1)
    half = tl.program_id(2)  # 0: q, 1: k (separate programs: two short dependency chains in parallel)
"""
    + QK_METADATA_LOADS
)
METADATA_FIRST = (
    """    i_n = tl.program_id(0)
    i_h = tl.program_id(1)
    half = tl.program_id(2)
"""
    + QK_METADATA_LOADS_TOGETHER
)
WAIT = """    if USE_PDL:
        gdc_wait()
        gdc_launch_dependents()
"""
EXITS = """    if seq_len <= 0:
        return
    if conv_block <= NULL_SLOT_MAX:
        return
"""

MAIN_CONV = """    k_offs = tl.arange(0, BK)
    channel_mask = k_offs < K
    rows = tl.arange(0, BU)
    store_mask = (rows < seq_len)[:, None] & channel_mask[None, :]
    channels = half * (H * K) + i_h * K + k_offs
    y = _conv_update_silu(
        mixed_qkv_ptr,
        conv_weight_ptr,
        conv_bias_ptr,
        conv_state_ptr,
        token_index_ptr,
        stride_x_token,
        stride_w_dim,
        stride_w_width,
        conv_block * stride_cs_block,
        stride_cs_dim,
        stride_cs_pos,
        channels,
        channel_mask,
        window_offset,
        bos,
        seq_len,
        WIDTH,
        BU,
        HAS_BIAS,
        HAS_TOKEN_INDEX,
    )
"""

# The conv of _conv_update_silu with its state rows and weights (w0..w3, s0..s3: WIDTH 4, as every model here)
# loaded before the wait and its inputs after it; the same values enter the same sums in the same order.
PRESTATE = """    tl.static_assert(WIDTH == 4, "mdspre is written for conv width 4")
    k_offs = tl.arange(0, BK)
    channel_mask = k_offs < K
    rows = tl.arange(0, BU)
    channels = half * (H * K) + i_h * K + k_offs
    live = channel_mask & (seq_len > 0) & (conv_block > NULL_SLOT_MAX)
    w_ptrs = conv_weight_ptr + channels.to(tl.int64) * stride_w_dim
    w0 = tl.load(w_ptrs, mask=live, other=0.0).to(tl.float32)
    w1 = tl.load(w_ptrs + stride_w_width, mask=live, other=0.0).to(tl.float32)
    w2 = tl.load(w_ptrs + 2 * stride_w_width, mask=live, other=0.0).to(tl.float32)
    w3 = tl.load(w_ptrs + 3 * stride_w_width, mask=live, other=0.0).to(tl.float32)
    if HAS_BIAS:
        bias = tl.load(conv_bias_ptr + channels, mask=live, other=0.0).to(tl.float32)
    else:
        bias = tl.zeros([BK], dtype=tl.float32)
    window = (
        conv_state_ptr
        + conv_block * stride_cs_block
        + window_offset * stride_cs_pos
        + channels.to(tl.int64)[None, :] * stride_cs_dim
    )
    s0 = tl.load(
        window + rows.to(tl.int64)[:, None] * stride_cs_pos, mask=(rows < 3)[:, None] & live[None, :], other=0.0
    )
    s1 = tl.load(
        window + (rows + 1).to(tl.int64)[:, None] * stride_cs_pos, mask=(rows < 2)[:, None] & live[None, :], other=0.0
    )
    s2 = tl.load(
        window + (rows + 2).to(tl.int64)[:, None] * stride_cs_pos, mask=(rows < 1)[:, None] & live[None, :], other=0.0
    )
    s3 = tl.zeros([BU, BK], dtype=conv_state_ptr.dtype.element_ty)
    if USE_PDL:
        gdc_wait()
        gdc_launch_dependents()
    if seq_len <= 0:
        return
    if conv_block <= NULL_SLOT_MAX:
        return
    store_mask = (rows < seq_len)[:, None] & channel_mask[None, :]
    acc = tl.zeros([BU, BK], dtype=tl.float32) + bias[None, :]
    for j in tl.static_range(WIDTH):
        pos = rows + j
        from_state = pos < WIDTH - 1
        from_x = (pos >= WIDTH - 1) & (pos < WIDTH - 1 + seq_len)
        spec_token = bos + (pos - (WIDTH - 1))
        if HAS_TOKEN_INDEX:
            x_row = tl.load(token_index_ptr + spec_token, mask=from_x, other=0).to(tl.int64)
        else:
            x_row = spec_token
        x_vals = tl.load(
            mixed_qkv_ptr + x_row[:, None] * stride_x_token + channels[None, :],
            mask=from_x[:, None] & channel_mask[None, :],
            other=0.0,
        )
        x_vals = x_vals.to(conv_state_ptr.dtype.element_ty)
        if j == 0:
            s_j = s0
            w_j = w0
        elif j == 1:
            s_j = s1
            w_j = w1
        elif j == 2:
            s_j = s2
            w_j = w2
        else:
            s_j = s3
            w_j = w3
        u_j = tl.where(from_state[:, None], s_j.to(tl.float32), x_vals.to(tl.float32))
        if j == 1:
            new_window = u_j
        acc += w_j[None, :] * u_j
    tl.debug_barrier()
    store_ptrs = (
        conv_state_ptr
        + conv_block * stride_cs_block
        + rows.to(tl.int64)[:, None] * stride_cs_pos
        + channels.to(tl.int64)[None, :] * stride_cs_dim
    )
    window_mask = (rows < WIDTH - 2 + seq_len)[:, None] & channel_mask[None, :]
    tl.store(store_ptrs, new_window.to(conv_state_ptr.dtype.element_ty), mask=window_mask)
    y = acc / (1.0 + tl.exp(-acc))
"""


def qk_variant(edit) -> str:
    """main with its Q/K kernel (only) edited by ``edit``; the harness launches this module's Q/K kernel."""
    i, j = MAIN.index(QK_KERNEL), MAIN.index(V_GDN_KERNEL)
    return MAIN[:i] + edit(MAIN[i:j]) + MAIN[j:] + "\n\nVARIANT_QK_KERNEL = True\n"


VARIANTS = {
    "mdpre": qk_variant(lambda k: sub(k, MAIN_HEAD, METADATA_FIRST + WAIT + EXITS)),
    "mdspre": qk_variant(lambda k: sub(sub(k, MAIN_HEAD, METADATA_FIRST), MAIN_CONV, PRESTATE)),
}

if __name__ == "__main__":
    write_variants(VARIANTS)
