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

src = open("src/caovan/kernels/gdn_spec_decode/triton_kernels.py").read()


# 1. the conv helper can leave the window alone
src = with_window_switch(src)

# 2. the V/GDN kernel: two arguments more, its own wait first thing
src = sub(src, "    STAGGER: tl.constexpr,\n):\n", "    STAGGER: tl.constexpr,\n    qk_counter_ptr,\n    scale,\n):\n")
src = with_own_wait_and_counter(src, "programs")
src = with_window_moved_on_without_initial_state(src)
src = sub(
    src,
    PDL_WAIT_BEFORE_QK_READS,
    QK_PROLOGUE
    + """    arrived = tl.atomic_add(counter, 1, sem="acq_rel")  # after this program's reads of the q/k window
    tl.debug_barrier()  # the scratch rows this program wrote are read back below
""",
)
assert src.endswith('                cache_modifier=".cs",\n            )\n')
src += REWRITE_BY_LAST_READER
src = src.replace("def _caovan_sm75_fused_v_gdn_spec_decode_kernel(", "def _fused_spec_decode_kernel(")

src += (
    """

NO_DIRECT_LAUNCH = True  # for variants_cold.py: this launch takes two arguments more than main's
NO_QK_KERNEL = True  # for variants_cold.py / check_cpu.py: the Q/K kernel is not launched
_counters = {}
JIT_KERNEL = _fused_spec_decode_kernel


"""
    + counter_args_source("_fused_spec_decode_kernel")
    + '''

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
)
open(".exp/variants2/k_fused.py", "w").write(src)
