"""Registers and spills of every variant's V/GDN kernel for sm_90 at the last shape (Triton ahead of time, no GPU).

The launch values are main's (``aot._launch_values``) at 27B TP=2, MTP 4, bf16 activations, fp32 state, BV 16 with
one warp, programmatic dependent launch and the last token's write-through on, as ``gdn_spec_decode`` launches that
case on an H200. Usage (repository root, after make_variants.py; other variants of .exp/variants2 by name):

    PYTHONPATH=src python3 docs/bench/experiments/skeleton-to-floor/registers.py [NAME ...]
"""

import importlib.util
import os
import sys

import triton
from triton.backends.compiler import GPUTarget

import caovan.kernels.gdn_spec_decode.aot as aot

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_variants import variants  # noqa: E402

SHAPE = aot.ModelShape(t_max=5)
_, V_VALUES = aot._launch_values(
    SHAPE, aot.DtypeCombo("bfloat16", "bfloat16", "float32"), aot.DEFAULT_LAYOUT, 16, use_pdl=True,
    write_through_last=True,
)  # fmt: skip
for name in sys.argv[1:] or variants():
    spec = importlib.util.spec_from_file_location(f"variant_{name}", f".exp/variants2/k_{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    fn = module._caovan_sm75_fused_v_gdn_spec_decode_kernel
    compiled = triton.compile(
        aot._ast_source(fn, V_VALUES),
        target=GPUTarget("cuda", 90, 32),
        options={"num_warps": 1, "num_stages": 1, "launch_pdl": True},
    )
    ptx = compiled.asm["ptx"]
    registers, spills = aot.ptxas_resource_usage(ptx, (9, 0))
    print(f"{name}: {registers} registers, {spills} B spills, {ptx.count('st.global')} st.global, "
          f"{ptx.count('ld.global')} ld.global, {ptx.count('shfl.sync')} shfl in the PTX")  # fmt: skip
