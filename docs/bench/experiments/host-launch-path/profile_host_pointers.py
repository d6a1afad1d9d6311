"""profile_host.py for branch host/pointer-args: adds the two launches with data pointers passed as ints.

Usage (repository root of that branch, PYTHONPATH=src): profile_host_pointers.py OUT
"""

# ruff: noqa: B023 - each lambda is timed (called) within the iteration that made it

import cProfile
import io
import json
import os
import pstats
import sys
import time

import torch

import caovan.kernels.gdn_spec_decode as spec
from caovan.bench.cases import bench_cases, build_inputs
from caovan.kernels.gdn_spec_decode import gdn_spec_decode

OUT = sys.argv[1]
res = {}


def per_call_us(f, n=3000):
    for _ in range(50):
        f()
    torch.cuda.synchronize()
    best = 1e9
    for _ in range(5):
        s = time.perf_counter_ns()
        for _ in range(n):
            f()
        torch.cuda.synchronize()
        best = min(best, (time.perf_counter_ns() - s) / n / 1000)
    return best


def old_all_aligned(args):
    bits = 0
    for t in args:
        if isinstance(t, torch.Tensor):
            bits |= t.data_ptr()
    return bits & 15 == 0


for cid in ("qwen3.6-27b-tp2/B1/mtp1/ssm-fp16", "qwen3.6-27b-tp2/B8/mtp4/ssm-fp32"):
    spec._plans.clear()
    spec._direct.clear()
    case = [c for c in bench_cases("all") if c.id == cid][0]
    inp = build_inputs(case, "cuda")
    args, kwargs = inp.kernel_args()

    def call(args=args, kwargs=kwargs):
        gdn_spec_decode(*args, **kwargs)

    r = {"full_call": per_call_us(call)}
    ((key, plan),) = spec._plans.items()
    (qk_launch, qk_grid, qk_head), (v_launch, v_grid, v_head) = spec._direct[key]
    r["qk_launch_kind"] = str(type(qk_launch))
    dev = args[0].device
    scratch = torch.empty(plan.scratch_shape, dtype=torch.float32, device=dev)
    (mixed_qkv, a, b, A_log, dt_bias, conv_weight, conv_bias, conv_state, ssm_state, qsl, si, nat, out) = args
    ti = kwargs.get("token_index")
    qk_args = (mixed_qkv, conv_weight, conv_bias, conv_state, qsl, si, nat, ti, scratch, *plan.qk_tail)
    v_args = (
        mixed_qkv,
        a,
        b,
        A_log,
        dt_bias,
        conv_weight,
        conv_bias,
        conv_state,
        ssm_state,
        qsl,
        si,
        nat,
        ti,
        scratch,
        out,
        *plan.v_tail,
    )
    stream = spec._current_stream(dev.index)
    r["both_launches_new"] = per_call_us(
        lambda: (qk_launch(*qk_grid, stream, *qk_head, *qk_args), v_launch(*v_grid, stream, *v_head, *v_args))
    )
    ptrs = spec._aligned_pointers(v_args[:15])
    qk_p = (*[ptrs[i] for i in spec._QK_TENSORS], *plan.qk_tail)
    v_p = (*ptrs, *plan.v_tail)
    r["both_launches_ints"] = per_call_us(
        lambda: (qk_launch(*qk_grid, stream, *qk_head, *qk_p), v_launch(*v_grid, stream, *v_head, *v_p))
    )
    r["aligned_pointers"] = per_call_us(lambda: spec._aligned_pointers(v_args[:15]))
    r["all_aligned_old"] = per_call_us(lambda: old_all_aligned(v_args))
    r["device_guard_new"] = per_call_us(lambda: spec._device_guard(dev))
    r["current_device_public"] = per_call_us(torch.cuda.current_device)
    pr = cProfile.Profile()
    pr.enable()
    for _ in range(3000):
        call()
    pr.disable()
    torch.cuda.synchronize()
    s = io.StringIO()
    pstats.Stats(pr, stream=s).sort_stats("tottime").print_stats(14)
    r["cprofile"] = s.getvalue()
    res[cid] = r
    print(cid, {k: (round(v, 2) if isinstance(v, float) else v) for k, v in r.items() if k != "cprofile"}, flush=True)
    print(r["cprofile"][:3500], flush=True)
json.dump(res, open(os.path.join(OUT, "profile-host-pointers-h200.json"), "w"), indent=1)
