"""Writes .exp/variants2/k_ts<TAIL>x<ITEM>.py: main's V/GDN kernel with the last TAIL value rows of every
(sequence, value head) cut into small items of ITEM rows, launched after all the full blocks (prepared: see
README.md).

Experiment (repository root). Main's grid is one wave of equal programs, placed once: an SM keeps the programs it
got, and the timeline of ``../launch-chain/`` shows SMs done at 12-14 us while others run to 19.4 us. Here the grid
is one-dimensional: first every full block (BV rows, main's order), then the small items. They are dispatched
last, so they go to the SMs that free a slot first: the block scheduler balances the tail by itself, with no
counter and no persistent loop (``../balanced-work/``, which put every item's start-up on a program's critical
path). A small item is a BV-row program with the rows past ITEM masked off: same registers and code as main, a
quarter or an eighth of its memory traffic (a full block that would cross V - TAIL is cut there, so that the
small BV 32 shapes of the CPU check split too). The staggered start stays on the value head, as in main.

Each module sets NO_DIRECT_LAUNCH (the entry's direct launch would replay main's grid) and wraps the kernel so
that ``kernel[grid]`` launches the split grid; ``warmup`` (the one-wave rule's register count) is main's.
"""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from source_edits import sub  # noqa: E402

src = open("src/caovan/kernels/gdn_spec_decode/triton_kernels.py").read()

ORDER = """    i_vb = tl.program_id(0)
    i_nhv = tl.program_id(1)
"""
SPLIT = """    # Tail split (experiment): full blocks first, then the last TAIL rows of every item in ITEM-row pieces.
    n_full: tl.constexpr = (V - TAIL + BV - 1) // BV  # the last full block is cut at V - TAIL
    n_small: tl.constexpr = TAIL // ITEM
    pid = tl.program_id(0)
    full_programs = (tl.num_programs(0) // (n_full + n_small)) * n_full
    if pid < full_programs:
        i_nhv = pid // n_full
        row0 = (pid % n_full) * BV
        n_rows = tl.minimum(BV, V - TAIL - row0)
    else:
        piece = pid - full_programs
        i_nhv = piece // n_small
        row0 = V - TAIL + (piece % n_small) * ITEM
        n_rows = ITEM
"""
ROWS = """    v_offs = i_vb * BV + tl.arange(0, BV)
    v_mask = v_offs < V
"""
SPLIT_ROWS = """    v_offs = row0 + tl.arange(0, BV)
    v_mask = (tl.arange(0, BV) < n_rows) & (v_offs < V)
"""

WRAPPER = '''

NO_DIRECT_LAUNCH = True
_KERNEL = _caovan_sm75_fused_v_gdn_spec_decode_kernel
_NAMES = list(inspect.signature(_KERNEL.fn).parameters)
_reported = set()


class _SplitGrid:
    """``kernel[grid]`` with main's grid (V blocks, sequences x value heads) launches the split grid instead."""

    def __getitem__(self, grid):
        def launch(*args, **kw):
            bound = dict(zip(_NAMES, args))
            V, BV = bound["V"], bound["BV"]
            assert TAIL < V and TAIL % ITEM == 0 and ITEM <= BV, (V, BV, TAIL, ITEM)
            split = (grid[1] * ((V - TAIL + BV - 1) // BV + TAIL // ITEM), 1, 1)
            compiled = _KERNEL[split](*args, **kw)
            # The run's log: registers and grid of each compiled launch, once (None: the interpreter).
            if compiled is not None and split not in _reported:
                _reported.add(split)
                print(f"[ts] BV {BV} tail {TAIL} item {ITEM}: grid {tuple(grid)} -> {split},"
                      f" {compiled.n_regs} registers, {compiled.n_spills} spills", flush=True)
            return compiled

        return launch

    def warmup(self, *args, **kw):
        return _KERNEL.warmup(*args, **kw)


_caovan_sm75_fused_v_gdn_spec_decode_kernel = _SplitGrid()
'''

VARIANTS = ((16, 4), (16, 8), (32, 8), (32, 4), (16, 2))
os.makedirs(".exp/variants2", exist_ok=True)
for tail, item in VARIANTS:
    text = sub(sub(src, ORDER, SPLIT), ROWS, SPLIT_ROWS)
    head = "from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait\n"
    text = sub(text, head, f"import inspect\n\n{head}\nTAIL = tl.constexpr({tail})\nITEM = tl.constexpr({item})\n")
    name = f".exp/variants2/k_ts{tail}x{item}.py"
    open(name, "w").write(text + WRAPPER)
    print("wrote", name)
