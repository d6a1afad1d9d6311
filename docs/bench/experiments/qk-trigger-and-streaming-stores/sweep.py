"""Variants of the two spec-decode kernels, made by text edits of triton_kernels.py, timed side by side.

CUDA-graph time (median of 3 timings, best of 2 interleaved passes) per variant at the model cases of
`caovan bench kernels`, after an accuracy check of every variant that computes the real result.
Run from the repository root at commit 58db78d (the kernel source before streaming stores; the text
edits assert the code they replace):

    PYTHONPATH=src python3 docs/bench/experiments/qk-trigger-and-streaming-stores/sweep.py OUT VARIANTS [CASE_REGEX]

VARIANTS: comma-separated names made of "_"-joined tokens (see make()); the generated kernels go to OUT.
"""

import importlib.util
import json
import os
import re
import statistics
import sys
import time

import caovan.kernels.gdn_spec_decode as spec
from caovan.bench import accuracy
from caovan.bench.cases import bench_cases, build_inputs
from caovan.bench.kernels import BenchSettings, _bound_call, time_cuda_graph_us
from caovan.kernels.gdn_spec_decode import gdn_spec_decode
from caovan.kernels.gdn_spec_decode.naive import gdn_spec_decode_reference

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from source_edits import QK_METADATA_LOADS, QK_METADATA_LOADS_TOGETHER  # noqa: E402

SRC = open("src/caovan/kernels/gdn_spec_decode/triton_kernels.py").read()
START = """    if USE_PDL:
        # Let the V/GDN kernel start now: everything it does before its gdc_wait() is independent of
        # this kernel (other conv channels, the SSM state), so it overlaps this launch.
        gdc_launch_dependents()
"""
assert START in SRC
META_OLD = QK_METADATA_LOADS
META_NEW = (
    QK_METADATA_LOADS_TOGETHER
    + """    if seq_len <= 0:
        return  # CUDA-graph padding row
    if conv_block <= NULL_SLOT_MAX:
        return  # no conv slot: the V kernel writes zeros for this sequence
"""
)
assert META_OLD in SRC
AFTER_CONV = "    # Per token L2 norm (as FLA"
assert AFTER_CONV in SRC
STORE_SSM = "                state.to(ssm_state_ptr.dtype.element_ty),\n                mask=slab_mask,\n"
assert STORE_SSM in SRC

V_OLD = """    seq_len = eos - bos
    if seq_len <= 0:
        if USE_PDL:
            gdc_wait()  # every exit waits: work after this launch must find the Q/K kernel done too
        return  # CUDA-graph padding row
"""
assert V_OLD in SRC
V_NEW = (
    """    si_row_ptr = state_indices_ptr + i_n.to(tl.int64) * stride_si_seq
    conv_block = tl.load(si_row_ptr).to(tl.int64)
    num_accepted = tl.load(num_accepted_tokens_ptr + i_n).to(tl.int64)
"""
    + V_OLD
)
V_DROP = """    si_row_ptr = state_indices_ptr + i_n.to(tl.int64) * stride_si_seq

    conv_block = tl.load(si_row_ptr).to(tl.int64)
    num_accepted = tl.load(num_accepted_tokens_ptr + i_n).to(tl.int64)
"""
assert V_DROP in SRC


