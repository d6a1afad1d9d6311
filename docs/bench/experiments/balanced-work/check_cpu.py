"""CPU check of a V/GDN kernel variant (.exp/variants2/k_NAME.py) under the Triton interpreter (no GPU): the
small bench cases and the small kernel-tier edge cases (null and padded slots, varlen, every accepted count)
against the float64 reference, two calls each.

Usage (repository root, after the make_*_variant.py that writes the variant):
TRITON_INTERPRET=1 PYTHONPATH=src check_cpu.py [NAME]
"""

import importlib.util
import os
import sys

assert os.environ.get("TRITON_INTERPRET") == "1", "run under the Triton interpreter (TRITON_INTERPRET=1)"

import caovan.kernels.gdn_spec_decode as spec  # noqa: E402
from caovan.bench import accuracy  # noqa: E402
from caovan.bench.cases import KERNEL_EDGE_CASES, bench_cases, build_inputs  # noqa: E402
from caovan.kernels.gdn_spec_decode import gdn_spec_decode  # noqa: E402
from caovan.kernels.gdn_spec_decode.naive import gdn_spec_decode_reference  # noqa: E402

name = sys.argv[1] if len(sys.argv) > 1 else "persist12"
s = importlib.util.spec_from_file_location(f"variant_{name}", f".exp/variants2/k_{name}.py")
m = importlib.util.module_from_spec(s)
s.loader.exec_module(m)
spec._caovan_sm75_fused_v_gdn_spec_decode_kernel = m._caovan_sm75_fused_v_gdn_spec_decode_kernel
spec._launch_hooks_set = lambda: True  # no direct launch: the variant launches another grid
if getattr(m, "NO_QK_KERNEL", False):  # one kernel does the whole call: main's Q/K kernel stays off

    class _NotLaunched:
        def __getitem__(self, grid):
            return lambda *args, **kwargs: None

    spec._caovan_sm75_prepare_qk_conv_spec_decode_kernel = _NotLaunched()
if getattr(m, "VARIANT_QK_KERNEL", False):  # the variant changes the Q/K kernel too
    spec._caovan_sm75_prepare_qk_conv_spec_decode_kernel = m._caovan_sm75_prepare_qk_conv_spec_decode_kernel

failed = 0
cases = bench_cases("small") + [c for c in KERNEL_EDGE_CASES if c.head.startswith("small")]
for case in cases:
    inp = build_inputs(case, "cpu")
    ref = accuracy.run_reference(gdn_spec_decode_reference, inp)
    for call in range(2):  # the second call finds the counters reset by the first
        problems = accuracy.check_standalone(case, accuracy.measure(gdn_spec_decode, inp, ref))
        failed += bool(problems)
        print(f"{case.id} call {call}: {'ok' if not problems else problems}", flush=True)
counters = list(getattr(m, "_counters", {}).values())  # persistent variants: their work counters
print("counters after the calls:", [c.tolist() for c in counters])
print(f"{len(cases)} cases x 2 calls, {failed} failed")
sys.exit(1 if failed or any(any(c.tolist()) for c in counters) else 0)  # every counter back at 0
