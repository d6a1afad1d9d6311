"""Per-program timeline of the fan-out alone, behind an empty front kernel and behind caovan's real Q/K kernel (H200).

``launch-chain2-h200.json`` finds that the real Q/K kernel in front of the fan-out costs 0.5-1.1 us even when the
fan-out never waits for it (``qk_front_nowait`` against ``empty_front``). Is that a later start of the fan-out's
programs (launch, residency) or slower programs once started (memory)? The kernels of ``.exp/variants2/
k_timeline.py`` (written by ``make_timeline_kernels.py``) record the GPU's global timer at each program's start
and end and its SM id. 20 calls are captured in a CUDA graph and the graph replayed three times; the times of the
last call are kept, in ns from the first program start of that call (front kernel included).

Ways: ``alone`` (the fan-out, plain launches), ``empty_front_nowait`` and ``qk_front_nowait`` (the fan-out a
programmatic dependent of the empty front kernel / of main's Q/K kernel launched by ``gdn_spec_decode``, never
waiting for it), and ``caovan`` (main's two kernels with timers, BV 16 as main picks at this shape; the timed V/GDN
kernel is launched with ``maxnreg=168``: uncapped, the timer writes after its token loop made the compiler take 194
registers, 166 with the cap and no spills, main's 12 programs per SM). Timing only.

Usage (repository root, PYTHONPATH=src; no vLLM): timeline.py OUT [--cases REGEX] [--kernels NAME]
[--v-maxnreg N] [--json FILE]; defaults: 27B TP=2 B8 MTP 4 fp32, .exp/variants2/k_timeline.py, 168,
timeline-h200.json. ``--kernels`` takes another module written by ``make_timeline_kernels.py`` (e.g. from a
stagger variant); ``--v-maxnreg`` caps the timed V/GDN kernel (152: the balanced grid of ``../qk-beside-one-wave/``).
"""

import argparse
import importlib.util
import json
import os
import re
import sys

import torch
import triton

import caovan.kernels.gdn_spec_decode as spec
from caovan.bench.cases import bench_cases, build_inputs
from caovan.bench.kernels import BenchSettings, time_cuda_graph_us
from caovan.kernels.gdn_spec_decode import gdn_spec_decode

BV = 16
REPLAYS = BenchSettings(graph_calls=20, graph_replays=2)  # time_cuda_graph_us replays once more first
cli = argparse.ArgumentParser()
cli.add_argument("out")
cli.add_argument("--cases", default=r"qwen3\.6-27b-tp2/B8/mtp4/ssm-fp32")
cli.add_argument("--kernels", default="timeline")
cli.add_argument("--v-maxnreg", type=int, default=168)
cli.add_argument("--json", default="timeline-h200.json")
opts = cli.parse_args()
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "memory-floor"))  # its fan-out
_s = importlib.util.spec_from_file_location(f"k_{opts.kernels}", f".exp/variants2/k_{opts.kernels}.py")
m = importlib.util.module_from_spec(_s)
_s.loader.exec_module(m)


def fanout(inp, times, pdl):
    ssm, qsl, si, na = inp.ssm_state, inp.query_start_loc, inp.state_indices, inp.num_accepted_tokens
    _, hv, v, k = ssm.shape
    s_block, s_head, s_v, _ = ssm.stride()
    m._timed_fanout_kernel[(triton.cdiv(v, BV), (qsl.shape[0] - 1) * hv)](
        ssm, qsl, si, na, times, s_block, s_head, s_v, si.stride(0), hv, K=k, BV=BV,
        num_warps=1, num_stages=1, launch_pdl=pdl,
    )  # fmt: skip


class _TimedQK:
    """Main's Q/K kernel with timers, as ``gdn_spec_decode`` launches it (its times buffer appended)."""

    def __init__(self, times):
        self.times = times

    def __getitem__(self, grid):
        return lambda *args, **kw: m._caovan_sm75_prepare_qk_conv_spec_decode_kernel[grid](*args, self.times, **kw)


class _TimedV:
    """Main's V/GDN kernel with timers, as ``gdn_spec_decode`` launches it (its times buffer and the cap appended)."""

    def __init__(self, times):
        self.times = times

    def __getitem__(self, grid):
        kernel = m._caovan_sm75_fused_v_gdn_spec_decode_kernel[grid]
        return lambda *args, **kw: kernel(*args, self.times, maxnreg=opts.v_maxnreg, **kw)


class _FanoutInVPlace:
    """The timed fan-out where ``gdn_spec_decode`` launches the V/GDN kernel (same launch options, no wait)."""

    def __init__(self, inp, times):
        self.inp, self.times = inp, times

    def __getitem__(self, grid):
        return lambda *args, **kw: fanout(self.inp, self.times, kw["launch_pdl"])


