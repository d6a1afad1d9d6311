"""Writes .exp/variants2/k_NAME.py: variants of the kernels of commit 168d9a5 (run from the repository root).

Tokens (a variant is a set of them):
  qkh    Q/K kernel: the three metadata loads (query_start_loc, conv slot, accepted count) issued together before
         its early exits, so its window and input loads are two dependent loads after its wait instead of four.
  vpred  V/GDN kernel: the per-token state store predicated (mask) instead of under a branch, so the token step
         is one basic block the scheduler can reorder.
  rot    V/GDN kernel: the state of token t-1 is stored at the start of step t, beside step t's first row
         reduction (both only read that state), instead of at the end of step t-1; the last token's state is
         stored after the loop. The decay moves behind that reduction (v = (v - decay * (S.k)) * beta; S = decay * S
         + v k^T), so nothing overwrites the slab before its store has read it. Predicated, as vpred.
  vpick  V/GDN kernel: the state-slot row and the accepted count loaded before the early exits, the conv slot and the
         initial slot picked out of that row: the state load is one dependent load less behind the kernel's start.
  wtlast, wtall, wtlast2, wtodd: state stores write-through (st.global.wt) for some tokens; see the end of this file.
The module sets VARIANT_QK_KERNEL when its Q/K kernel differs from main's (qkh).
"""

import os
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from source_edits import QK_METADATA_LOADS, QK_METADATA_LOADS_TOGETHER, sub  # noqa: E402

# The kernel the variants were made from and timed against (`current` in ab*-h200.json); main's has changed since.
BASE_COMMIT = "168d9a5"
MAIN = subprocess.check_output(
    ["git", "show", f"{BASE_COMMIT}:src/caovan/kernels/gdn_spec_decode/triton_kernels.py"], text=True
)

QKH_OLD = QK_METADATA_LOADS
QKH_NEW = (
    QK_METADATA_LOADS_TOGETHER
    + """    if (seq_len <= 0) | (conv_block <= NULL_SLOT_MAX):
        return  # CUDA-graph padding row, or no conv slot (the V kernel writes zeros for this sequence)
"""
)

STORE_OLD = """        block_t = tl.sum(tl.where(pick, blocks_all, 0))
        if block_t > NULL_SLOT_MAX:
            # Streaming (evict-first) stores: these states are read again at the next decode step at the
            # earliest, after every other layer has gone through L2, so caching them only evicts lines this
            # call still uses. Measured on an H200: 7-8 % less on the largest write-bound cases (8 sequences,
            # fp32 state), none more than 2.7 % slower (docs/bench/experiments/qk-trigger-and-streaming-stores).
            tl.store(
                head_base + block_t * stride_ssm_block + slab_offs,
                state.to(ssm_state_ptr.dtype.element_ty),
                mask=slab_mask,
                cache_modifier=".cs",
            )"""
PRED_NEW = """        block_t = tl.sum(tl.where(pick, blocks_all, 0))
        tl.store(
            head_base + block_t * stride_ssm_block + slab_offs,
            state.to(ssm_state_ptr.dtype.element_ty),
            mask=slab_mask & (block_t > NULL_SLOT_MAX),
            cache_modifier=".cs",
        )"""

STEP_OLD = """        state *= decay
        v -= tl.sum(state * k[None, :], axis=1)
        v *= beta
        state += v[:, None] * k[None, :]
        o = tl.sum(state * q[None, :], axis=1)
        tl.store(out_head_ptr + row * stride_out_token, o.to(out_ptr.dtype.element_ty), mask=v_mask)

"""
ROT_STEP = """        tl.store(
            head_base + prev_block * stride_ssm_block + slab_offs,
            state.to(ssm_state_ptr.dtype.element_ty),
            mask=slab_mask & (prev_block > NULL_SLOT_MAX),
            cache_modifier=".cs",
        )
        v = (v - decay * tl.sum(state * k[None, :], axis=1)) * beta
        state = state * decay + v[:, None] * k[None, :]
        o = tl.sum(state * q[None, :], axis=1)
        tl.store(out_head_ptr + row * stride_out_token, o.to(out_ptr.dtype.element_ty), mask=v_mask)
        prev_block = tl.sum(tl.where(pick, blocks_all, 0))
"""
ROT_TAIL = """
    tl.store(
        head_base + prev_block * stride_ssm_block + slab_offs,
        state.to(ssm_state_ptr.dtype.element_ty),
        mask=slab_mask & (prev_block > NULL_SLOT_MAX),
        cache_modifier=".cs",
    )
"""
LOOP_HEAD = "    conv_rows = tl.arange(0, BU)\n    for t in range(0, seq_len):\n"

VPICK_OLD = """    bos = tl.load(query_start_loc_ptr + i_n).to(tl.int64)
    eos = tl.load(query_start_loc_ptr + i_n + 1).to(tl.int64)
    seq_len = eos - bos
    if seq_len <= 0:
        if USE_PDL:"""
