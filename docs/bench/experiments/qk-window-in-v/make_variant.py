"""Writes .exp/variants2/k_qkwin.py: main's kernels with the q/k conv window rewritten by the V/GDN kernel instead of
the Q/K kernel, timed against main with ``../cold-l2/variants_cold.py``.

Experiment (repository root). ``../launch-chain/`` finds the Q/K kernel's own duration (2.0 us per call alone) on
the V/GDN kernel's critical path at 27B TP=2 B8 MTP 4 fp32, and ``../qk-programmatic-launch/`` that a shorter Q/K
kernel (more warps) helps there. Main's Q/K kernel reads its conv window, then waits at a barrier before rewriting
it (its threads read positions others overwrite) and the V/GDN programs wait for those stores too. Nothing in the
V/GDN kernel reads the q/k window, and once ``gdc_wait()`` returns the whole Q/K grid is done reading it, so here
one V/GDN program per (sequence, key head) — value block 0 of the key head's first value head — waits for the Q/K
kernel, rewrites the q/k window and only then loads its state slab; the Q/K kernel only reads: conv, norm, scratch
stores. Without programmatic dependent launch (SM75) the V/GDN kernel starts after the Q/K kernel ends, so the same
holds. The module sets VARIANT_QK_KERNEL: the harnesses launch its Q/K kernel, not main's.
"""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "qk-in-v-kernel"))
from window_edits import WINDOW_ARGS, sub, with_window_switch  # noqa: E402

src = with_window_switch(open("src/caovan/kernels/gdn_spec_decode/triton_kernels.py").read())

# the Q/K kernel leaves its window alone
src = sub(
    src,
    """        HAS_BIAS,
        HAS_TOKEN_INDEX,
    )
    # Per token L2 norm""",
    """        HAS_BIAS,
        HAS_TOKEN_INDEX,
        False,
    )
    # Per token L2 norm""",
)
# the V/GDN kernel's designated program rewrites it, on both of its paths that follow a conv
src = sub(
    src,
    "    i_h = i_hv // (HV // H)  # HF/AWQ layout: value heads of one key head are adjacent\n",
    "    i_h = i_hv // (HV // H)  # HF/AWQ layout: value heads of one key head are adjacent\n"
    "    rewrites_qk_window = (i_vb == 0) & (i_hv % (HV // H) == 0)  # one program per (sequence, key head)\n",
)
src = sub(
    src,
    """            gdc_wait()
        return

    slab_offs""",
    f"""            gdc_wait()
        if rewrites_qk_window:
            _rewrite_qk_windows({WINDOW_ARGS})
        return

    slab_offs""",
)
# The rewrite comes before the state load, behind the Q/K kernel's end: placed after the token loop instead (where
# the state slab is dead), it took 216 registers instead of 168 at BV 16 with an fp32 state (the compiler's
# choice; reloading the metadata there, even volatile, did not change it), which breaks the one-wave grid.
src = sub(
    src,
    """    state = tl.load(head_base + initial_block * stride_ssm_block + slab_offs, mask=slab_mask, other=0.0)""",
    f"""    if rewrites_qk_window:  # one program in HV/H x V/BV starts its state load after the Q/K kernel and this
        if USE_PDL:
            gdc_wait()  # the Q/K grid is done reading the old window
        _rewrite_qk_windows({WINDOW_ARGS})
    state = tl.load(head_base + initial_block * stride_ssm_block + slab_offs, mask=slab_mask, other=0.0)""",
)
src += "\nVARIANT_QK_KERNEL = True  # for variants_cold.py / check_cpu.py: launch this module's Q/K kernel too\n"
open(".exp/variants2/k_qkwin.py", "w").write(src)