def ways(inp, h, buffers):
    args, kwargs = inp.kernel_args()
    front, fan = buffers["front"], buffers["fanout"]

    def alone():
        fanout(inp, fan, False)

    def empty_front_nowait():
        m._timed_empty_front_kernel[(inp.query_start_loc.shape[0] - 1, h, 2)](
            front, num_warps=1, num_stages=1, launch_pdl=True
        )
        fanout(inp, fan, True)

    def through_gdn_spec_decode():
        gdn_spec_decode(*args, **kwargs)

    return {
        "alone": alone,
        "empty_front_nowait": empty_front_nowait,
        "qk_front_nowait": through_gdn_spec_decode,
        "caovan": through_gdn_spec_decode,
    }


def summary(t):  # t: (programs, 3) int64 tensor of (start, end, sm), ns from the call's first start
    start, end = t[:, 0].double(), t[:, 1].double()
    q = torch.tensor([0.0, 0.5, 0.9, 1.0], dtype=torch.float64)
    per_sm_end = {}
    for e, sm in zip(end.tolist(), t[:, 2].tolist(), strict=True):
        per_sm_end[sm] = max(per_sm_end.get(sm, 0.0), e)
    sm_ends = torch.tensor(list(per_sm_end.values()), dtype=torch.float64)
    return {
        "programs": t.shape[0],
        "start_ns_min_p50_p90_max": torch.quantile(start, q).tolist(),
        "end_ns_min_p50_p90_max": torch.quantile(end, q).tolist(),
        "duration_ns_p50_p90_max": torch.quantile(end - start, q[1:]).tolist(),
        "sms": len(per_sm_end),
        "per_sm_last_end_ns_min_mean_max": [sm_ends.min().item(), sm_ends.mean().item(), sm_ends.max().item()],
    }


pattern = re.compile(opts.cases)
res = {
    "graph_calls": REPLAYS.graph_calls,
    "replays": 1 + REPLAYS.graph_replays,
    "bv": BV,
    "kernels": opts.kernels,
    "v_maxnreg": opts.v_maxnreg,
    "cases": {},
}
for case in bench_cases("all"):
    if not pattern.search(case.id):
        continue
    inp = build_inputs(case, "cuda")
    h = case.head_config.num_k_heads
    n = inp.query_start_loc.shape[0] - 1
    _, hv, v, _k = inp.ssm_state.shape
    n_fan = triton.cdiv(v, BV) * n * hv
    rows = {}
    for label, call in ways(inp, h, buffers := {
        "front": torch.zeros(n * h * 2, 3, dtype=torch.int64, device="cuda"),
        "fanout": torch.zeros(n_fan, 3, dtype=torch.int64, device="cuda"),
        "v_gdn": torch.zeros(n_fan, 3, dtype=torch.int64, device="cuda"),
    }).items():  # fmt: skip
        qk_times = torch.zeros(n * h * 2, 3, dtype=torch.int64, device="cuda")
        spec._caovan_sm75_prepare_qk_conv_spec_decode_kernel = _TimedQK(qk_times)
        spec._caovan_sm75_fused_v_gdn_spec_decode_kernel = (
            _TimedV(buffers["v_gdn"]) if label == "caovan" else _FanoutInVPlace(inp, buffers["fanout"])
        )
        spec._launch_hooks_set = lambda: True
        spec._fit_value_block = lambda device, preferred, *a: BV
        spec._plans.clear()
        spec._direct.clear()
        for b in buffers.values():
            b.zero_()
        # 3 warm-up calls, 20 captured, 1 + 2 replays; the buffers then hold the last call's times
        time_cuda_graph_us(call, REPLAYS)
        front = qk_times if label in ("qk_front_nowait", "caovan") else buffers["front"]
        parts = {"v_gdn" if label == "caovan" else "fanout": buffers["v_gdn" if label == "caovan" else "fanout"].cpu()}
        if label != "alone":
            parts["front"] = front.cpu()
        t0 = min(int(p[:, 0].min()) for p in parts.values())
        rows[label] = {}
        for name, p in parts.items():
            rel = p.clone()
            rel[:, :2] -= t0
            rows[label][name] = {"summary": summary(rel), "times": rel.tolist()}
        print(f"{case.id} {label}", flush=True)
        for name in parts:
            s = rows[label][name]["summary"]
            print(f"    {name:7s} start {[round(x) for x in s['start_ns_min_p50_p90_max']]} end "
                  f"{[round(x) for x in s['end_ns_min_p50_p90_max']]} per-SM last end "
                  f"{[round(x) for x in s['per_sm_last_end_ns_min_mean_max']]}", flush=True)  # fmt: skip
    res["cases"][case.id] = rows
json.dump(res, open(os.path.join(opts.out, opts.json), "w"))
