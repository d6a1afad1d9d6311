"""Writes .exp/variants2/k_wt.py, k_ef.py, k_cg.py: main's kernels with other cache policies on the state stores.

Experiment (repository root). Main's per-token state stores are streaming stores (``cache_modifier=".cs"``,
``st.global.cs``). The variants change only that store:

- ``wt``: ``cache_modifier=".wt"`` (write-through);
- ``ef``: ``eviction_policy="evict_first"`` instead (``st.global.L1::evict_first.L2::cache_hint`` with a
  ``createpolicy.fractional.L2::evict_first`` policy of fraction 1.0; ``.cs`` and the hint together do not
  assemble);
- ``cg``: ``cache_modifier=".cg"`` (cache in L2, not L1).
"""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from source_edits import sub  # noqa: E402

src = open("src/caovan/kernels/gdn_spec_decode/triton_kernels.py").read()
OLD = '                cache_modifier=".cs",\n'
VARIANTS = {
    "wt": '                cache_modifier=".wt",\n',
    "ef": '                eviction_policy="evict_first",\n',
    "cg": '                cache_modifier=".cg",\n',
}
os.makedirs(".exp/variants2", exist_ok=True)
for name, new in VARIANTS.items():
    open(f".exp/variants2/k_{name}.py", "w").write(sub(src, OLD, new))
