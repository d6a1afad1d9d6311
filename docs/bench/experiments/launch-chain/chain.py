"""What does the two-kernel chain (Q/K kernel, then the V/GDN kernel as its programmatic dependent) cost?

``../memory-floor/`` times a single kernel that only loads each state slab and stores it to every token slot
(17.2-17.6 us warm at 27B TP=2 B8 MTP 4 fp32), and caovan's V/GDN kernel stripped of everything but its loads and
stores still takes ~19.4 us (``../qk-trigger-and-streaming-stores/``): but that stripped kernel still runs behind
the Q/K kernel, so the ~2 us between them may be the chain rather than the kernel. Here the same fan-out body
(load the slab, store it to every token slot; streaming stores, BV 16, one warp) runs four ways in one process:

- ``alone``: one kernel per call, as the floor;
- ``empty_front``: behind a kernel of the Q/K kernel's grid that only waits for its predecessor and releases its
  dependent, the fan-out launched as its programmatic dependent and waiting for it after the slab load;
- ``qk_front``: behind caovan's real Q/K kernel, through ``gdn_spec_decode`` (the fan-out stands in for the
  V/GDN kernel, same signature, same launch);
- ``caovan``: main's kernels;
- ``caovan_noqk``: main's V/GDN kernel with no Q/K kernel launched at all (it reads a stale scratch; timing only):
  what one kernel doing both jobs could gain at most, before the cost of doing the q/k work in it;
- ``qk_front_nowait``: as ``qk_front``, but the fan-out never waits for the Q/K kernel (what the Q/K kernel costs
  by sharing the GPU, without the wait);
- ``qk_only``: caovan's Q/K kernel alone, each call a programmatic dependent of the one before (its own duration).

If the chain costs about a microsecond, one kernel doing both jobs is worth building; if not, the time is in the
V/GDN kernel's own program. Timing only for the fan-outs (each is checked to write the right slabs).

Usage (repository root, PYTHONPATH=src; no vLLM): chain.py OUT [REGEX [NAME]]   (default: 27B TP=2 B8 fp32 MTP 3/4,
launch-chain-h200.json)
"""

import json
import os
import re
import statistics
import sys

import triton
import triton.language as tl
from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait

import caovan.kernels.gdn_spec_decode as spec
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
from caovan.kernels.gdn_spec_decode import gdn_spec_decode

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "memory-floor"))
from fanout import _fanout_body, fanout_is_right  # noqa: E402

BV = 16


@triton.jit
def _fanout_kernel(ssm_ptr, qsl_ptr, si_ptr, na_ptr, s_block, s_head, s_v, s_si, HV, K: tl.constexpr,
                   BV: tl.constexpr, USE_PDL: tl.constexpr):  # fmt: skip
    _fanout_body(ssm_ptr, qsl_ptr, si_ptr, na_ptr, s_block, s_head, s_v, s_si, tl.program_id(0), tl.program_id(1),
                 HV, K, BV, 0, USE_PDL)  # fmt: skip


@triton.jit
def _empty_front_kernel(dummy_ptr):
    gdc_wait()
    gdc_launch_dependents()


@triton.jit
def _caovan_sm75_fused_v_gdn_spec_decode_kernel(
    mixed_qkv_ptr, a_ptr, b_ptr, A_log_ptr, dt_bias_ptr, conv_weight_ptr, conv_bias_ptr, conv_state_ptr,
    ssm_state_ptr, query_start_loc_ptr, state_indices_ptr, num_accepted_tokens_ptr, token_index_ptr,
    qk_scratch_ptr, out_ptr, stride_x_token, stride_a_token, stride_a_head, stride_b_token, stride_b_head,
    stride_w_dim, stride_w_width, stride_cs_block, stride_cs_dim, stride_cs_pos, stride_ssm_block,
    stride_ssm_head, stride_ssm_v, stride_ssm_k, stride_si_seq, stride_out_token, stride_out_head,
    H: tl.constexpr, HV: tl.constexpr, K: tl.constexpr, V: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr,
    WIDTH: tl.constexpr, BU: tl.constexpr, BT: tl.constexpr, NULL_SLOT_MAX: tl.constexpr,
    HAS_BIAS: tl.constexpr, HAS_TOKEN_INDEX: tl.constexpr, USE_PDL: tl.constexpr, STAGGER: tl.constexpr,
    WAIT: tl.constexpr = True,
):  # fmt: skip
    """The fan-out in the V/GDN kernel's place (same signature; ``qk_front``): no conv, no gating, no output.

    ``WAIT`` (after the V/GDN kernel's arguments, so ``gdn_spec_decode`` leaves it at True): False for
    ``qk_front_nowait`` (``_NoWait``), which never waits for the Q/K kernel."""
    _fanout_body(ssm_state_ptr, query_start_loc_ptr, state_indices_ptr, num_accepted_tokens_ptr, stride_ssm_block,
                 stride_ssm_head, stride_ssm_v, stride_si_seq, tl.program_id(0), tl.program_id(1), HV, K, BV,
                 NULL_SLOT_MAX, USE_PDL and WAIT)  # fmt: skip


class _NoWait:
    """``qk_front_nowait``: the fan-out in the V/GDN kernel's place, launched as the Q/K kernel's dependent, no wait."""

    def __getitem__(self, grid):
        launch = _caovan_sm75_fused_v_gdn_spec_decode_kernel[grid]
        return lambda *args, **kw: launch(*args, False, **kw)

    def warmup(self, *args, **kw):
        return _caovan_sm75_fused_v_gdn_spec_decode_kernel.warmup(*args, False, **kw)


