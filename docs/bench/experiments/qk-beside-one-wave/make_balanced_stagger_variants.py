"""Writes .exp/variants2/k_stfN.py and k_c152*.py: a balanced resident grid with a controlled staggered fraction.

Experiment (repository root; measured on an H200 and rejected: README.md, balanced-stagger-b8-h200.json).
``../launch-chain/timeline-h200.json`` shows main's V/GDN grid at 27B TP=2 B8 MTP 4 fp32 unbalanced by the Q/K
programs resident when it is placed (8 V/GDN programs beside each, by register banks): 30 % of the programs start
~1.8 us late, 117 SMs end with 12 programs and 11 SMs with 8. Capping the V/GDN kernel at 152 registers makes room
for all 12 beside a Q/K warp in every bank (3 x 4,864 + 1,536 = 16,128 <= 16,384), but with the usual half
stagger that was slower (``../memory-floor/``, 21.06 against 20.17 us): the late 30 % also staggered the work.
These variants keep the grid balanced and move the stagger into the kernel instead:

- ``stf13`` / ``stf23`` / ``stf34``: a third / two thirds / three quarters of the value heads (by ``i_nhv``) load
  their state only after the Q/K kernel is done (main: half, ``i_nhv % 2 == 1``);
- ``c152`` and ``c152stfN``: main / the same launched with ``maxnreg=152`` (the capping wrapper of
  ``../row-reduction-bound/maxnreg168.py`` with the cap and the variant replaced).

Timing command (H200, ~2 min with the two timelines of README.md; carry .exp/variants2):

    PYTHONPATH=src python3 docs/bench/experiments/cold-l2/variants_cold.py $OUT 'B8/' \\
        'current:8x1;c152:8x1,8x1s0;c152stf23:8x1;c152stf34:8x1;stf23:8x1;stf13:8x1' balanced-stagger-b8-h200.json

No variant won at 8 sequences, so the other 48 model cases were not run.
"""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from source_edits import sub  # noqa: E402

src = open("src/caovan/kernels/gdn_spec_decode/triton_kernels.py").read()
OLD = "        if i_nhv % 2 == 1:\n"
FRACTIONS = {"stf13": "i_nhv % 3 == 2", "stf23": "i_nhv % 3 != 0", "stf34": "i_nhv % 4 != 0"}
os.makedirs(".exp/variants2", exist_ok=True)
if not os.path.exists(".exp/variants2/k_base3.py"):  # main's kernels, which k_c152 wraps
    open(".exp/variants2/k_base3.py", "w").write(src)
for name, condition in FRACTIONS.items():
    open(f".exp/variants2/k_{name}.py", "w").write(sub(src, OLD, f"        if {condition}:\n"))
here = os.path.dirname(os.path.abspath(__file__))
wrapper = open(os.path.join(here, "..", "row-reduction-bound", "maxnreg168.py")).read()
old = "_m._caovan_sm75_fused_v_gdn_spec_decode_kernel, 168)"
wrapper = sub(wrapper, old, old.replace("168", "152")).replace("maxnreg=168", "maxnreg=152")
old = 'VARIANT = "bfly"\n'
for variant, name in [("base3", "c152"), ("stf23", "c152stf23"), ("stf34", "c152stf34")]:
    open(f".exp/variants2/k_{name}.py", "w").write(sub(wrapper, old, f'VARIANT = "{variant}"\n'))
