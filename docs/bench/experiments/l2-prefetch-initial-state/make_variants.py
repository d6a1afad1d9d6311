"""Writes .exp/variants2/k_NAME.py: the kernels of main with the initial SSM state prefetched into L2 early.

Idea: from the end of one call to the first state loads of the next, DRAM has nothing to do (the Q/K kernel's
chain of small loads, the V/GDN programs' metadata and V conv); the initial state, 12 MiB at the last shape, is
only asked for after that. An L2 prefetch (``prefetch.global.L2``: no register written, nothing waits on it)
issued as soon as a program knows the initial slot starts that traffic earlier, and the loads that follow find
the lines in L2 or already on their way. Tokens (a variant is a set of them):

  pfv    V/GDN kernel: every program prefetches its own slab right after loading the initial slot, before its V
         conv and (for the staggered half) before its wait for the Q/K kernel.
  pfq    Q/K kernel: each program (sequence, key head, q or k) prefetches half of the value rows of the initial
         state of the HV/H value heads of its key head, after its conv (whose loads it must not delay: the warp
         issues in order and the prefetch address needs one more dependent load). Needs the SSM state in the Q/K
         kernel: the module's ``extend_plan`` appends it, with its strides, to the Q/K launch (``ab.py``).
  el     the prefetches with the ``L2::evict_last`` policy, so that the streaming state stores passing through L2
         meanwhile do not push the prefetched lines out first.
  late   (second run) the placement fixed so that no prefetch adds a latency to its kernel's chain: in the first
         run the V/GDN prefetch waited for the initial slot before the V conv's loads were issued, and the Q/K
         kernel loaded the initial slot only after its conv. With ``late`` the V/GDN prefetch comes after the V
         conv (for the staggered half, still before its wait; the other half loads the slab right after it
         anyway), and the Q/K kernel loads the initial slot beside its conv slot, before the conv.

The prefetches sample the slab every 32 elements along K: every 128-byte line of a (v, k)-layout slab of fp32,
fp16 or bf16 state (the bench's layout), each fp16 line twice. Inline PTX: GPU only (not under the interpreter).

Usage (repository root): python3 docs/bench/experiments/l2-prefetch-initial-state/make_variants.py
"""

import os
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from source_edits import sub  # noqa: E402

# The kernels the variants were made from and timed against (`current` in the JSONs of this folder).
BASE_COMMIT = "436ed67"
MAIN = subprocess.check_output(
    ["git", "show", f"{BASE_COMMIT}:src/caovan/kernels/gdn_spec_decode/triton_kernels.py"], text=True
)

PREFETCH_HELPER = '''

@triton.jit
def _prefetch_l2(ptrs, mask, EVICT_LAST: tl.constexpr):
    """One L2 prefetch per element of ``ptrs`` where ``mask`` (a hint: nothing waits for it, nothing is written)."""
    args = [ptrs.to(tl.int64, bitcast=True), mask.to(tl.int32)]
    if EVICT_LAST:
        tl.inline_asm_elementwise(
            "{ .reg .pred p; setp.ne.s32 p, $2, 0; @p prefetch.global.L2::evict_last [$1]; mov.u32 $0, 0; }",
            "=r,l,r", args, dtype=tl.int32, is_pure=False, pack=1,
        )  # fmt: skip
    else:
        tl.inline_asm_elementwise(
            "{ .reg .pred p; setp.ne.s32 p, $2, 0; @p prefetch.global.L2 [$1]; mov.u32 $0, 0; }",
            "=r,l,r", args, dtype=tl.int32, is_pure=False, pack=1,
        )  # fmt: skip
'''

HELPER_ANCHOR = """

@triton.jit
def _store_zero_rows("""

V_OLD = """    initial_block = tl.load(si_row_ptr + (num_accepted - 1)).to(tl.int64)
"""
V_NEW = """    initial_block = tl.load(si_row_ptr + (num_accepted - 1)).to(tl.int64)
    pf_k = tl.arange(0, BK // 32) * 32
    pf_ptrs = (
        ssm_state_ptr
        + i_hv.to(tl.int64) * stride_ssm_head
        + initial_block * stride_ssm_block
        + v_offs.to(tl.int64)[:, None] * stride_ssm_v
        + pf_k.to(tl.int64)[None, :] * stride_ssm_k
    )
    _prefetch_l2(pf_ptrs, v_mask[:, None] & (pf_k < K)[None, :] & (initial_block > NULL_SLOT_MAX), EVICT_LAST)
"""

QK_SIG_OLD = """    USE_PDL: tl.constexpr,
):
    if USE_PDL:
        # This launch is itself"""