def fanout_call(front: bool):
    def call(mixed_qkv, a, b, A_log, dt_bias, conv_weight, conv_bias, conv_state, ssm_state, qsl, si, na, out, **kw):
        n = qsl.shape[0] - 1
        _, hv, v, k = ssm_state.shape
        s_block, s_head, s_v, _ = ssm_state.stride()
        if front:  # the Q/K kernel's grid (sequences, key heads, q|k)
            _empty_front_kernel[(n, kw["num_k_heads"], 2)](qsl, num_warps=1, num_stages=1, launch_pdl=True)
        _fanout_kernel[(triton.cdiv(v, BV), n * hv)](
            ssm_state, qsl, si, na, s_block, s_head, s_v, si.stride(0), hv, K=k, BV=BV, USE_PDL=front,
            num_warps=1, num_stages=1, launch_pdl=front,
        )  # fmt: skip

    return call


CURRENT = spec._caovan_sm75_fused_v_gdn_spec_decode_kernel
QK_KERNEL = spec._caovan_sm75_prepare_qk_conv_spec_decode_kernel
HOOKS_SET = spec._launch_hooks_set
FIT = spec._fit_value_block


class _NotLaunched:
    """Stands in for the Q/K kernel in ``caovan_noqk``: ``kernel[grid](...)`` launches nothing."""

    def __getitem__(self, grid):
        return lambda *args, **kwargs: None


_active = [None]


def through_gdn_spec_decode(v_kernel, qk_kernel):
    """``gdn_spec_decode`` with these two kernels; the swap (and the cache reset) happens at a way's first call,
    the warm-up outside any capture. Only main's pair keeps the direct launch path (it holds main's kernels)."""
    way = (v_kernel, qk_kernel)

    def call(*a, **k):
        if _active[0] != way:
            _active[0] = way
            spec._caovan_sm75_fused_v_gdn_spec_decode_kernel = v_kernel
            spec._caovan_sm75_prepare_qk_conv_spec_decode_kernel = qk_kernel
            spec._launch_hooks_set = HOOKS_SET if way == (CURRENT, QK_KERNEL) else (lambda: True)
            # no V/GDN kernel to compile for the one-wave rule (``qk_only``): the entry's value block as it is
            spec._fit_value_block = FIT if not isinstance(v_kernel, _NotLaunched) else (lambda dev, bv, *a: bv)
            spec._plans.clear()
            spec._direct.clear()
        return gdn_spec_decode(*a, **k)

    return call


settings = BenchSettings(warmup=3, eager_iters=0, graph_calls=20, graph_replays=20, graph_repeats=3)
pattern = re.compile(sys.argv[2] if len(sys.argv) > 2 else r"qwen3\.6-27b-tp2/B8/mtp[34]/ssm-fp32")
recorded = {c["id"]: c for c in json.load(open("docs/bench/bench-kernels-h200.json"))["cases"]}
res = {"settings": {"graph_calls": 20, "graph_replays": 20, "graph_repeats": 3, "bv": BV, "warps": 1}, "cases": {}}
WAYS = [
    ("alone", fanout_call(False), True),
    ("empty_front", fanout_call(True), True),
    ("qk_front", through_gdn_spec_decode(_caovan_sm75_fused_v_gdn_spec_decode_kernel, QK_KERNEL), True),
    ("caovan", through_gdn_spec_decode(CURRENT, QK_KERNEL), False),
    ("caovan_noqk", through_gdn_spec_decode(CURRENT, _NotLaunched()), False),
    ("qk_front_nowait", through_gdn_spec_decode(_NoWait(), QK_KERNEL), True),
    ("qk_only", through_gdn_spec_decode(_NotLaunched(), QK_KERNEL), False),
]
for case in bench_cases("all"):
    if not pattern.search(case.id):
        continue
    inp = build_inputs(case, "cuda")
    n_layers = layer_copies(spec_decode_traffic(inp.plan).total, inp.nbytes(), _l2_bytes("cuda"), settings)
    copies = [inp.clone() for _ in range(n_layers)]
    rows = {}
    for _ in range(2):  # two interleaved passes, best of each way: the ways share the run's drift
        for label, fn, _check in WAYS:
            warm = statistics.median(time_cuda_graph_us(_bound_call(fn, inp.clone()), settings) for _ in range(3))
            cold = _layers_graph_us(fn, copies, settings, time_cuda_graph_us)
            r = rows.setdefault(label, {"warm_us": warm, "cold_us": cold})
            r["warm_us"], r["cold_us"] = min(r["warm_us"], warm), min(r["cold_us"], cold)
    for label, fn, check in WAYS:
        rows[label]["right"] = fanout_is_right(fn, inp) if check else None  # caovan: checked by the kernel tier
    rec = recorded[case.id]
    res["cases"][case.id] = {
        "target_warm_us": rec["vllm"]["graph_us"] / 2,
        "target_cold_us": rec["vllm"]["graph_layers_us"] / 2,
        "layers": n_layers,
        "runs": rows,
    }
    print(f"{case.id}: targets warm {rec['vllm']['graph_us'] / 2:.2f} cold {rec['vllm']['graph_layers_us'] / 2:.2f}")
    for label, r in rows.items():
        print(f"    {label:12s} warm {r['warm_us']:6.2f} cold {r['cold_us']:6.2f} right {r['right']}", flush=True)
    del copies
spec._caovan_sm75_fused_v_gdn_spec_decode_kernel = CURRENT
spec._caovan_sm75_prepare_qk_conv_spec_decode_kernel = QK_KERNEL
spec._launch_hooks_set = HOOKS_SET
spec._fit_value_block = FIT
json.dump(
    res, open(os.path.join(sys.argv[1], sys.argv[3] if len(sys.argv) > 3 else "launch-chain-h200.json"), "w"), indent=1
)
