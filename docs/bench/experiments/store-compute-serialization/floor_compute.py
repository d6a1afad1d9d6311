"""Does a token step's arithmetic cost the state stream because the stores wait for it, or by its work alone?

``../memory-floor/``'s bare state fan-out (each program loads its slab once and stores it to every token's slot) is
17.2-17.6 µs at the last shape; main's V/GDN kernel alone is 19.5-19.9 µs (``../qk-free-bound/``). Two things
differ in a real token step: the arithmetic itself (issue slots, latency), and that each token's stores store what
that arithmetic produced, so they wait for it (read after write) and the next token's arithmetic overwrites the
registers those stores read (write after read: a store held up by memory back-pressure holds its registers).
This kernel is the fan-out with the same synthetic arithmetic per token in two forms (timing only, the stored
values are not a state):

  mode 0 ``fanout``   the bare fan-out (../memory-floor's, streaming stores)
  mode 1 ``chained``  per token, N dependent FMAs on every slab element, then the slab is stored: stores wait for
                      the arithmetic and the next token's arithmetic overwrites what they read, as in main
  mode 2 ``beside``   the same number of FMAs per thread and token (4N on each of a quarter as many values, so
                      that the program keeps main's one-wave register budget) on values that are never stored
                      (summed into one float per program at the end); the stores store the slab as loaded

``chained`` against ``beside`` at equal N: the cost of the stores waiting for the arithmetic. ``beside`` against
``fanout``: the cost of the work alone. N = 12 is ~770 FMAs per thread and token, about main's 819 SASS
instructions per token step (27B, BV 16, one warp, sm_90); ``sleep`` adds ``nanosleep`` of 1 µs at the start of
the programs of odd value heads (a staggered start without a Q/K kernel).

Usage (repository root, PYTHONPATH=src; no vLLM): floor_compute.py OUT [REGEX] [PASSES]
(default: the 27B B8 fp32 MTP 3/4 cases, 3 passes). Writes OUT/floor-compute-h200.json.
"""

import json
import os
import re
import statistics
import sys
from dataclasses import asdict

import torch
import triton
import triton.language as tl

from caovan.bench.cases import bench_cases, build_inputs
from caovan.bench.kernels import (
    BenchSettings,
    _bound_call,
    _l2_bytes,
    _layers_graph_us,
    layer_copies,
    time_cuda_graph_us,
)
from caovan.bench.roofline import spec_decode_traffic


