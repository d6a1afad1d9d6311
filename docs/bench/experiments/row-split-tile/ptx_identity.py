"""Checks, without a GPU, that main's V/GDN kernel with its ROW_LANES option is the code these experiments timed.

- ROW_LANES 32 (every launch but the split one) compiles to the same PTX as the kernel of BASE_COMMIT, the kernel
  before the option, at the entries' launches: sm_90 at BV 8 (slab offsets compiled in, 88 registers) and at
  BV 16, with a token index, and sm_75's own entry.
- ROW_LANES 16 compiles to the same PTX as ``rows16q`` (``make_variants.py`` run on BASE_COMMIT's kernel), the
  variant timed in ``rows16*-h200.json``, at the last shape (27B TP=2, MTP 4, fp32 state, BV 16, 152 registers).

PTX is compared outside its debug sections and ``.loc``/``.file`` lines (source lines differ by design).
Prints one line per comparison; exit 1 if any differs.

Usage (repository root, a git checkout): PYTHONPATH=src python3 docs/bench/experiments/row-split-tile/ptx_identity.py
"""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

import triton
from triton.backends.compiler import GPUTarget

from caovan.kernels.gdn_spec_decode import aot, triton_kernels

BASE_COMMIT = "183b495b0dfeed91ca20199447c6315293c0efe8"
KERNEL_PATH = "src/caovan/kernels/gdn_spec_decode/triton_kernels.py"
V_KERNEL = "_caovan_sm75_fused_v_gdn_spec_decode_kernel"
FP32 = aot.DtypeCombo("bfloat16", "bfloat16", "float32")
FP16 = aot.DtypeCombo("float16", "float16", "float16")
MTP4 = aot.ModelShape(t_max=5)


def _load(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return getattr(module, V_KERNEL)


def _ptx(fn, capability, dtypes, layout, bv, maxnreg, row_lanes=None, constant_offsets=False, shape=MTP4):
    use_pdl = capability >= (9, 0)
    _, values = aot._launch_values(shape, dtypes, layout, bv, use_pdl, use_pdl, constant_offsets)
    if row_lanes is not None:
        values["ROW_LANES"] = row_lanes
    return launch_ptx(fn, capability, values, maxnreg)


def launch_ptx(fn, capability, values, maxnreg):
    """The PTX of ``fn`` at these launch values, as the entries launch it, without debug sections and lines."""
    use_pdl = capability >= (9, 0)
    options = {"num_warps": 1 if capability >= (9, 0) else 2, "num_stages": 1, "launch_pdl": use_pdl}
    if maxnreg is not None:
        options["maxnreg"] = maxnreg
    target = GPUTarget("cuda", capability[0] * 10 + capability[1], 32)
    ptx = triton.compile(aot._ast_source(fn, values), target=target, options=options).asm["ptx"]
    body = ptx.split("\t.section\t.debug", 1)[0]
    return "\n".join(line for line in body.splitlines() if not re.match(r"\s*\.(loc|file)\b", line))


def main() -> int:
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp) / "base"
        subprocess.run(["git", "worktree", "add", "--detach", "-q", str(base), BASE_COMMIT], check=True)
        try:
            subprocess.run(
                [sys.executable, "docs/bench/experiments/row-split-tile/make_variants.py"],
                cwd=base,
                check=True,
                capture_output=True,
            )
            base_kernel = _load(base / KERNEL_PATH, "base_kernels")
            rows16q = _load(base / ".exp/variants2/k_rows16q.py", "rows16q_variant")
            now = getattr(triton_kernels, V_KERNEL)
            token_index = aot.LayoutVariant(has_token_index=True, index_dtype="int64")
            comparisons = [
                ("sm90 BV 8, offsets compiled in, 88 registers", base_kernel, None,
                 ((9, 0), FP32, aot.DEFAULT_LAYOUT, 8, 88), {"constant_offsets": True}),
                ("sm90 BV 16", base_kernel, None, ((9, 0), FP32, aot.DEFAULT_LAYOUT, 16, None), {}),
                ("sm90 BV 16, token index", base_kernel, None, ((9, 0), FP32, token_index, 16, None), {}),
                ("sm90 BV 16, fp16 state", base_kernel, None, ((9, 0), FP16, aot.DEFAULT_LAYOUT, 16, None), {}),
                ("sm75 entry BV 32, 168 registers", base_kernel, None,
                 ((7, 5), FP16, aot.DEFAULT_LAYOUT, 32, 168), {"shape": replace(MTP4, t_max=4)}),
                ("rows of 16 lanes vs rows16q, sm90 BV 16, 152 registers", rows16q, 16,
                 ((9, 0), FP32, aot.DEFAULT_LAYOUT, 16, 152), {}),
                ("rows of 16 lanes vs rows16q, token index", rows16q, 16,
                 ((9, 0), FP32, token_index, 16, 152), {}),
            ]  # fmt: skip
            failed = 0
            for name, reference, row_lanes, launch, extra in comparisons:
                ours = _ptx(now, *launch, row_lanes=row_lanes if row_lanes is not None else 32, **extra)
                theirs = _ptx(reference, *launch, **extra)
                same = ours == theirs
                failed += not same
                print(f"{'same' if same else 'DIFFERENT'}: {name} ({len(ours.splitlines())} PTX lines)")
            return 1 if failed else 0
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(base)], check=True)


if __name__ == "__main__":
    sys.exit(main())
