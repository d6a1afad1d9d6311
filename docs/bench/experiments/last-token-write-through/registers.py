"""Registers and spill bytes of the variants' kernels for sm_90 (Triton ahead of time, no GPU).

The 27B TP=2 launch as ``caovan.kernels.gdn_spec_decode.aot`` specialises it, V/GDN BV 16 with one warp, MTP 3 and
4, fp32 and bf16 state; ``current`` is main's kernel with the sm90 entry's switches on (the write-through
included). A name may carry a register cap: ``rotall:168``. Usage (repository root, after make_variants.py):

    PYTHONPATH=src python3 docs/bench/experiments/last-token-write-through/registers.py [NAME[:MAXNREG] ...]
"""

import importlib.util
import sys
from dataclasses import replace

import caovan.kernels.gdn_spec_decode.aot as aot
from caovan.kernels.gdn_spec_decode.launch_configs import LAUNCH_CONFIGS, VGdnLaunchConfig

MAIN_V, MAIN_QK = aot._caovan_sm75_fused_v_gdn_spec_decode_kernel, aot._caovan_sm75_prepare_qk_conv_spec_decode_kernel
for arg in sys.argv[1:] or ["current"]:
    name, _, cap = arg.partition(":")
    v, qk = MAIN_V, MAIN_QK
    if name != "current":
        spec = importlib.util.spec_from_file_location(f"variant_{name}", f".exp/variants2/k_{name}.py")
        m = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(m)
        v = m._caovan_sm75_fused_v_gdn_spec_decode_kernel
        qk = getattr(m, "_caovan_sm75_prepare_qk_conv_spec_decode_kernel", MAIN_QK)
    aot._caovan_sm75_fused_v_gdn_spec_decode_kernel, aot._caovan_sm75_prepare_qk_conv_spec_decode_kernel = v, qk
    v_gdn = VGdnLaunchConfig(num_warps=1, num_stages=1, BV=16, maxnreg=int(cap) if cap else None)
    for t_max in (4, 5):
        for state in ("float32", "bfloat16"):
            infos = aot.compile_spec_decode_kernels(
                replace(LAUNCH_CONFIGS["sm90"], v_gdn=v_gdn),
                aot.DtypeCombo("bfloat16", "bfloat16", state),
                shape=replace(aot.QWEN36_27B_TP2_MTP3, t_max=t_max),
                capability=(9, 0),
            )
            print(arg, f"T_max={t_max}", f"state={state}", [(i.kernel, i.registers, i.spill_bytes) for i in infos])
