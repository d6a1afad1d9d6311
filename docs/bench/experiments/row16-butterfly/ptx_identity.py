"""Checks, without a GPU, that main's V/GDN kernel with its ROW_BUTTERFLY option is the code this folder timed.

- ROW_BUTTERFLY off compiles to the same PTX as the kernel of BASE_COMMIT (before the option) at the entries'
  launches: sm_90 at BV 8 (slab offsets compiled in, 88 registers), at BV 16, rows of 16 lanes at BV 16 (152
  registers), with a token index, and sm_75's own entry.
- ROW_BUTTERFLY on compiles to the PTX of ``bfly16`` (``make_variants.py``, which writes it from BASE_COMMIT's
  kernel), the variant timed in ``bfly*-h200.json``, at the last shape (27B TP=2, MTP 4, fp32 state, BV 16, rows
  of 16 lanes, 152 registers), with and without a token index; main's PTX also carries ``row_butterfly.MARKER``
  (a PTX comment), which is left out of the comparison.

PTX is compared outside its debug sections and ``.loc``/``.file`` lines (source lines differ by design), without
leading whitespace.
Prints one line per comparison; exit 1 if any differs.

Usage (repository root, a git checkout, after make_variants.py):
    PYTHONPATH=src python3 docs/bench/experiments/row16-butterfly/ptx_identity.py
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

from caovan.kernels.gdn_spec_decode import aot, row_butterfly, triton_kernels

# The launch values and the kernel loader of the split rows' identity check, by path (both scripts share a name).
_split_check_spec = importlib.util.spec_from_file_location(
    "row_split_ptx_identity", Path(__file__).resolve().parent.parent / "row-split-tile" / "ptx_identity.py"
)
_split_check = importlib.util.module_from_spec(_split_check_spec)
_split_check_spec.loader.exec_module(_split_check)
FP16, FP32, MTP4, V_KERNEL, _load = (
    _split_check.FP16,
    _split_check.FP32,
    _split_check.MTP4,
    _split_check.V_KERNEL,
    _split_check._load,
)

BASE_COMMIT = "12e0b95"


def _ptx(fn, capability, dtypes, layout, bv, maxnreg, row_lanes=32, butterfly=None, constant_offsets=False, shape=MTP4):
    use_pdl = capability >= (9, 0)
    _, values = aot._launch_values(shape, dtypes, layout, bv, use_pdl, use_pdl, constant_offsets, row_lanes)
    if butterfly is None:
        del values["ROW_BUTTERFLY"]  # a kernel without the option
    else:
        values["ROW_BUTTERFLY"] = butterfly
    ptx = _split_check.launch_ptx(fn, capability, values, maxnreg)
    return "\n".join(
        line.strip()  # the PTX inline asm after the marker starts at column 0, not indented
        for line in ptx.splitlines()
        if line.strip() != row_butterfly.MARKER
    )


def main() -> int:
    with tempfile.TemporaryDirectory() as tmp:
        base_path = Path(tmp) / "base_kernels.py"
        base_path.write_text(
            subprocess.run(
                ["git", "show", f"{BASE_COMMIT}:src/caovan/kernels/gdn_spec_decode/triton_kernels.py"],
                check=True,
                capture_output=True,
                text=True,
            ).stdout
        )
        base = _load(base_path, "base_kernels")
    bfly16 = _load(Path(".exp/variants2/k_bfly16.py"), "bfly16_variant")
    now = getattr(triton_kernels, V_KERNEL)
    token_index = aot.LayoutVariant(has_token_index=True, index_dtype="int64")
    comparisons = [
        ("off: sm90 BV 8, offsets compiled in, 88 registers", base, None,
         ((9, 0), FP32, aot.DEFAULT_LAYOUT, 8, 88), {"constant_offsets": True}),
        ("off: sm90 BV 16", base, None, ((9, 0), FP32, aot.DEFAULT_LAYOUT, 16, None), {}),
        ("off: sm90 BV 16, rows of 16 lanes, 152 registers", base, None,
         ((9, 0), FP32, aot.DEFAULT_LAYOUT, 16, 152), {"row_lanes": 16}),
        ("off: sm90 BV 16, token index", base, None, ((9, 0), FP32, token_index, 16, None), {}),
        ("off: sm75 entry BV 32, 168 registers", base, None,
         ((7, 5), FP16, aot.DEFAULT_LAYOUT, 32, 168), {"shape": replace(MTP4, t_max=4)}),
        ("on vs bfly16: sm90 BV 16, rows of 16 lanes, 152 registers", bfly16, False,
         ((9, 0), FP32, aot.DEFAULT_LAYOUT, 16, 152), {"row_lanes": 16}),
        ("on vs bfly16: token index", bfly16, False, ((9, 0), FP32, token_index, 16, 152), {"row_lanes": 16}),
    ]  # fmt: skip
    failed = 0
    for name, reference, reference_flag, launch, extra in comparisons:
        ours = _ptx(now, *launch, butterfly=name.startswith("on"), **extra)
        theirs = _ptx(reference, *launch, butterfly=reference_flag, **extra)
        same = ours == theirs
        failed += not same
        print(f"{'same' if same else 'DIFFERENT'}: {name} ({len(ours.splitlines())} PTX lines)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
