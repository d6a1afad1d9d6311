"""Max abs error against the float64 reference of main and of variants, beside vLLM's recorded error (H200).

The timing harness (``../last-token-write-through/ab.py``) only checks the stand-alone tolerance; a variant that
rounds more than main must also keep the rule of the kernel tier: its error no larger than vLLM's. vLLM's errors
are read from ``docs/bench/bench-kernels-h200.json`` (the same inputs: ``build_inputs`` is seeded per case).

Usage (repository root, PYTHONPATH=src; no vLLM):
    python3 docs/bench/experiments/qk-scratch-fp16/errors.py OUT REGEX NAME...
"""

import importlib.util
import json
import os
import re
import sys

import caovan.kernels.gdn_spec_decode as spec
from caovan.bench import accuracy
from caovan.bench.cases import bench_cases, build_inputs
from caovan.kernels.gdn_spec_decode import gdn_spec_decode
from caovan.kernels.gdn_spec_decode.naive import gdn_spec_decode_reference

out_dir, pattern, *names = sys.argv[1:]
MAIN = (spec._caovan_sm75_fused_v_gdn_spec_decode_kernel, spec._caovan_sm75_prepare_qk_conv_spec_decode_kernel)
PLAN = spec._validate_and_plan


def load(name):
    """(V/GDN kernel, Q/K kernel, plan function) of main (``current``) or of .exp/variants2/k_NAME.py."""
    if name == "current":
        return (*MAIN, PLAN)
    s = importlib.util.spec_from_file_location(f"variant_{name}", f".exp/variants2/k_{name}.py")
    m = importlib.util.module_from_spec(s)
    s.loader.exec_module(m)
    qk = m._caovan_sm75_prepare_qk_conv_spec_decode_kernel if getattr(m, "VARIANT_QK_KERNEL", False) else MAIN[1]
    extend = getattr(m, "extend_plan", None)
    plan = PLAN if extend is None else (lambda *a, **k: extend(PLAN(*a, **k), a))
    return m._caovan_sm75_fused_v_gdn_spec_decode_kernel, qk, plan


variants = {name: load(name) for name in names}
recorded = {c["id"]: c for c in json.load(open("docs/bench/bench-kernels-h200.json"))["cases"]}
res = {"cases": {}, "over_vllm": []}
for case in bench_cases("all"):
    if not re.search(pattern, case.id):
        continue
    inp = build_inputs(case, "cuda")
    ref = accuracy.run_reference(gdn_spec_decode_reference, inp)
    vllm = recorded[case.id]["vllm"]["errors"]
    ours = recorded[case.id]["ours"]["errors"]  # main's, as recorded: a check that the inputs are the record's
    row = {
        "vllm": {k: vllm[k] for k in ("out", "ssm_state")},
        "recorded_ours": {k: ours[k] for k in ("out", "ssm_state")},
    }
    for name, (v_kernel, qk_kernel, plan) in variants.items():
        spec._caovan_sm75_fused_v_gdn_spec_decode_kernel, spec._caovan_sm75_prepare_qk_conv_spec_decode_kernel = (
            v_kernel,
            qk_kernel,
        )
        spec._validate_and_plan = plan
        spec._plans.clear()
        spec._direct.clear()
        report = accuracy.measure(gdn_spec_decode, inp, ref)
        row[name] = {"out": report.out, "ssm_state": report.ssm_state}
        for k in ("out", "ssm_state"):
            if row[name][k] > vllm[k]:
                res["over_vllm"].append(f"{case.id}|{name}|{k}")
    res["cases"][case.id] = row
    print(case.id, " ".join(f"{n} out {r['out']:.2e} ssm {r['ssm_state']:.2e}" for n, r in row.items()), flush=True)
spec._caovan_sm75_fused_v_gdn_spec_decode_kernel, spec._caovan_sm75_prepare_qk_conv_spec_decode_kernel = MAIN
spec._validate_and_plan = PLAN
json.dump(res, open(os.path.join(out_dir, "errors-h200.json"), "w"), indent=1)
print("over vLLM's error:", len(res["over_vllm"]), res["over_vllm"][:5])
