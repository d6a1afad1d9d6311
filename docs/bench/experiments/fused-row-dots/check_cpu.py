"""CPU check of a split-row V/GDN kernel variant (.exp/variants2/k_NAME.py) under the Triton interpreter: the
kernel tier's interpreter scenarios with the slab's rows split (``rows16_*``, ``rows8_*`` in
tests/kernels/gdn_interpreter_cases.py: edge cases, layouts, K 48-128, BV 2) against the float64 oracle, with the
variant's V/GDN kernel in place of main's. Exit 1 if any fails.

Usage (repository root):
    TRITON_INTERPRET=1 PYTHONPATH=src python3 docs/bench/experiments/fused-row-dots/check_cpu.py NAME
"""

import importlib.util
import os
import sys

assert os.environ.get("TRITON_INTERPRET") == "1", "run under the Triton interpreter (TRITON_INTERPRET=1)"

import caovan.kernels.gdn_spec_decode as spec  # noqa: E402


def _module(name, path):
    s = importlib.util.spec_from_file_location(name, path)
    m = importlib.util.module_from_spec(s)
    sys.modules[name] = m
    s.loader.exec_module(m)
    return m


variant = _module("variant", f".exp/variants2/k_{sys.argv[1]}.py")
spec._caovan_sm75_fused_v_gdn_spec_decode_kernel = variant._caovan_sm75_fused_v_gdn_spec_decode_kernel
cases = _module("interpreter_cases", "tests/kernels/gdn_interpreter_cases.py")
failed = 0
for scenario in cases.SCENARIOS:
    if scenario.row_lanes == 32 or scenario.vllm_rule:
        continue
    result = cases.run_scenario(scenario)
    failed += not result["ok"]
    print(f"{'ok  ' if result['ok'] else 'FAIL'} {scenario.id} {result.get('detail', '')}", flush=True)
print(f"{failed} failed")
sys.exit(1 if failed else 0)
