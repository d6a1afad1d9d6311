"""Ahead-of-time check of the prefetch variants for sm_90 (no GPU): registers, spills, and the prefetches in the PTX.

The 27B TP=2 launch at the last shape (BV 16, one warp, MTP 4, fp32 state, the sm90 entry's switches), as
``caovan.kernels.gdn_spec_decode.aot`` specialises it; the Q/K kernel of a ``pfq`` variant gets the extra
arguments its ``extend_plan`` appends. Usage (repository root, after make_variants.py):

    PYTHONPATH=src python3 docs/bench/experiments/l2-prefetch-initial-state/check_ptx.py [NAME ...]
"""

import importlib.util
import re
import sys
from dataclasses import replace

import triton
from triton.backends.compiler import GPUTarget

import caovan.kernels.gdn_spec_decode.aot as aot
from caovan.kernels.gdn_spec_decode.launch_configs import LAUNCH_CONFIGS

SHAPE = replace(aot.QWEN36_27B_TP2_MTP3, t_max=5)
DTYPES = aot.DtypeCombo("bfloat16", "bfloat16", "float32")
TARGET = GPUTarget("cuda", 90, 32)
cfg = LAUNCH_CONFIGS["sm90"]
for name in sys.argv[1:] or ["pfv", "pfq"]:
    s = importlib.util.spec_from_file_location(f"variant_{name}", f".exp/variants2/k_{name}.py")
    m = importlib.util.module_from_spec(s)
    s.loader.exec_module(m)
    qk_values, v_values = aot._launch_values(SHAPE, DTYPES, aot.DEFAULT_LAYOUT, 16, True, True, False)
    if getattr(m, "VARIANT_QK_KERNEL", False):
        H, HV, K, V = SHAPE.num_k_heads, SHAPE.num_v_heads, SHAPE.head_k_dim, SHAPE.head_v_dim
        lanes = triton.next_power_of_2((HV // H) * (V // 2) * (K // 32))
        qk_values = dict(qk_values, ssm_state_ptr=v_values["ssm_state_ptr"], HV=HV, V=V, PF_LANES=lanes,
                         **{k: v_values[k] for k in ("stride_ssm_block", "stride_ssm_head", "stride_ssm_v",
                                                     "stride_ssm_k")})  # fmt: skip
    launches = (
        (m._caovan_sm75_prepare_qk_conv_spec_decode_kernel, qk_values, {"num_warps": cfg.qk.num_warps}),
        (m._caovan_sm75_fused_v_gdn_spec_decode_kernel, v_values, {"num_warps": 1}),
    )
    for fn, values, options in launches:
        compiled = triton.compile(
            aot._ast_source(fn, values), target=TARGET, options=dict(options, num_stages=1, launch_pdl=True)
        )
        ptx = compiled.asm["ptx"]
        regs, spills = aot.ptxas_resource_usage(ptx, (9, 0))
        prefetches = len(re.findall(r"prefetch\.global\.L2", ptx))
        print(f"{name} {fn.__name__}: {regs} registers, {spills} B spills, {prefetches} prefetch instructions in PTX")
