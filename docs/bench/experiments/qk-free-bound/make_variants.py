"""Writes .exp/variants2/k_NAME.py: bounds with main's V/GDN kernel alone (no Q/K kernel launched; wrong results).

Question: a design without the Q/K kernel (each V/GDN program computing its key head's q and k itself) would lose
the launch chain, the Q/K programs beside the V/GDN grid and the wait for them, but also the staggered start, which
the wait provides. Could it reach the target at the last shape at all? Its V/GDN kernel does at least main's work,
so main's kernel alone, with its staggered start made some other way, bounds it from below. Variants (every one
sets ``NO_QK_KERNEL``: ``../last-token-write-through/ab.py`` launches no Q/K kernel; q and k are whatever the
scratch holds, so the float64 check fails by design):

  alone        main's kernel as it is (its waits find no Q/K kernel: the staggered half waits for nothing)
  alonesN      the staggered half sleeps N ns (``nanosleep``) where it would wait for the Q/K kernel

Usage (repository root): python3 docs/bench/experiments/qk-free-bound/make_variants.py
"""

import os
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from source_edits import NO_QK_KERNEL_FLAGS, sub  # noqa: E402

BASE_COMMIT = "436ed67"
MAIN = subprocess.check_output(
    ["git", "show", f"{BASE_COMMIT}:src/caovan/kernels/gdn_spec_decode/triton_kernels.py"], text=True
)

STAGGER_OLD = """        if i_nhv % 2 == 1:
            gdc_wait()
"""
STAGGER_SLEEP = """        if i_nhv % 2 == 1:
            tl.inline_asm_elementwise("nanosleep.u32 NS; // $0", "=r", [], dtype=tl.int32, is_pure=False, pack=1)
"""

VARIANTS = {"alone": MAIN + NO_QK_KERNEL_FLAGS}
for ns in (500, 1000, 2000):
    VARIANTS[f"alones{ns}"] = sub(MAIN, STAGGER_OLD, STAGGER_SLEEP.replace("NS", str(ns))) + NO_QK_KERNEL_FLAGS

if __name__ == "__main__":
    os.makedirs(".exp/variants2", exist_ok=True)
    for name, text in VARIANTS.items():
        with open(f".exp/variants2/k_{name}.py", "w") as f:
            f.write(text)
        print(f".exp/variants2/k_{name}.py")
