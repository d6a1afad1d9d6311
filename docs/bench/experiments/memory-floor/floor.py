"""How fast can the SSM-state traffic of a spec-decode call move at all? (H200; to run on the next device session)

The one shape below 2x vLLM in CUDA-graph time (Qwen3.6-27B TP=2, 8 sequences, MTP 4, fp32 state) needs 95 % of
the copy bandwidth the bench measures with ``torch`` (a device-to-device copy). This kernel does only the state
part of the call, the part that is 99 % of its bytes: per (sequence, value head, value block) program it loads the
initial slab once and stores it to the state slot of every token, in the cache's page-strided layout, with the
same slot indices as the bench's inputs — no conv, no gating, no q/k, no output, no arithmetic. Its best time over
value blocks, warps and store cache modifiers is a floor for any kernel with vLLM's state semantics on this GPU:
if the floor itself is above the 2x target, the target is out of reach at that shape.

Usage (repository root, PYTHONPATH=src; no vLLM): floor.py OUT [REGEX] (default: the 27B B8 fp32 MTP 3/4 cases).
Writes OUT/floor-h200.json: per case the floor for each option, warm and cold L2 (as ``bench kernels``), caovan's
own kernel timed the same way, the recorded targets, and the roofline from a copy bandwidth measured in the run.
"""

import json
import os
import re
import statistics
import sys

import triton
import triton.language as tl
from fanout import fanout_is_right  # this folder (the script's own folder is on sys.path)

from caovan.bench.cases import bench_cases, build_inputs
from caovan.bench.kernels import (
    BenchSettings,
    _bound_call,
    _l2_bytes,
    _layers_graph_us,
    layer_copies,
    measure_copy_bandwidth,
    time_cuda_graph_us,
)
from caovan.bench.roofline import roofline_us, spec_decode_traffic
from caovan.kernels.gdn_spec_decode import gdn_spec_decode


@triton.jit
def _state_fanout_kernel(
    ssm_ptr,
    query_start_loc_ptr,
    state_indices_ptr,
    num_accepted_ptr,
    s_block,
    s_head,
    s_v,
    s_si,
    HV: tl.constexpr,
    V: tl.constexpr,
    K: tl.constexpr,
    BV: tl.constexpr,
    STREAMING: tl.constexpr,
):
    i_v = tl.program_id(0)
    i_nh = tl.program_id(1)
    i_n = i_nh // HV
    i_hv = i_nh % HV
    bos = tl.load(query_start_loc_ptr + i_n)
    seq_len = tl.load(query_start_loc_ptr + i_n + 1) - bos
    if seq_len <= 0:
        return
    si_row = state_indices_ptr + i_n.to(tl.int64) * s_si
    initial = tl.load(si_row + tl.load(num_accepted_ptr + i_n) - 1).to(tl.int64)
    if initial <= 0:
        return
    offs = (i_v * BV + tl.arange(0, BV)).to(tl.int64)[:, None] * s_v + tl.arange(0, K)[None, :]
    head = ssm_ptr + i_hv.to(tl.int64) * s_head
    slab = tl.load(head + initial * s_block + offs)
    for t in range(0, seq_len):
        slot = tl.load(si_row + t).to(tl.int64)
        if slot > 0:
            if STREAMING:
                tl.store(head + slot * s_block + offs, slab, cache_modifier=".cs")
            else:
                tl.store(head + slot * s_block + offs, slab)


def fanout(bv, warps, streaming):
    def call(mixed_qkv, a, b, A_log, dt_bias, conv_weight, conv_bias, conv_state, ssm_state, qsl, si, na, out, **kw):
        n = qsl.shape[0] - 1
        _, hv, v, k = ssm_state.shape
        s_block, s_head, s_v, _ = ssm_state.stride()
        _state_fanout_kernel[(triton.cdiv(v, bv), n * hv)](
            ssm_state, qsl, si, na, s_block, s_head, s_v, si.stride(0), HV=hv, V=v, K=k, BV=bv,
            STREAMING=streaming, num_warps=warps, num_stages=1,
        )  # fmt: skip

    return call


# (BV, warps, streaming stores); at least 4 state values per thread
OPTIONS = [(bv, w, cs) for bv in (8, 16, 32, 64) for w in (1, 2, 4, 8) for cs in (True, False) if bv * 128 >= 128 * w]
settings = BenchSettings(warmup=3, eager_iters=0, graph_calls=20, graph_replays=20, graph_repeats=3)
pattern = re.compile(sys.argv[2] if len(sys.argv) > 2 else r"qwen3\.6-27b-tp2/B8/mtp[34]/ssm-fp32")
recorded = {c["id"]: c for c in json.load(open("docs/bench/bench-kernels-h200.json"))["cases"]}
bandwidth = measure_copy_bandwidth(settings)
res = {"copy_bandwidth_bytes_per_s": bandwidth, "options (bv, warps, streaming)": OPTIONS, "cases": {}}
for case in bench_cases("all"):
    if not pattern.search(case.id):
        continue
    inp = build_inputs(case, "cuda")
    traffic = spec_decode_traffic(inp.plan)
    n_layers = layer_copies(traffic.total, inp.nbytes(), _l2_bytes("cuda"), settings)
    copies = [inp.clone() for _ in range(n_layers)]
    rows = {}
    for label, fn in [("caovan", gdn_spec_decode)] + [(f"floor bv{o[0]} w{o[1]} {'cs' if o[2] else 'wb'}", fanout(*o))
                                                      for o in OPTIONS]:  # fmt: skip
        warm = statistics.median(time_cuda_graph_us(_bound_call(fn, inp.clone()), settings) for _ in range(3))
        cold = _layers_graph_us(fn, copies, settings, time_cuda_graph_us)
        right = True if label == "caovan" else fanout_is_right(fn, inp)  # caovan: checked by the kernel tier
        rows[label] = {"warm_us": warm, "cold_us": cold, "right": right}
    rec = recorded[case.id]
    state_bytes = traffic.ssm_state_read + traffic.ssm_state_write
    res["cases"][case.id] = {
        "traffic_bytes": traffic.total,
        "state_bytes": state_bytes,
        "roofline_us": roofline_us(traffic.total, bandwidth),
        "state_roofline_us": roofline_us(state_bytes, bandwidth),
        "target_warm_us": rec["vllm"]["graph_us"] / 2,
        "target_cold_us": rec["vllm"]["graph_layers_us"] / 2,
        "layers": n_layers,
        "runs": rows,
    }
    floors = {k: r for k, r in rows.items() if k.startswith("floor") and r["right"]}
    best_warm = min((r["warm_us"], k) for k, r in floors.items())
    best_cold = min((r["cold_us"], k) for k, r in floors.items())
    c = res["cases"][case.id]
    print(
        f"{case.id}: targets warm {c['target_warm_us']:.2f} cold {c['target_cold_us']:.2f}; roofline "
        f"{c['roofline_us']:.2f} (state only {c['state_roofline_us']:.2f}); "
        f"caovan warm {rows['caovan']['warm_us']:.2f} cold {rows['caovan']['cold_us']:.2f}; "
        f"floor warm {best_warm[0]:.2f} ({best_warm[1]}) cold {best_cold[0]:.2f} ({best_cold[1]})",
        flush=True,
    )
    del copies
json.dump(res, open(os.path.join(sys.argv[1], "floor-h200.json"), "w"), indent=1)
