"""Registers, FMAs and stores of floor_compute.py's kernel for sm_90 (Triton ahead of time, no GPU), per run.

Specialised with ``caovan.kernels.gdn_spec_decode.aot``'s launch rules (pointers 16-byte aligned, integers
divisible by 16 marked so) on the values a launch at the last shape passes (27B TP=2: HV 24, V = K = 128, fp32
state in an unpadded page, BV 16, one warp, MTP 4). Usage (repository root):

    PYTHONPATH=src python3 docs/bench/experiments/store-compute-serialization/registers.py
"""

import os
import sys

import triton
from triton.backends.compiler import GPUTarget

import caovan.kernels.gdn_spec_decode.aot as aot

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from floor_compute import RUNS, _fanout_compute_kernel  # noqa: E402

HV, V, K, T = 24, 128, 128, 5
LAUNCH = dict(
    ssm_ptr=aot._Ptr("float32"),
    qsl_ptr=aot._Ptr("int32"),
    si_ptr=aot._Ptr("int32"),
    na_ptr=aot._Ptr("int32"),
    sink_ptr=aot._Ptr("float32"),
    s_block=HV * V * K,
    s_head=V * K,
    s_v=K,
    s_si=T,
    c=0.999,
    d=1e-3,
    HV=HV,
    V=V,
    K=K,
    BV=16,
)
for label, mode, n, sleep in RUNS:
    source = aot._ast_source(_fanout_compute_kernel, dict(LAUNCH, N=n, MODE=mode, SLEEP=sleep))
    compiled = triton.compile(source, target=GPUTarget("cuda", 90, 32), options={"num_warps": 1, "num_stages": 1})
    ptx = compiled.asm["ptx"]
    registers, spills = aot.ptxas_resource_usage(ptx, (9, 0))
    print(f"{label}: {registers} registers, {spills} B spills, {ptx.count('fma.rn.f32')} fma, "
          f"{ptx.count('st.global')} st.global in the PTX")  # fmt: skip