QK_SIG_NEW = """    USE_PDL: tl.constexpr,
    ssm_state_ptr,
    stride_ssm_block,
    stride_ssm_head,
    stride_ssm_v,
    stride_ssm_k,
    HV: tl.constexpr,
    V: tl.constexpr,
    PF_LANES: tl.constexpr,
):
    if USE_PDL:
        # This launch is itself"""

QK_CONV_OLD = """    # Per token L2 norm (as FLA: x * rsqrt(sum x^2 + 1e-6)); q also times K**-0.5.
"""
QK_INITIAL = """    initial_block = tl.load(
        state_indices_ptr + i_n.to(tl.int64) * stride_si_seq + window_offset
    ).to(tl.int64)
"""
QK_PREFETCH = """    # lane: (value head of the key head, value row of this half, k every 32), R * V/2 * K/32 used
    R: tl.constexpr = HV // H
    lane = tl.arange(0, PF_LANES)
    pf_head = i_h * R + lane // ((V // 2) * (K // 32))
    pf_row = half * (V // 2) + (lane // (K // 32)) % (V // 2)
    pf_k = (lane % (K // 32)) * 32
    pf_ptrs = (
        ssm_state_ptr
        + initial_block * stride_ssm_block
        + pf_head.to(tl.int64) * stride_ssm_head
        + pf_row.to(tl.int64) * stride_ssm_v
        + pf_k.to(tl.int64) * stride_ssm_k
    )
    _prefetch_l2(pf_ptrs, (lane < R * (V // 2) * (K // 32)) & (initial_block > NULL_SLOT_MAX), EVICT_LAST)
"""

EXTEND_PLAN = '''

VARIANT_QK_KERNEL = True
NO_DIRECT_LAUNCH = True  # the Q/K launch carries the SSM state in its tail: Triton's own dispatch only


def extend_plan(plan, args):
    """Main's plan with the SSM state and its (v, k) strides appended to the Q/K kernel's tail (ab.py)."""
    import dataclasses

    import triton

    ssm_state, v_dim, layout = args[8], args[15], args[16]
    assert layout == "vk", "the prefetch of this variant samples a (v, k) slab"
    hv, k_dim = ssm_state.shape[1], ssm_state.shape[3]
    lanes = triton.next_power_of_2((hv // args[13]) * (v_dim // 2) * (k_dim // 32))
    s_block, s_head, s_v, s_k = ssm_state.stride()
    return dataclasses.replace(plan, qk_tail=(*plan.qk_tail, ssm_state, s_block, s_head, s_v, s_k, hv, v_dim, lanes))
'''


V_LATE_OLD = """    if USE_PDL and STAGGER:
"""
V_LATE_NEW = V_NEW.split("\n", 1)[1] + V_LATE_OLD

QK_EARLY_OLD = """    window_offset = tl.load(num_accepted_tokens_ptr + i_n).to(tl.int64) - 1
"""
QK_EARLY_NEW = QK_EARLY_OLD + QK_INITIAL


def variant(tokens):
    text = sub(MAIN, HELPER_ANCHOR, PREFETCH_HELPER + HELPER_ANCHOR)
    evict_last = "True" if "el" in tokens else "False"
    late = "late" in tokens
    if "pfv" in tokens:
        old, new = (V_LATE_OLD, V_LATE_NEW) if late else (V_OLD, V_NEW)
        text = sub(text, old, new.replace("EVICT_LAST)", f"{evict_last})"))
    if "pfq" in tokens:
        text = sub(text, QK_SIG_OLD, QK_SIG_NEW)
        qk_new = QK_PREFETCH.replace("EVICT_LAST)", f"{evict_last})") + QK_CONV_OLD
        if late:  # the initial slot loaded beside the conv slot, before the conv
            text = sub(text, QK_EARLY_OLD, QK_EARLY_NEW)
        else:
            qk_new = QK_INITIAL + qk_new
        text = sub(text, QK_CONV_OLD, qk_new)
        text += EXTEND_PLAN
    return text


VARIANTS = {
    "pfv": {"pfv"},
    "pfq": {"pfq"},
    "pfqv": {"pfq", "pfv"},
    "pfvel": {"pfv", "el"},
    "pfqel": {"pfq", "el"},
    "pfvlate": {"pfv", "late"},
    "pfqlate": {"pfq", "late"},
    "pfqvlate": {"pfq", "pfv", "late"},
}

if __name__ == "__main__":
    os.makedirs(".exp/variants2", exist_ok=True)
    for name, tokens in VARIANTS.items():
        with open(f".exp/variants2/k_{name}.py", "w") as f:
            f.write(variant(tokens))
        print(f".exp/variants2/k_{name}.py")
