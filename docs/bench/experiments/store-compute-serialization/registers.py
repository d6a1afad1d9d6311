"""Registers, FMAs and stores of floor_compute.py's kernel for sm_90 (Triton ahead of time, no GPU), per run.

Specialised as a launch at the last shape would be (27B TP=2: HV 24, V = K = 128, BV 16, one warp; pointers and
the page, head and row strides divisible by 16). Usage (repository root):

    PYTHONPATH=src python3 docs/bench/experiments/store-compute-serialization/registers.py
"""

import os
import sys

import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

import caovan.kernels.gdn_spec_decode.aot as aot

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from floor_compute import RUNS, _fanout_compute_kernel  # noqa: E402

POINTERS = ("ssm_ptr", "qsl_ptr", "si_ptr", "na_ptr", "sink_ptr")
SIGNATURE = {
    **{p: "*i32" for p in POINTERS},
    "ssm_ptr": "*fp32",
    "sink_ptr": "*fp32",
    **{s: "i32" for s in ("s_block", "s_head", "s_v", "s_si")},
    "c": "fp32",
    "d": "fp32",
    **{c: "constexpr" for c in ("HV", "V", "K", "BV", "N", "MODE", "SLEEP")},
}
names = _fanout_compute_kernel.arg_names
attrs = {(names.index(a),): [["tt.divisibility", 16]] for a in (*POINTERS, "s_block", "s_head", "s_v")}
for label, mode, n, sleep in RUNS:
    values = dict(HV=24, V=128, K=128, BV=16, N=n, MODE=mode, SLEEP=sleep)
    constexprs = {(names.index(a),): v for a, v in values.items()}
    source = ASTSource(_fanout_compute_kernel, dict(SIGNATURE), constexprs=constexprs, attrs=attrs)
    compiled = triton.compile(source, target=GPUTarget("cuda", 90, 32), options={"num_warps": 1, "num_stages": 1})
    ptx = compiled.asm["ptx"]
    registers, spills = aot.ptxas_resource_usage(ptx, (9, 0))
    print(f"{label}: {registers} registers, {spills} B spills, {ptx.count('fma.rn.f32')} fma, "
          f"{ptx.count('st.global')} st.global in the PTX")  # fmt: skip
