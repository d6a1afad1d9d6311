"""Writes .exp/variants2/k_cstride.py: the kernel on main with the state slab's offsets as compile-time constants.

Experiment only (repository root): it assumes a (V, K)-contiguous slab per value head (stride K along V, 1 along
K), true for the bench cases; the accuracy check of variants_cold.py would flag any case where it is not.
"""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from source_edits import sub  # noqa: E402

src = open("src/caovan/kernels/gdn_spec_decode/triton_kernels.py").read()
old = "    slab_offs = v_offs.to(tl.int64)[:, None] * stride_ssm_v + k_offs.to(tl.int64)[None, :] * stride_ssm_k\n"
new = "    slab_offs = v_offs[:, None] * K + k_offs[None, :]  # experiment: (V, K) contiguous slab assumed\n"
open(".exp/variants2/k_cstride.py", "w").write(sub(src, old, new))