@triton.jit
def _fanout_compute_kernel(ssm_ptr, qsl_ptr, si_ptr, na_ptr, sink_ptr, s_block, s_head, s_v, s_si, c, d,
                           HV: tl.constexpr, V: tl.constexpr, K: tl.constexpr, BV: tl.constexpr, N: tl.constexpr,
                           MODE: tl.constexpr, SLEEP: tl.constexpr):  # fmt: skip
    i_v = tl.program_id(0)
    i_nh = tl.program_id(1)
    i_n = i_nh // HV
    i_hv = i_nh % HV
    bos = tl.load(qsl_ptr + i_n)
    seq_len = tl.load(qsl_ptr + i_n + 1) - bos
    if seq_len <= 0:
        return
    if SLEEP and (i_hv % 2 == 1):
        tl.inline_asm_elementwise("nanosleep.u32 1000; // $0", "=r", [], dtype=tl.int32, is_pure=False, pack=1)
    si_row = si_ptr + i_n.to(tl.int64) * s_si
    initial = tl.load(si_row + tl.load(na_ptr + i_n) - 1).to(tl.int64)
    if initial <= 0:
        return
    offs = (i_v * BV + tl.arange(0, BV)).to(tl.int64)[:, None] * s_v + tl.arange(0, K)[None, :]
    head = ssm_ptr + i_hv.to(tl.int64) * s_head
    slab = tl.load(head + initial * s_block + offs)
    acc = tl.full([BV, K // 4], 0.5, tl.float32) * d
    for t in range(0, seq_len):
        if MODE == 1:
            for _ in tl.static_range(N):
                slab = slab * c + d
        if MODE == 2:
            for _ in tl.static_range(4 * N):
                acc = acc * c + d
        slot = tl.load(si_row + t).to(tl.int64)
        if slot > 0:
            tl.store(head + slot * s_block + offs, slab, cache_modifier=".cs")
    if MODE == 2:
        tl.store(sink_ptr + i_nh * (V // BV) + i_v, tl.sum(tl.sum(acc, axis=1), axis=0))


def fanout_compute(mode, n, sleep, bv=16):
    sink = {}

    def call(mixed_qkv, a, b, A_log, dt_bias, conv_weight, conv_bias, conv_state, ssm_state, qsl, si, na, out, **kw):
        nseq = qsl.shape[0] - 1
        _, hv, v, k = ssm_state.shape
        key = (nseq, hv, v)
        if key not in sink:
            sink[key] = torch.empty(nseq * hv * triton.cdiv(v, bv), device=ssm_state.device, dtype=torch.float32)
        s_block, s_head, s_v, _ = ssm_state.stride()
        _fanout_compute_kernel[(triton.cdiv(v, bv), nseq * hv)](
            ssm_state, qsl, si, na, sink[key], s_block, s_head, s_v, si.stride(0), 0.999, 1e-3,
            HV=hv, V=v, K=k, BV=bv, N=n, MODE=mode, SLEEP=sleep, num_warps=1, num_stages=1,
        )  # fmt: skip

    return call


RUNS = [
    ("fanout", 0, 0, False),
    ("chained N4", 1, 4, False),
    ("beside N4", 2, 4, False),
    ("chained N12", 1, 12, False),
    ("beside N12", 2, 12, False),
    ("chained N12 sleep", 1, 12, True),
    ("beside N12 sleep", 2, 12, True),
]

if __name__ == "__main__":
    out_dir = sys.argv[1]
    pattern = re.compile(sys.argv[2] if len(sys.argv) > 2 else r"qwen3\.6-27b-tp2/B8/mtp[34]/ssm-fp32")
    passes = int(sys.argv[3]) if len(sys.argv) > 3 else 3
    settings = BenchSettings(warmup=3, eager_iters=0, graph_calls=20, graph_replays=20, graph_repeats=3)
    res = {"settings": asdict(settings), "passes": passes, "runs": [r[0] for r in RUNS], "cases": {}}
    for case in bench_cases("all"):
        if not pattern.search(case.id):
            continue
        inp = build_inputs(case, "cuda")
        n_layers = layer_copies(spec_decode_traffic(inp.plan).total, inp.nbytes(), _l2_bytes("cuda"), settings)
        copies = [inp.clone() for _ in range(n_layers)]
        fns = {label: fanout_compute(mode, n, sleep) for label, mode, n, sleep in RUNS}
        warm = {label: [] for label in fns}
        cold = {}
        for p in range(passes):
            for label, fn in fns.items():
                if p == 0:
                    cold[label] = _layers_graph_us(fn, copies, settings, time_cuda_graph_us)
                warm[label].append(
                    statistics.median(time_cuda_graph_us(_bound_call(fn, inp.clone()), settings) for _ in range(3))
                )
        row = {lab: {"warm": statistics.median(w), "warm_passes": w, "cold": cold[lab]} for lab, w in warm.items()}
        res["cases"][case.id] = {"layers": n_layers, "runs": row}
        print(case.id)
        for lab, r in row.items():
            spread = " ".join(f"{x:.2f}" for x in r["warm_passes"])
            print(f"    {lab:20s} warm {r['warm']:6.2f} [{spread}] cold {r['cold']:6.2f}", flush=True)
        del copies
        json.dump(res, open(os.path.join(out_dir, "floor-compute-h200.json"), "w"), indent=1)
