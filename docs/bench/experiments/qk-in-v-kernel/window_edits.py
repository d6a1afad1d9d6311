"""Text edits of main's triton_kernels.py shared by the variants that move the q/k conv window rewrite.

``with_window_switch(src)``: ``_conv_update_silu`` gains ``WRITE_WINDOW`` (constexpr, default True: main's behaviour)
and a ``_rewrite_qk_windows`` helper is added after it (the new window u[1 : W - 1 + L] of the q and k channels of
one key head: read, barrier, write). ``WINDOW_ARGS``: its arguments as the V/GDN kernel's names spell them.
Used by ``make_fused_variant.py`` here and ``../qk-window-in-v/make_variant.py``.
"""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from source_edits import sub  # noqa: E402

SIGNATURE_EDIT = (
    '    HAS_TOKEN_INDEX: tl.constexpr,\n):\n    """Causal conv + SiLU',
    '    HAS_TOKEN_INDEX: tl.constexpr,\n    WRITE_WINDOW: tl.constexpr = True,\n):\n    """Causal conv + SiLU',
)
WINDOW_STORE_EDIT = (
    """    tl.debug_barrier()
    store_ptrs = (
        conv_state_ptr
        + conv_block_base
        + rows.to(tl.int64)[:, None] * stride_cs_pos
        + channels.to(tl.int64)[None, :] * stride_cs_dim
    )
    store_mask = (rows < WIDTH - 2 + seq_len)[:, None] & channel_mask[None, :]
    tl.store(store_ptrs, new_window.to(conv_state_ptr.dtype.element_ty), mask=store_mask)
    return acc / (1.0 + tl.exp(-acc))
""",
    """    if WRITE_WINDOW:
        tl.debug_barrier()
        store_ptrs = (
            conv_state_ptr
            + conv_block_base
            + rows.to(tl.int64)[:, None] * stride_cs_pos
            + channels.to(tl.int64)[None, :] * stride_cs_dim
        )
        store_mask = (rows < WIDTH - 2 + seq_len)[:, None] & channel_mask[None, :]
        tl.store(store_ptrs, new_window.to(conv_state_ptr.dtype.element_ty), mask=store_mask)
    return acc / (1.0 + tl.exp(-acc))


@triton.jit
def _rewrite_qk_windows(
    mixed_qkv_ptr,
    conv_state_ptr,
    token_index_ptr,
    stride_x_token,
    conv_block_base,
    stride_cs_dim,
    stride_cs_pos,
    i_h,
    k_offs,
    k_mask,
    window_offset,
    bos,
    seq_len,
    H: tl.constexpr,
    K: tl.constexpr,
    WIDTH: tl.constexpr,
    BU: tl.constexpr,
    HAS_TOKEN_INDEX: tl.constexpr,
):
    \"\"\"The new conv window u[1 : W - 1 + L] of the q and k channels of one key head (read, barrier, write).\"\"\"
    rows = tl.arange(0, BU)
    store_mask = (rows < WIDTH - 2 + seq_len)[:, None] & k_mask[None, :]
    q_channels = i_h * K + k_offs
    k_channels = H * K + i_h * K + k_offs
    new_q = _load_conv_input_shifted(mixed_qkv_ptr, conv_state_ptr, token_index_ptr, stride_x_token,
                                     conv_block_base, stride_cs_dim, stride_cs_pos, q_channels, k_mask,
                                     window_offset, bos, seq_len, 1, WIDTH, BU, HAS_TOKEN_INDEX)  # fmt: skip
    new_k = _load_conv_input_shifted(mixed_qkv_ptr, conv_state_ptr, token_index_ptr, stride_x_token,
                                     conv_block_base, stride_cs_dim, stride_cs_pos, k_channels, k_mask,
                                     window_offset, bos, seq_len, 1, WIDTH, BU, HAS_TOKEN_INDEX)  # fmt: skip
    tl.debug_barrier()
    base = conv_state_ptr + conv_block_base + rows.to(tl.int64)[:, None] * stride_cs_pos
    tl.store(base + q_channels.to(tl.int64)[None, :] * stride_cs_dim, new_q.to(conv_state_ptr.dtype.element_ty),
             mask=store_mask)  # fmt: skip
    tl.store(base + k_channels.to(tl.int64)[None, :] * stride_cs_dim, new_k.to(conv_state_ptr.dtype.element_ty),
             mask=store_mask)  # fmt: skip
""",
)

WINDOW_ARGS = (
    "mixed_qkv_ptr, conv_state_ptr, token_index_ptr, stride_x_token, conv_block * stride_cs_block, stride_cs_dim, "
    "stride_cs_pos, i_h, k_offs, k_mask, num_accepted - 1, bos, seq_len, H, K, WIDTH, BU, HAS_TOKEN_INDEX"
)


def with_window_switch(src: str) -> str:
    for old, new in (SIGNATURE_EDIT, WINDOW_STORE_EDIT):
        src = sub(src, old, new)
    return src