VPICK_NEW = """    bos = tl.load(query_start_loc_ptr + i_n).to(tl.int64)
    eos = tl.load(query_start_loc_ptr + i_n + 1).to(tl.int64)
    si_row_ptr = state_indices_ptr + i_n.to(tl.int64) * stride_si_seq
    token_rows = tl.arange(0, BT)
    # the whole slot row (bench inputs are contiguous: stride_si_seq == T_max columns)
    slots = tl.load(si_row_ptr + token_rows, mask=token_rows < stride_si_seq, other=NULL_SLOT_MAX).to(tl.int64)
    num_accepted = tl.load(num_accepted_tokens_ptr + i_n).to(tl.int64)
    seq_len = eos - bos
    if seq_len <= 0:
        if USE_PDL:"""
VPICK_OLD2 = """    si_row_ptr = state_indices_ptr + i_n.to(tl.int64) * stride_si_seq

    conv_block = tl.load(si_row_ptr).to(tl.int64)
    num_accepted = tl.load(num_accepted_tokens_ptr + i_n).to(tl.int64)
    initial_block = tl.load(si_row_ptr + (num_accepted - 1)).to(tl.int64)
"""
VPICK_NEW2 = """
    conv_block = tl.sum(tl.where(token_rows == 0, slots, 0))
    initial_block = tl.sum(tl.where(token_rows == num_accepted - 1, slots - NULL_SLOT_MAX, 0)) + NULL_SLOT_MAX
"""
VPICK_OLD3 = """    token_rows = tl.arange(0, BT)
    row_mask = token_rows < seq_len"""
VPICK_NEW3 = """    row_mask = token_rows < seq_len"""
VPICK_OLD4 = "    blocks_all = tl.load(si_row_ptr + token_rows, mask=row_mask, other=NULL_SLOT_MAX).to(tl.int64)\n"
VPICK_NEW4 = "    blocks_all = tl.where(row_mask, slots, NULL_SLOT_MAX)\n"


def variant(tokens):
    text = MAIN
    if "qkh" in tokens:
        text = sub(text, QKH_OLD, QKH_NEW)
    if "vpick" in tokens:
        text = sub(text, VPICK_OLD, VPICK_NEW)
        text = sub(text, VPICK_OLD2, VPICK_NEW2)
        text = sub(text, VPICK_OLD3, VPICK_NEW3)
        text = sub(text, VPICK_OLD4, VPICK_NEW4)
    if "rot" in tokens:
        text = sub(text, STORE_OLD, "")
        text = sub(text, STEP_OLD, ROT_STEP)
        text = sub(
            text,
            LOOP_HEAD,
            "    conv_rows = tl.arange(0, BU)\n    prev_block = NULL_SLOT_MAX + 0 * bos\n"
            "    for t in range(0, seq_len):\n",
        )
        text = text.rstrip("\n") + "\n" + ROT_TAIL
    elif "vpred" in tokens:
        text = sub(text, STORE_OLD, PRED_NEW)
    if "qkh" in tokens:
        text += "\nVARIANT_QK_KERNEL = True\n"
    return text


VARIANTS = {
    "qkh": {"qkh"},
    "vpred": {"vpred"},
    "vpick": {"vpick"},
    "rot": {"rot"},
    "rotqkh": {"rot", "qkh"},
    "rotall": {"rot", "qkh", "vpick"},
    "predall": {"vpred", "qkh", "vpick"},
}
os.makedirs(".exp/variants2", exist_ok=True)
for name, tokens in VARIANTS.items():
    with open(f".exp/variants2/k_{name}.py", "w") as f:
        f.write(variant(tokens))
    print("wrote", f".exp/variants2/k_{name}.py")


# wtlast: the last token's state stored write-through (st.global.wt) instead of streaming, so that its lines go
# to DRAM while the call ends instead of staying dirty in L2 until the next call's loads evict them.
# wtall: every per-token state store write-through.
WT_LAST = """        block_t = tl.sum(tl.where(pick, blocks_all, 0))
        last = t == seq_len - 1
        tl.store(
            head_base + block_t * stride_ssm_block + slab_offs,
            state.to(ssm_state_ptr.dtype.element_ty),
            mask=slab_mask & ((block_t > NULL_SLOT_MAX) & (last == 0)),
            cache_modifier=".cs",
        )
        tl.store(
            head_base + block_t * stride_ssm_block + slab_offs,
            state.to(ssm_state_ptr.dtype.element_ty),
            mask=slab_mask & ((block_t > NULL_SLOT_MAX) & last),
            cache_modifier=".wt",
        )"""
WT_ALL = PRED_NEW.replace('cache_modifier=".cs"', 'cache_modifier=".wt"')
for name, new in (("wtlast", WT_LAST), ("wtall", WT_ALL)):
    with open(f".exp/variants2/k_{name}.py", "w") as f:
        f.write(sub(MAIN, STORE_OLD, new))
    print("wrote", f".exp/variants2/k_{name}.py")

# wtlast2: the last two tokens' states write-through. wtodd: the last token write-through in the programs of odd value
# heads only (the staggered half, which start later and end later).
for name, cond in (("wtlast2", "t >= seq_len - 2"), ("wtodd", "(t == seq_len - 1) & (i_nhv % 2 == 1)")):
    with open(f".exp/variants2/k_{name}.py", "w") as f:
        f.write(sub(MAIN, STORE_OLD, WT_LAST.replace("t == seq_len - 1", cond)))
    print("wrote", f".exp/variants2/k_{name}.py")
