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
from window_edits import (  # noqa: E402
    PDL_WAIT_BEFORE_QK_READS,
    QK_PROLOGUE,
    REWRITE_BY_LAST_READER,
    counter_args_source,
    sub,
    with_own_wait_and_counter,
    with_window_moved_on_without_initial_state,
    with_window_switch,
)

MAIN = open("src/caovan/kernels/gdn_spec_decode/triton_kernels.py").read()


def variant(maxnreg) -> str:
    src = with_window_switch(MAIN)
    src = sub(
        src,
        "    WRITE_THROUGH_LAST: tl.constexpr,\n):\n",
        "    WRITE_THROUGH_LAST: tl.constexpr,\n    qk_counter_ptr,\n    scale,\n):\n",
    )
    src = with_own_wait_and_counter(src, "CTAs")
    src = with_window_moved_on_without_initial_state(
        src, "        tl.debug_barrier()  # every warp's q/k window reads (none here) before the add\n"
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
        PDL_WAIT_BEFORE_QK_READS,
        QK_PROLOGUE + "    tl.debug_barrier()  # every warp's q/k window reads before the add;"
        " the scratch rows are read back below\n"
        + """    arrived = tl.atomic_add(counter, 1, sem="acq_rel")
    if late:
        state = tl.load(head_base + initial_block * stride_ssm_block + slab_offs, mask=slab_mask, other=0.0).to(
            tl.float32
        )
""",
    )
    assert src.endswith('                cache_modifier=".cs",\n            )\n')
    src += REWRITE_BY_LAST_READER
    src = src.replace("def _caovan_sm75_fused_v_gdn_spec_decode_kernel(", "def _cta_spec_decode_kernel(")
    src += (
        f"""

NO_DIRECT_LAUNCH = True  # for variants_cold.py: this launch takes two arguments more than main's
NO_QK_KERNEL = True  # for variants_cold.py / check_cpu.py: the Q/K kernel is not launched
MAXNREG = {maxnreg!r}
_counters = {{}}
_reported = set()
JIT_KERNEL = _cta_spec_decode_kernel


"""
        + counter_args_source(
            "_cta_spec_decode_kernel", '    if MAXNREG is not None:\n        kw["maxnreg"] = MAXNREG\n'
        )
        + '''

class _Cta:
    """``kernel[grid](*args, ...)`` as for main's V/GDN kernel, with the counter buffer and the q scale added."""

    def __getitem__(self, grid):
        def launch(*args, **kw):
            extra = _extra_args(args, kw)
            compiled = _cta_spec_decode_kernel[grid](*args, *extra, **kw)
            key = (compiled.hash, tuple(grid))
            if key not in _reported:  # registers and spills of each compiled kernel, once (the run's log)
                _reported.add(key)
                print(f"[cta] grid {tuple(grid)} warps {kw.get('num_warps')} maxnreg {kw.get('maxnreg')}:"
                      f" {compiled.n_regs} registers, {compiled.n_spills} spills", flush=True)
            return compiled

        return launch

    def warmup(self, *args, grid, **kw):
        extra = _extra_args(args, kw)
        return _cta_spec_decode_kernel.warmup(*args, *extra, grid=grid, **kw)


_caovan_sm75_fused_v_gdn_spec_decode_kernel = _Cta()
'''
    )
    return src


os.makedirs(".exp/variants2", exist_ok=True)
for name, maxnreg in (("cta", None), ("ctam168", 168)):
    open(f".exp/variants2/k_{name}.py", "w").write(variant(maxnreg))
