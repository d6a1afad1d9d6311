"""Writes .exp/variants2/k_fused.py: one kernel for the whole spec core (the Q/K kernel's work done in every V/GDN
program), timed against main with ``../cold-l2/variants_cold.py`` (the module sets NO_QK_KERNEL).

Experiment (repository root). ``../launch-chain/`` finds that the Q/K kernel in front of the V/GDN kernel costs
1.0 us at 27B TP=2 B8 MTP 4 fp32 (main 20.58 us, main's V/GDN kernel with no Q/K kernel launched 19.58): its
loads queue behind the V/GDN kernel's state loads and every V/GDN program waits for the whole Q/K grid. Here each
V/GDN program computes the normalised q and k of its key head itself (conv + SiLU + L2 norm of 2 x K channels, the
Q/K kernel's code) while its state slab is in flight, writes them to the scratch (the HV/H x V/BV programs of a
key head write the same values) and reads them back after a barrier, as main's token loop does. The Q/K conv
window of (sequence, key head) is read by all those programs and must be rewritten only after the last read:
every program adds 1 to a counter of its (sequence, key head) after its reads (acq_rel), and the program that
finds itself last rewrites the window at its end and sets the counter back to 0 (no program waits for another).
The kernel is a programmatic dependent of the kernel before it and waits for it first thing (as the Q/K kernel
does); the staggered start has no wait to hide behind and is off.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from window_edits import WINDOW_ARGS, sub, with_window_switch  # noqa: E402

src = open("src/caovan/kernels/gdn_spec_decode/triton_kernels.py").read()


# 1. the conv helper can leave the window alone
src = with_window_switch(src)

# 2. the V/GDN kernel: two arguments more, its own wait first thing
src = sub(src, "    STAGGER: tl.constexpr,\n):\n", "    STAGGER: tl.constexpr,\n    qk_counter_ptr,\n    scale,\n):\n")
src = sub(
    src,
    "    i_h = i_hv // (HV // H)  # HF/AWQ layout: value heads of one key head are adjacent\n",
    "    i_h = i_hv // (HV // H)  # HF/AWQ layout: value heads of one key head are adjacent\n"
    "    if USE_PDL:\n"
    "        gdc_wait()  # a programmatic dependent of the kernel before it, as main's Q/K kernel\n"
    "    counter = qk_counter_ptr + i_n * H + i_h\n"
    "    group = (HV // H) * tl.num_programs(0)  # programs that read the q/k window of (sequence, key head)\n",
)
# a sequence with no initial state: no q/k needed, but its window still moves on (as main's Q/K kernel does)
src = sub(
    src,
    """    if initial_block <= NULL_SLOT_MAX:
        # No initial state (vLLM returns before writing its output rows): zeros, no state writes.
        _store_zero_rows(out_head_ptr, token_index_ptr, stride_out_token, v_mask, bos, seq_len, BV, HAS_TOKEN_INDEX)
""",
    f"""    if initial_block <= NULL_SLOT_MAX:
        # No initial state (vLLM returns before writing its output rows): zeros, no state writes.
        _store_zero_rows(out_head_ptr, token_index_ptr, stride_out_token, v_mask, bos, seq_len, BV, HAS_TOKEN_INDEX)
        if tl.atomic_add(counter, 1, sem="acq_rel") == group - 1:
            _rewrite_qk_windows({WINDOW_ARGS})
            tl.atomic_xchg(counter, 0, sem="relaxed")
""",
)
src = sub(
    src,
    """    if USE_PDL:
        # Launched as a programmatic dependent of the Q/K kernel: up to here nothing read what it writes
        # (the state slab, the V conv and the gating are already loaded); its q/k scratch is read below.
        gdc_wait()
""",
    """    qk_rows = tl.arange(0, BU)
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
    arrived = tl.atomic_add(counter, 1, sem="acq_rel")  # after this program's reads of the q/k window
    tl.debug_barrier()  # the scratch rows this program wrote are read back below
""",
)
assert src.endswith('                cache_modifier=".cs",\n            )\n')
src += f"""    if arrived == group - 1:  # every other reader is done with the old q/k window
        _rewrite_qk_windows({WINDOW_ARGS})
        tl.atomic_xchg(counter, 0, sem="relaxed")
"""
src = src.replace("def _caovan_sm75_fused_v_gdn_spec_decode_kernel(", "def _fused_spec_decode_kernel(")

src += '''

NO_DIRECT_LAUNCH = True  # for variants_cold.py: this launch takes two arguments more than main's
NO_QK_KERNEL = True  # for variants_cold.py / check_cpu.py: the Q/K kernel is not launched
_counters = {}
JIT_KERNEL = _fused_spec_decode_kernel


def _extra_args(args, kw):
    import inspect

    import torch

    names = list(inspect.signature(_fused_spec_decode_kernel.fn).parameters)
    bound = dict(zip(names, args))
    n_items = bound["H"] * (bound["query_start_loc_ptr"].shape[0] - 1)
    device = args[0].device
    counters = _counters.get(device)
    if counters is None or counters.numel() < n_items:  # grows at a warm-up call, never inside a capture
        counters = _counters[device] = torch.zeros(max(n_items, 64), dtype=torch.int32, device=device)
    return counters, bound["K"] ** -0.5


class _Fused:
    """``kernel[grid](*args, ...)`` as for main's V/GDN kernel, with the counter buffer and the q scale added."""

    def __getitem__(self, grid):
        def launch(*args, **kw):
            return _fused_spec_decode_kernel[grid](*args, *_extra_args(args, kw), **kw)

        return launch

    def warmup(self, *args, grid, **kw):
        return _fused_spec_decode_kernel.warmup(*args, *_extra_args(args, kw), grid=grid, **kw)


_caovan_sm75_fused_v_gdn_spec_decode_kernel = _Fused()
'''
open(".exp/variants2/k_fused.py", "w").write(src)
