"""Writes .exp/variants2/k_qkplain.py: main's kernels with the Q/K kernel launched plainly again (no programmatic
dependent launch of it), the V/GDN kernel still its programmatic dependent.

Question: ../qk-programmatic-launch/ made the Q/K kernel a programmatic dependent of the kernel before it (4.5 %
less over the model cases then) but found the two largest cases 0.9 % slower with it (27B and 80B, 8 sequences,
MTP 4, fp32 state), on the kernel of that time. With main's kernel since (split rows, write-through last token,
staggered start), which is faster at the last shape? ../qk-metadata-before-wait/ found that what the Q/K kernel
does around its gdc_wait() moves the whole call by 0.2 us even at one sequence.

  qkplain    the Q/K kernel as compiled by main (USE_PDL: its gdc_wait() returns at once when launched plainly,
             its gdc_launch_dependents() still releases the V/GDN kernel) launched with launch_pdl=False

Usage (repository root): python3 docs/bench/experiments/qk-plain-launch/make_variants.py
"""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from source_edits import write_variants  # noqa: E402

MAIN = open("src/caovan/kernels/gdn_spec_decode/triton_kernels.py").read()

PLAIN_QK_LAUNCH = '''

class _PlainLaunch:
    """``kernel[grid](...)`` of the Q/K kernel with launch_pdl forced off (the compiled kernel's own flag, which the
    direct launch path reads too)."""

    def __init__(self, fn):
        self.fn = fn

    def __getitem__(self, grid):
        def launch(*args, **kwargs):
            kwargs["launch_pdl"] = False
            return self.fn[grid](*args, **kwargs)

        return launch


_caovan_sm75_prepare_qk_conv_spec_decode_kernel = _PlainLaunch(_caovan_sm75_prepare_qk_conv_spec_decode_kernel)
VARIANT_QK_KERNEL = True
'''

VARIANTS = {"qkplain": MAIN + PLAIN_QK_LAUNCH}

if __name__ == "__main__":
    write_variants(VARIANTS)