def make(name):
    s = SRC
    if "hoist" in name:
        s = s.replace(META_OLD, META_NEW)
    if name.startswith("conv"):
        s = s.replace(START, "").replace(AFTER_CONV, "    if USE_PDL:\n        gdc_launch_dependents()\n" + AFTER_CONV)
    elif name.startswith("end"):
        s = s.replace(START, "")
    if "vhoist" in name:
        s = s.replace(V_DROP, "").replace(V_OLD, V_NEW)
    tokens = name.split("_")
    if "noqk" in tokens:  # timing only: the Q/K kernel does nothing (V reads stale scratch)
        s = s.replace(START, START + "    if tl.program_id(0) >= 0:\n        return\n")
    LOOP_OLD = (
        "        state *= decay\n"
        "        v -= tl.sum(state * k[None, :], axis=1)\n"
        "        v *= beta\n"
        "        state += v[:, None] * k[None, :]\n"
        "        o = tl.sum(state * q[None, :], axis=1)\n"
        "        tl.store(out_head_ptr + row * stride_out_token, o.to(out_ptr.dtype.element_ty), mask=v_mask)\n"
        "\n"
        "        block_t = tl.sum(tl.where(pick, blocks_all, 0))\n"
        "        if block_t > NULL_SLOT_MAX:\n"
        "            tl.store(\n"
        "                head_base + block_t * stride_ssm_block + slab_offs,\n"
        "                state.to(ssm_state_ptr.dtype.element_ty),\n"
        "                mask=slab_mask,\n"
    )
    assert LOOP_OLD in s, "loop"
    STORE_TAIL = s[s.index(LOOP_OLD) + len(LOOP_OLD) :].split("            )\n", 1)[0] + "            )\n"
    OUT_STORE = "        tl.store(out_head_ptr + row * stride_out_token, o.to(out_ptr.dtype.element_ty), mask=v_mask)\n"
    STATE_STORE = LOOP_OLD.split("\n        block_t", 1)[1]
    STATE_STORE = "        block_t" + STATE_STORE + STORE_TAIL
    if "reorder" in tokens:
        s = s.replace(
            LOOP_OLD + STORE_TAIL,
            "        state *= decay\n"
            "        v -= tl.sum(state * k[None, :], axis=1)\n"
            "        v *= beta\n"
            "        state += v[:, None] * k[None, :]\n"
            + STATE_STORE
            + "        o = tl.sum(state * q[None, :], axis=1)\n"
            + OUT_STORE,
        )
    if "fold" in tokens:
        s = s.replace(
            LOOP_OLD + STORE_TAIL,
            "        sk = tl.sum(state * k[None, :], axis=1)\n"
            "        sq = tl.sum(state * q[None, :], axis=1)\n"
            "        v = (v - decay * sk) * beta\n"
            "        state = state * decay + v[:, None] * k[None, :]\n"
            + STATE_STORE
            + "        o = decay * sq + v * tl.sum(k * q)\n"
            + OUT_STORE,
        )
    if "nomath" in tokens:  # timing only: the token loop only stores
        for line in (
            "        state *= decay\n",
            "        v -= tl.sum(state * k[None, :], axis=1)\n",
            "        v *= beta\n",
            "        state += v[:, None] * k[None, :]\n",
        ):
            assert line in s
            s = s.replace(line, "")
        s = s.replace(
            "        o = tl.sum(state * q[None, :], axis=1)\n", "        o = v + decay + beta + q.sum() + k.sum()\n"
        )
    if "ef" in tokens:
        old = "state = tl.load(head_base + initial_block * stride_ssm_block + slab_offs, mask=slab_mask, other=0.0)"
        assert old in s
        s = s.replace(old, old[:-1] + ', eviction_policy="evict_first")')
    if "cs" in tokens:
        s = s.replace(STORE_SSM, STORE_SSM + '                cache_modifier=".cs",\n')
    path = os.path.join(sys.argv[1], f"gen_{name}.py")
    open(path, "w").write(s)
    m = importlib.util.spec_from_file_location(f"gen_{name}", path)
    mod = importlib.util.module_from_spec(m)
    m.loader.exec_module(mod)
    return mod


out = sys.argv[1]
names = (
    sys.argv[2].split(",")
    if len(sys.argv) > 2
    else ["start", "start_hoist", "conv_hoist", "end_hoist", "conv_hoist_vhoist", "conv_hoist_vhoist_cs"]
)
filt = re.compile(sys.argv[3] if len(sys.argv) > 3 else ".")
VARIANTS = {n: make(n) for n in names}
recorded = json.load(open("docs/bench/bench-kernels-h200.json"))["cases"]
vllm_graph = {c["id"]: c["vllm"]["graph_us"] for c in recorded}
settings = BenchSettings(warmup=3, eager_iters=0, graph_calls=20, graph_replays=20)
res = {"cases": {}, "problems": {}}
t0 = time.time()
for case in bench_cases("model"):
    if not filt.search(case.id):
        continue
    inp = build_inputs(case, "cuda")
    ref = accuracy.run_reference(gdn_spec_decode_reference, inp)
    row = {}
    for rep in range(2):  # interleaved twice: drift shows as a difference between the two passes
        for vname, mod in VARIANTS.items():
            spec._caovan_sm75_fused_v_gdn_spec_decode_kernel = mod._caovan_sm75_fused_v_gdn_spec_decode_kernel
            spec._caovan_sm75_prepare_qk_conv_spec_decode_kernel = mod._caovan_sm75_prepare_qk_conv_spec_decode_kernel
            spec._plans.clear()
            spec._direct.clear()
            if rep == 0 and not ("noqk" in vname or "nomath" in vname):
                problems = accuracy.check_standalone(case, accuracy.measure(gdn_spec_decode, inp, ref))
                if problems:
                    res["problems"][f"{case.id}|{vname}"] = problems
            call = _bound_call(gdn_spec_decode, inp.clone())
            t = statistics.median(time_cuda_graph_us(call, settings) for _ in range(3))
            row[vname] = min(row.get(vname, 1e9), t)
    res["cases"][case.id] = row
    print(
        f"{case.id:38s} tgt {vllm_graph[case.id] / 2:5.1f} " + " ".join(f"{k} {v:5.2f}" for k, v in row.items()),
        f"[{time.time() - t0:.0f}s]",
        flush=True,
    )
for k in names:
    ids = list(res["cases"])
    ok = sum(vllm_graph[c] / res["cases"][c][k] >= 2.0 for c in ids)
    gm = statistics.geometric_mean(res["cases"][c][k] for c in ids)
    print(f"{k:20s} n={len(ids)} geomean {gm:6.3f} us  >=2x in {ok}/{len(ids)}")
print("problems:", len(res["problems"]), list(res["problems"].items())[:3])
json.dump(res, open(os.path.join(out, "qkt-sweep.json"), "w"), indent=1)
