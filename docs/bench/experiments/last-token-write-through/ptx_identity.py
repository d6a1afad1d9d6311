"""Is main's V/GDN kernel, as compiled, exactly what the H200 runs of this folder timed? (no GPU needed)

The write-through was measured as the variant ``.exp/variants2/k_wtlast.py`` (``make_variants.py``, from the kernel
of commit 168d9a5) against that commit's kernel (``current``), then landed behind a constexpr switch that the
launch entry turns on from 48 MiB of state writes. This compiles main's kernel for sm_90 (Triton ahead of time, the
signature of a 27B TP=2 launch with BV 16, one warp, PDL, MTP 3 and 4, fp32 and bf16 state) with the switch off and
on, and compares the PTX (kernel name, comments and debug lines removed) with the two kernels that were timed.

Usage (repository root, after make_variants.py; git must reach commit 168d9a5):
    PYTHONPATH=src python3 docs/bench/experiments/last-token-write-through/ptx_identity.py
"""

import importlib.util
import re
import subprocess
import sys
import tempfile
from dataclasses import replace

import triton
from triton.backends.compiler import GPUTarget

import caovan.kernels.gdn_spec_decode.aot as aot

TIMED_MAIN = "168d9a5"  # the kernel of the `current` runs in ab1/ab2/ab3-h200.json


def module(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    m = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(m)
    return m


def ptx(fn, values):
    options = {"num_warps": 1, "num_stages": 1, "launch_pdl": True}
    text = triton.compile(aot._ast_source(fn, values), target=GPUTarget("cuda", 90, 32), options=options).asm["ptx"]
    text = re.sub(r"_caovan_sm75_fused_v_gdn_spec_decode_kernel\w*", "K", text)
    text = re.sub(r"^\s*(//.*|\.loc.*|\.file.*)$", "", text, flags=re.M)
    text = re.sub(r"\.section\s+\.debug_\w+\s*\{.*?\n\s*\}", "", text, flags=re.S)
    return "\n".join(line for line in text.splitlines() if line.strip())


with tempfile.TemporaryDirectory() as tmp:
    old_path = f"{tmp}/k_main_{TIMED_MAIN}.py"
    with open(old_path, "w") as f:
        f.write(
            subprocess.check_output(
                ["git", "show", f"{TIMED_MAIN}:src/caovan/kernels/gdn_spec_decode/triton_kernels.py"], text=True
            )
        )
    timed_main = module(old_path, "timed_main")._caovan_sm75_fused_v_gdn_spec_decode_kernel
timed_wt = module(".exp/variants2/k_wtlast.py", "timed_wtlast")._caovan_sm75_fused_v_gdn_spec_decode_kernel
ours = aot._caovan_sm75_fused_v_gdn_spec_decode_kernel
same = True
for state in ("float32", "bfloat16"):
    for t_max in (4, 5):
        shape = replace(aot.QWEN36_27B_TP2_MTP3, t_max=t_max)
        _, values = aot._launch_values(
            shape, aot.DtypeCombo("bfloat16", "bfloat16", state), aot.DEFAULT_LAYOUT, 16, True
        )
        timed_values = {k: v for k, v in values.items() if k != "WRITE_THROUGH_LAST"}
        off = ptx(ours, dict(values, WRITE_THROUGH_LAST=False)) == ptx(timed_main, timed_values)
        on = ptx(ours, dict(values, WRITE_THROUGH_LAST=True)) == ptx(timed_wt, timed_values)
        same &= off and on
        print(f"state {state}, T_max {t_max}: switch off == {TIMED_MAIN}'s kernel: {off}; on == wtlast: {on}")
sys.exit(0 if same else 1)
