"""Writes .exp/variants2/k_cta.py and k_ctast.py: the whole spec core in one kernel whose multi-warp programs (CTAs)
share one q/k prologue, timed against main with ``../cold-l2/variants_cold.py`` (the modules set NO_QK_KERNEL).

Experiment (repository root). ``../qk-in-v-kernel/`` put the Q/K kernel's work into every one-warp V/GDN program:
255 registers, the one-wave grid gone, 1.66-1.93x main's time. Here a program is a CTA of W warps holding BV = 16 W
value rows (W = 4 at 27B: 64 rows, half a value head), so the grid keeps main's 1536 warps in one wave, while the
q/k conv of the key head is spread over the CTA's 4 W warps (a quarter of the registers per thread) and done by 6
CTAs per key head instead of 24 programs. q and k go through the scratch and a CTA barrier, as main's token loop
reads them. The q/k conv window of (sequence, key head) is rewritten by the last of its readers, found with a
counter (the edits of ``../qk-in-v-kernel/window_edits.py``); a CTA barrier before the counter's add makes every
warp's window reads precede it. No Q/K kernel: no launch chain, no Q/K program holding register banks of an SM,
no wait for a whole grid.

``ctast``: the staggered start in this form: odd value heads load their state slab only after the q/k prologue
(main's stagger has them wait for the Q/K kernel). ``cta``: every slab load issued first. A module constant
MAXNREG caps registers (the wrappers pass it to every launch); set per variant below.
"""

import os
import re
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "qk-in-v-kernel"))
from window_edits import WINDOW_ARGS, sub, with_window_switch  # noqa: E402

MAIN = open("src/caovan/kernels/gdn_spec_decode/triton_kernels.py").read()


def variant(maxnreg) -> str:
    src = with_window_switch(MAIN)
    src = sub(
        src,
        "    WRITE_THROUGH_LAST: tl.constexpr,\n):\n",
        "    WRITE_THROUGH_LAST: tl.constexpr,\n    qk_counter_ptr,\n    scale,\n):\n",
    )
    src = sub(
        src,
        "    i_h = i_hv // (HV // H)  # HF/AWQ layout: value heads of one key head are adjacent\n",
        "    i_h = i_hv // (HV // H)  # HF/AWQ layout: value heads of one key head are adjacent\n"
        "    if USE_PDL:\n"
        "        gdc_wait()  # a programmatic dependent of the kernel before it, as main's Q/K kernel\n"
        "    counter = qk_counter_ptr + i_n * H + i_h\n"
        "    group = (HV // H) * tl.num_programs(0)  # CTAs that read the q/k window of (sequence, key head)\n",
    )
    src = sub(
        src,
        """    if initial_block <= NULL_SLOT_MAX:
        # No initial state (vLLM returns before writing its output rows): zeros, no state writes.
        _store_zero_rows(out_head_ptr, token_index_ptr, stride_out_token, v_mask, bos, seq_len, BV, HAS_TOKEN_INDEX)
""",
        f"""    if initial_block <= NULL_SLOT_MAX:
        # No initial state (vLLM returns before writing its output rows): zeros, no state writes.
        _store_zero_rows(out_head_ptr, token_index_ptr, stride_out_token, v_mask, bos, seq_len, BV, HAS_TOKEN_INDEX)
        tl.debug_barrier()  # every warp's q/k window reads (none here) before the add
        if tl.atomic_add(counter, 1, sem="acq_rel") == group - 1:
            _rewrite_qk_windows({WINDOW_ARGS})
            tl.atomic_xchg(counter, 0, sem="relaxed")
""",
    )
    # the stagger: odd value heads issue their slab load after the q/k prologue instead of behind a wait
    src, n = re.subn(
        r"    if USE_PDL and STAGGER:\n.*?            gdc_wait\(\)\n(    state = tl\.load\(head_base.*?\n)",
        lambda m: (
            "    if STAGGER:\n        late = i_nhv % 2 == 1\n    else:\n        late = i_nhv < 0\n"
            + m[1].replace("mask=slab_mask,", "mask=slab_mask & (late == 0),")
        ),
        src,
        flags=re.S,
    )
    assert n == 1
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
    tl.debug_barrier()  # every warp's q/k window reads before the add; the scratch rows are read back below
    arrived = tl.atomic_add(counter, 1, sem="acq_rel")
    if late:
        state = tl.load(head_base + initial_block * stride_ssm_block + slab_offs, mask=slab_mask, other=0.0).to(
            tl.float32
        )
""",
    )
    assert src.endswith('                cache_modifier=".cs",\n            )\n')
    src += f"""    if arrived == group - 1:  # every other reader is done with the old q/k window
        _rewrite_qk_windows({WINDOW_ARGS})
        tl.atomic_xchg(counter, 0, sem="relaxed")
"""
    src = src.replace("def _caovan_sm75_fused_v_gdn_spec_decode_kernel(", "def _cta_spec_decode_kernel(")
    src += f'''

NO_DIRECT_LAUNCH = True  # for variants_cold.py: this launch takes two arguments more than main's
NO_QK_KERNEL = True  # for variants_cold.py / check_cpu.py: the Q/K kernel is not launched
MAXNREG = {maxnreg!r}
_counters = {{}}
_reported = set()
JIT_KERNEL = _cta_spec_decode_kernel


def _extra_args(args, kw):
    import inspect

    import torch

    names = list(inspect.signature(_cta_spec_decode_kernel.fn).parameters)
    bound = dict(zip(names, args))
    n_items = bound["H"] * (bound["query_start_loc_ptr"].shape[0] - 1)
    device = args[0].device
    counters = _counters.get(device)
    if counters is None or counters.numel() < n_items:  # grows at a warm-up call, never inside a capture
        counters = _counters[device] = torch.zeros(max(n_items, 64), dtype=torch.int32, device=device)
    if MAXNREG is not None:
        kw["maxnreg"] = MAXNREG
    return counters, bound["K"] ** -0.5


class _Cta:
    """``kernel[grid](*args, ...)`` as for main's V/GDN kernel, with the counter buffer and the q scale added."""

    def __getitem__(self, grid):
        def launch(*args, **kw):
            extra = _extra_args(args, kw)
            compiled = _cta_spec_decode_kernel[grid](*args, *extra, **kw)
            key = (compiled.hash, tuple(grid))
            if key not in _reported:  # registers and spills of each compiled kernel, once (the run's log)
                _reported.add(key)
                print(f"[cta] grid {{tuple(grid)}} warps {{kw.get('num_warps')}} maxnreg {{kw.get('maxnreg')}}:"
                      f" {{compiled.n_regs}} registers, {{compiled.n_spills}} spills", flush=True)
            return compiled

        return launch

    def warmup(self, *args, grid, **kw):
        extra = _extra_args(args, kw)
        return _cta_spec_decode_kernel.warmup(*args, *extra, grid=grid, **kw)


_caovan_sm75_fused_v_gdn_spec_decode_kernel = _Cta()
'''
    return src


os.makedirs(".exp/variants2", exist_ok=True)
for name, maxnreg in (("cta", None), ("ctam168", 168)):
    open(f".exp/variants2/k_{name}.py", "w").write(variant(maxnreg))
