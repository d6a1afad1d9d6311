"""Writes .exp/variants2/k_headfirst.py, k_seqfirst.py and k_ldef.py: main's V/GDN kernel with another program order, or
with the initial state load marked evict-first.

Experiment (repository root; timed on an H200 with ``../cold-l2/variants_cold.py``). ``../issue-profile/`` finds
the slowest SM 10-12 % over the mean SM at 27B B8 MTP 4 fp32, more than the 3 % that 12 against 11.6 programs per
SM explains. Which (sequence, value head, value block) items share an SM follows from the program order, so:

- ``headfirst``: consecutive programs take consecutive (sequence, value head) items with the same value block
  (main: the value blocks of one head are consecutive), and the staggered half alternates program by program.
- ``seqfirst``: the sequence is the fastest-moving index of the second grid axis (main: the value head).
- ``ldef``: main's order; the initial state slab is loaded evict-first. Its lines are dead once loaded (every token
  state goes to another slot), and in the warm-L2 graph time L2 is where the state stores wait for DRAM.
"""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from source_edits import sub  # noqa: E402

src = open("src/caovan/kernels/gdn_spec_decode/triton_kernels.py").read()


ORDER = """    i_vb = tl.program_id(0)
    i_nhv = tl.program_id(1)
    i_n = i_nhv // HV
    i_hv = i_nhv % HV
"""
HEADFIRST = """    num_items = tl.num_programs(1)
    linear = tl.program_id(1) * tl.num_programs(0) + tl.program_id(0)
    i_vb = linear // num_items
    i_nhv = linear % num_items
    i_n = i_nhv // HV
    i_hv = i_nhv % HV
"""
SEQFIRST = """    i_vb = tl.program_id(0)
    num_seqs = tl.num_programs(1) // HV
    i_n = tl.program_id(1) % num_seqs
    i_hv = tl.program_id(1) // num_seqs
    i_nhv = i_n * HV + i_hv
"""
open(".exp/variants2/k_headfirst.py", "w").write(sub(src, ORDER, HEADFIRST))
open(".exp/variants2/k_seqfirst.py", "w").write(sub(src, ORDER, SEQFIRST))
open(".exp/variants2/k_ldef.py", "w").write(
    sub(
        src,
        "    state = tl.load(head_base + initial_block * stride_ssm_block + slab_offs, mask=slab_mask, other=0.0)",
        "    state = tl.load(\n"
        "        head_base + initial_block * stride_ssm_block + slab_offs,\n"
        "        mask=slab_mask,\n"
        "        other=0.0,\n"
        '        eviction_policy="evict_first",\n'
        "    )",
    )
)
