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


# Pieces of the V/GDN kernel, as text, that the variants with no Q/K kernel (``make_fused_variant.py`` here and
# ``../qk-in-cta/make_variants.py``) replace or add.
#: main's wait for the Q/K kernel before the q/k reads (what the variants replace with the q/k prologue)
PDL_WAIT_BEFORE_QK_READS = """    if USE_PDL:
        # Launched as a programmatic dependent of the Q/K kernel: up to here nothing read what it writes
        # (the state slab, the V conv and the gating are already loaded); its q/k scratch is read below.
        gdc_wait()
"""
#: the Q/K kernel's work for the program's key head (conv + SiLU + L2 norm of q and k), stored to the scratch
QK_PROLOGUE = """    qk_rows = tl.arange(0, BU)
    qk_store_mask = (qk_rows < seq_len)[:, None] & k_mask[None, :]
    for half in tl.static_range(2):
        y = _conv_update_silu(
            mixed_qkv_ptr, conv_weight_ptr, conv_bias_ptr, conv_state_ptr, token_index_ptr, stride_x_token,
            stride_w_dim, stride_w_width, conv_block * stride_cs_block, stride_cs_dim, stride_cs_pos,
            half * (H * K) + i_h * K + k_offs, k_mask, num_accepted - 1, bos, seq_len, WIDTH, BU, HAS_BIAS,
            HAS_TOKEN_INDEX, False,
        )  # fmt: skip
        if half == 0:
            y = y * (tl.rsqrt(tl.sum(y * y, axis=1) + 1e-6) * scale)[:, None]
        else:
            y = y * (tl.rsqrt(tl.sum(y * y, axis=1) + 1e-6) * 1.0)[:, None]
        scratch_ptrs = (
            qk_scratch_ptr
            + ((bos + qk_rows.to(tl.int64)) * 2 + half)[:, None] * (H * K)
            + (i_h * K + k_offs)[None, :]
        )
        tl.store(scratch_ptrs, y, mask=qk_store_mask)
"""
#: appended at the kernel's end: the last reader of the q/k window rewrites it and sets the counter back to 0
REWRITE_BY_LAST_READER = f"""    if arrived == group - 1:  # every other reader is done with the old q/k window
        _rewrite_qk_windows({WINDOW_ARGS})
        tl.atomic_xchg(counter, 0, sem="relaxed")
"""

_KEY_HEAD_LINE = "    i_h = i_hv // (HV // H)  # HF/AWQ layout: value heads of one key head are adjacent\n"
_NO_INITIAL_STATE = """    if initial_block <= NULL_SLOT_MAX:
        # No initial state (vLLM returns before writing its output rows): zeros, no state writes.
        _store_zero_rows(out_head_ptr, token_index_ptr, stride_out_token, v_mask, bos, seq_len, BV, HAS_TOKEN_INDEX)
"""


def with_own_wait_and_counter(src: str, readers: str) -> str:
    """The V/GDN kernel waits for the kernel before it first thing and finds its (sequence, key head) counter;
    ``readers`` names what reads the q/k window in the comment ("programs", "CTAs")."""
    return sub(
        src,
        _KEY_HEAD_LINE,
        _KEY_HEAD_LINE + "    if USE_PDL:\n"
        "        gdc_wait()  # a programmatic dependent of the kernel before it, as main's Q/K kernel\n"
        "    counter = qk_counter_ptr + i_n * H + i_h\n"
        f"    group = (HV // H) * tl.num_programs(0)  # {readers} that read the q/k window of (sequence, key head)\n",
    )


def with_window_moved_on_without_initial_state(src: str, before_add: str = "") -> str:
    """A sequence with no initial state needs no q/k, but its window still moves on (as main's Q/K kernel does):
    that program counts itself a reader too; ``before_add`` is inserted before its add."""
    return sub(
        src,
        _NO_INITIAL_STATE,
        _NO_INITIAL_STATE
        + before_add
        + f"""        if tl.atomic_add(counter, 1, sem="acq_rel") == group - 1:
            _rewrite_qk_windows({WINDOW_ARGS})
            tl.atomic_xchg(counter, 0, sem="relaxed")
""",
    )


def counter_args_source(kernel: str, before_return: str = "") -> str:
    """Source of the generated module's ``_extra_args(args, kw)``: the counter buffer (one int32 per sequence and
    key head, zero, grown at a warm-up call and kept on the device) and the q scale, the two arguments the variant
    kernel ``kernel`` takes more than main's; ``before_return`` is inserted before its return."""
    return f"""def _extra_args(args, kw):
    import inspect

    import torch

    names = list(inspect.signature({kernel}.fn).parameters)
    bound = dict(zip(names, args))
    n_items = bound["H"] * (bound["query_start_loc_ptr"].shape[0] - 1)
    device = args[0].device
    counters = _counters.get(device)
    if counters is None or counters.numel() < n_items:  # grows at a warm-up call, never inside a capture
        counters = _counters[device] = torch.zeros(max(n_items, 64), dtype=torch.int32, device=device)
{before_return}    return counters, bound["K"] ** -0.5
"""
