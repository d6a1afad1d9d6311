"""Writes .exp/variants2/k_unroll.py: main's kernels with the V/GDN token loop unrolled at compile time.

Experiment (repository root). Main's token loop is a run-time loop over ``seq_len``; each step picks its
token's row, decay, beta and state slot out of [BT]-vectors loaded up front (a select and a cross-lane sum per
scalar) and its V row out of the [BU, BV] conv tile. Unrolled (``tl.static_range(BT)``, each step under
``if t < seq_len``), ``t`` is a compile-time constant: the picks compare against a constant and ptxas sees
straight-line steps it can schedule, with the next step's independent picks and loads free to move ahead.
Nothing else changes (same q/k one token ahead, same stores).
"""

import os

SRC = "src/caovan/kernels/gdn_spec_decode/triton_kernels.py"
src = open(SRC).read()
LOOP = "    for t in range(0, seq_len):\n        pick = token_rows == t\n"
STORE_END = '                cache_modifier=".cs",\n            )\n'
assert src.count(LOOP) == 1 and src.count(STORE_END) == 1
start = src.index(LOOP)
end = src.index(STORE_END, start) + len(STORE_END)
body = src[start:end].split("\n", 1)[1]
unrolled = "    for t in tl.static_range(BT):\n        if t < seq_len:\n" + "".join(
    ("    " + line if line.strip() else line) for line in body.splitlines(keepends=True)
)
out = src[:start] + unrolled + src[end:]
os.makedirs(".exp/variants2", exist_ok=True)
open(".exp/variants2/k_unroll.py", "w").write(out)
