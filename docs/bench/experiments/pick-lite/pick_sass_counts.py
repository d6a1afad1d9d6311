"""SASS counts of main's V/GDN kernel, of the pick-lite variant and of the no-pick bound at BV 16 for sm_90
(ahead of time, no GPU; the shape and launch values of ../residency-cap/sass_counts.py: 27B TP=2, MTP 4, fp32
state, no token_index).

Usage (repository root, after make_variants.py):
    PYTHONPATH=src python3 docs/bench/experiments/pick-lite/pick_sass_counts.py
(named apart from ../residency-cap/sass_counts.py, whose module it imports: the script's own folder is on sys.path too).
The run quoted in README.md: sass-counts.txt.
"""

import importlib.util
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "residency-cap"))
from sass_counts import aot, sass_counts  # noqa: E402

print(f"main BV16: {sass_counts(aot._caovan_sm75_fused_v_gdn_spec_decode_kernel, 16)}", flush=True)
for name in ("picklite", "nopick"):
    spec = importlib.util.spec_from_file_location(f"variant_{name}", f".exp/variants2/k_{name}.py")
    variant = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(variant)
    print(f"{name} BV16: {sass_counts(variant._caovan_sm75_fused_v_gdn_spec_decode_kernel, 16)}", flush=True)
