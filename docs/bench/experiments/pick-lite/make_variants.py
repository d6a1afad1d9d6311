"""Writes .exp/variants2/k_picklite.py and k_nopick.py: main's V/GDN kernel with cheaper per-token picks, and a
bound without them (see README.md; counted ahead of time, not timed).

Experiment (repository root). Every token step picks four scalars out of ``[BT]`` tiles with
``tl.sum(tl.where(pick, tile, 0))``: a warp-wide reduction each, on the step's dependency chain, and two of them
(row, state slot) on 64-bit integers (two shuffles per level). The variant:
- row: ``bos + t`` where the call has no ``token_index`` (the tile holds exactly ``bos + token_rows`` then);
- state slot: picked from the tile as loaded (int32 in vLLM's metadata) and widened after the pick.
The values are the same as main's, so the results are bit for bit main's. ``nopick`` (a bound, wrong results by
design) also replaces the decay, beta and state-slot picks by values at hand, so that no pick is left.
"""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from source_edits import sub  # noqa: E402

src = open("src/caovan/kernels/gdn_spec_decode/triton_kernels.py").read()
text = sub(
    src,
    "    blocks_all = tl.load(si_row_ptr + token_rows, mask=row_mask, other=NULL_SLOT_MAX).to(tl.int64)\n",
    "    blocks_all = tl.load(si_row_ptr + token_rows, mask=row_mask, other=NULL_SLOT_MAX)\n",
)
text = sub(
    text,
    "        row = tl.sum(tl.where(pick, rows_all, 0))\n",
    "        if HAS_TOKEN_INDEX:\n"
    "            row = tl.sum(tl.where(pick, rows_all, 0))\n"
    "        else:\n"
    "            row = bos + t\n",
)
text = sub(
    text,
    "        block_t = tl.sum(tl.where(pick, blocks_all, 0))\n",
    "        block_t = tl.sum(tl.where(pick, blocks_all, 0)).to(tl.int64)\n",
)
os.makedirs(".exp/variants2", exist_ok=True)
open(".exp/variants2/k_picklite.py", "w").write(text)
text = sub(text, "        decay = tl.sum(tl.where(pick, decay_all, 0.0))\n", "        decay = dt_bias\n")
text = sub(text, "        beta = tl.sum(tl.where(pick, beta_all, 0.0))\n", "        beta = neg_A\n")
text = sub(
    text,
    "        block_t = tl.sum(tl.where(pick, blocks_all, 0)).to(tl.int64)\n",
    "        block_t = initial_block + t\n",
)
open(".exp/variants2/k_nopick.py", "w").write(text)
print("wrote .exp/variants2/k_picklite.py and k_nopick.py")
