"""SASS instruction counts and registers of the V/GDN kernel for sm_90 (ahead of time, no GPU): main and with the
slab offsets compiled in, at BV 16 and BV 8 (27B TP=2, MTP 4, bf16 activations, fp32 state, with the sm90 entry's
programmatic dependent launch, staggered start and write-through on; BV 8 with the constant offsets capped at 88
registers as the entry launches it).

Usage (repository root): PYTHONPATH=src python3 docs/bench/experiments/residency-cap/sass_counts.py
The run quoted in README.md: sass-counts.txt.
"""

import os
import re
import subprocess
import tempfile
from collections import Counter
from dataclasses import replace

import triton
from triton.backends.compiler import GPUTarget

import caovan.kernels.gdn_spec_decode.aot as aot

CUOBJDUMP = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "cuobjdump")
SHAPE = replace(aot.QWEN36_27B_TP2_MTP3, t_max=5)
DTYPES = aot.DtypeCombo("bfloat16", "bfloat16", "float32")


def sass_counts(kernel, bv: int, constant_offsets: bool = False, maxnreg: int | None = None) -> str:
    """Registers, spills and SASS instruction counts of one V/GDN kernel (main's or a variant with its
    signature) compiled for sm_90 at the shape and launch values above."""
    _, values = aot._launch_values(SHAPE, DTYPES, aot.DEFAULT_LAYOUT, bv, True, True, constant_offsets)
    options = {"num_warps": 1, "num_stages": 1, "launch_pdl": True}
    if maxnreg is not None:
        options["maxnreg"] = maxnreg
    source = aot._ast_source(kernel, values)
    compiled = triton.compile(source, target=GPUTarget("cuda", 90, 32), options=options)
    ptx = compiled.asm["ptx"]
    registers, spills = aot.ptxas_resource_usage(ptx if isinstance(ptx, str) else ptx.decode(), (9, 0))
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "kernel.cubin")
        with open(path, "wb") as f:
            f.write(compiled.asm["cubin"])
        sass = subprocess.run([CUOBJDUMP, "-sass", path], capture_output=True, text=True, check=True).stdout
    ops = Counter()
    for line in sass.splitlines():
        m = re.match(r"\s+/\*[0-9a-f]{4}\*/\s+(?:@!?U?P\w+\s+)?([A-Z0-9_]+)", line)
        if m:
            ops[m[1]] += 1
    top = ", ".join(f"{op} {n}" for op, n in ops.most_common(12))
    return f"{registers} registers, {spills} B spills, {sum(ops.values())} instructions ({top})"


if __name__ == "__main__":
    for name, bv, constant_offsets, maxnreg in (
        ("main BV16", 16, False, None),
        ("constant offsets BV16", 16, True, None),
        ("main BV8", 8, False, None),
        ("constant offsets BV8, cap 88", 8, True, 88),
    ):
        counts = sass_counts(aot._caovan_sm75_fused_v_gdn_spec_decode_kernel, bv, constant_offsets, maxnreg)
        print(f"{name}: {counts}", flush=True)
