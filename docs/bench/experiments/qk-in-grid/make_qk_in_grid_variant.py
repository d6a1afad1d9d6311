"""Writes .exp/variants2/k_qkgrid.py: one launch in which the first programs also do the Q/K kernel's work.

Experiment (repository root). On main the Q/K kernel runs first and the V/GDN kernel is its programmatic dependent:
a Q/K program still resident takes register banks, so 30 % of the V/GDN programs start ~1.8 us late
(``../launch-chain/``), and the chain of two launches costs 0.3-0.4 us. Here there is one 1-D grid of the V/GDN
kernel's programs; program p < N*H first does the Q/K work of sequence p // H, key head p % H (q, then k, as main's
Q/K kernel with one warp), then raises that unit's ready flag (release). Every V/GDN item waits on its key head's
flag where main waits for the Q/K kernel (acquire spin): the odd value heads before their state load (the staggered
start), the others before reading q/k. Items are ordered odd value heads first, so the producers' own items are ones
that wait anyway. [Changed before the first run: program u < N*H takes item 0 of its own unit, the rest of each
unit's items follow in unit order, so no program waits on a producer with a higher program id; the Triton
interpreter runs programs one after another and the first order deadlocked there.] The last consumer of a unit (a
counter per unit, read when the item ends) resets the unit's flag and counter, so the call stays CUDA-graph safe. A
program waits only on producers with lower program ids, which the block scheduler starts first. The module exposes
the kernel under main's name as a launcher object for ``../cold-l2/variants_cold.py`` and
``../balanced-work/check_cpu.py`` (NO_DIRECT_LAUNCH, NO_QK_KERNEL: main's Q/K kernel is not launched).
"""

import re
import sys

# qkgrid: as described above. qkgrid2: the consumers poll with volatile loads (one acquire once the flag is seen)
# instead of spinning with atomics on L2, and a producer converts q and k in one [BU, 2*BK] pass.
VARIANT = sys.argv[1] if len(sys.argv) > 1 else "qkgrid"
assert VARIANT in ("qkgrid", "qkgrid2"), VARIANT

src = open("src/caovan/kernels/gdn_spec_decode/triton_kernels.py").read()
start = src.index("@triton.jit\ndef _caovan_sm75_fused_v_gdn_spec_decode_kernel(")
qk_start = src.index("@triton.jit\ndef _caovan_sm75_prepare_qk_conv_spec_decode_kernel(")
kernel = src[start:]
qk_kernel = src[qk_start:start]


def params_of(text):
    body = text[text.index("(") + 1 : text.index("\n):\n")]
    return body, [p.strip().rstrip(",").split(":")[0].strip() for p in body.strip().splitlines()]


v_params_text, v_names = params_of(kernel)
qk_params_text, qk_names = params_of(qk_kernel)
assert v_names[-1] == "STAGGER" and set(qk_names) - set(v_names) == {"scale"}, set(qk_names) - set(v_names)


def swap(text, old, new, count=1):
    assert text.count(old) == count, (old, text.count(old))
    return text.replace(old, new)


# --- the V/GDN item: main's kernel body for (i_vb, i_nhv), its gdc_wait()s replaced by the unit's flag -------------
item = kernel.replace(
    "def _caovan_sm75_fused_v_gdn_spec_decode_kernel(\n", "def _v_gdn_item(\n    i_vb,\n    i_nhv,\n", 1
)
item = swap(item, "    i_vb = tl.program_id(0)\n    i_nhv = tl.program_id(1)\n", "")
item = swap(
    item, "    STAGGER: tl.constexpr,\n):\n", "    STAGGER: tl.constexpr,\n    flags_ptr,\n    consumed_ptr,\n):\n"
)
# Padding rows and sequences without a conv slot: their producer raises no flag, so nothing to wait for or count.
item = swap(
    item,
    "        if USE_PDL:\n            gdc_wait()  # every exit waits: "
    "work after this launch must find the Q/K kernel done too\n"
    "        return  # CUDA-graph padding row\n",
    "        return  # CUDA-graph padding row\n",
)
item = swap(
    item,
    "        _store_zero_rows(out_head_ptr, token_index_ptr, stride_out_token, v_mask, bos, seq_len, BV, "
    "HAS_TOKEN_INDEX)\n"
    "        if USE_PDL:\n            gdc_wait()\n        return\n    v_conv",
    "        _store_zero_rows(out_head_ptr, token_index_ptr, stride_out_token, v_mask, bos, seq_len, BV, "
    "HAS_TOKEN_INDEX)\n"
    "        return\n    v_conv",
)
pointers = "flags_ptr + i_n * H + i_h, consumed_ptr + i_n * H + i_h"
unit = f"{pointers}, (HV // H) * tl.cdiv(V, BV)"
# No initial state: the producer raised the flag (the conv slot exists), so this consumer counts itself too.
item = swap(
    item,
    "        _store_zero_rows(out_head_ptr, token_index_ptr, stride_out_token, v_mask, bos, seq_len, BV, "
    "HAS_TOKEN_INDEX)\n"
    "        if USE_PDL:\n            gdc_wait()\n        return\n\n    slab_offs",
    "        _store_zero_rows(out_head_ptr, token_index_ptr, stride_out_token, v_mask, bos, seq_len, BV, "
    "HAS_TOKEN_INDEX)\n"
    f"        _qk_consume({unit}, True)\n        return\n\n    slab_offs",
)
item = swap(item, "    if USE_PDL and STAGGER:\n", "    if STAGGER:\n")
item = swap(
    item,
    "        if i_nhv % 2 == 1:\n            gdc_wait()\n",
    "        if i_nhv % 2 == 1:\n            _qk_wait(flags_ptr + i_n * H + i_h)\n",
)
item = swap(
    item,
    "    if USE_PDL:\n        # Launched as a programmatic dependent of the Q/K kernel: "
    "up to here nothing read what it writes\n"
    "        # (the state slab, the V conv and the gating are already loaded); its q/k scratch is read below.\n"
    "        gdc_wait()\n",
    f"    last = _qk_consume({unit}, False)\n",
)
item = item.rstrip("\n") + f"\n    if last:\n        _qk_reset({pointers})\n"
assert "gdc_wait" not in item and "program_id" not in item

# --- the Q/K half: main's Q/K kernel body for (i_n, i_h, half) -----------------------------------------------------
qk = qk_kernel.replace(
    "def _caovan_sm75_prepare_qk_conv_spec_decode_kernel(\n", "def _qk_half(\n    i_n,\n    i_h,\n    half,\n", 1
)
pdl_block = qk[qk.index("    if USE_PDL:\n") : qk.index("    i_n = tl.program_id(0)\n")]
qk = swap(qk, pdl_block, "")
qk = swap(qk, "    i_n = tl.program_id(0)\n    i_h = tl.program_id(1)\n", "")
qk = re.sub(r"    half = tl\.program_id\(2\).*\n", "", qk)
assert "program_id" not in qk and "gdc_" not in qk

WAIT_ATOMIC = """
@triton.jit
def _qk_wait(flag_ptr):
    ready = tl.atomic_add(flag_ptr, 0, sem="acquire")
    while ready == 0:
        ready = tl.atomic_add(flag_ptr, 0, sem="acquire")
    tl.debug_barrier()  # one thread spun: the others read the scratch only after it saw the flag
"""
WAIT_POLL = """
@triton.jit
def _qk_wait(flag_ptr):
    ready = tl.load(flag_ptr, volatile=True)
    while ready == 0:
        ready = tl.load(flag_ptr, volatile=True)
    tl.atomic_add(flag_ptr, 0, sem="acquire")  # orders the scratch reads after the producer's release
    tl.debug_barrier()
"""
QK_BOTH = """
@triton.jit
def _qk_both(i_n, i_h, mixed_qkv_ptr, conv_weight_ptr, conv_bias_ptr, conv_state_ptr, query_start_loc_ptr,
             state_indices_ptr, num_accepted_tokens_ptr, token_index_ptr, qk_scratch_ptr, scale, stride_x_token,
             stride_w_dim, stride_w_width, stride_cs_block, stride_cs_dim, stride_cs_pos, stride_si_seq,
             H: tl.constexpr, K: tl.constexpr, BK: tl.constexpr, WIDTH: tl.constexpr, BU: tl.constexpr,
             NULL_SLOT_MAX: tl.constexpr, HAS_BIAS: tl.constexpr, HAS_TOKEN_INDEX: tl.constexpr):
    bos = tl.load(query_start_loc_ptr + i_n).to(tl.int64)
    eos = tl.load(query_start_loc_ptr + i_n + 1).to(tl.int64)
    seq_len = eos - bos
    if seq_len <= 0:
        return
    conv_block = tl.load(state_indices_ptr + i_n.to(tl.int64) * stride_si_seq).to(tl.int64)
    if conv_block <= NULL_SLOT_MAX:
        return
    window_offset = tl.load(num_accepted_tokens_ptr + i_n).to(tl.int64) - 1
    offs = tl.arange(0, 2 * BK)
    half = offs // BK
    k_offs = offs % BK
    channel_mask = k_offs < K
    rows = tl.arange(0, BU)
    store_mask = (rows < seq_len)[:, None] & channel_mask[None, :]
    channels = half * (H * K) + i_h * K + k_offs
    y = _conv_update_silu(mixed_qkv_ptr, conv_weight_ptr, conv_bias_ptr, conv_state_ptr, token_index_ptr,
                          stride_x_token, stride_w_dim, stride_w_width, conv_block * stride_cs_block, stride_cs_dim,
                          stride_cs_pos, channels, channel_mask, window_offset, bos, seq_len, WIDTH, BU, HAS_BIAS,
                          HAS_TOKEN_INDEX)
    sq = y * y
    is_q = (half == 0)[None, :]
    factor_q = tl.rsqrt(tl.sum(tl.where(is_q, sq, 0.0), axis=1) + 1e-6) * scale
    factor_k = tl.rsqrt(tl.sum(tl.where(is_q, 0.0, sq), axis=1) + 1e-6) * 1.0
    y = y * tl.where(is_q, factor_q[:, None], factor_k[:, None])
    scratch_ptrs = (
        qk_scratch_ptr + ((bos + rows.to(tl.int64))[:, None] * 2 + half[None, :]) * (H * K) + (i_h * K + k_offs)[None, :]
    )
    tl.store(scratch_ptrs, y, mask=store_mask)
"""  # noqa: E501 - kernel source as written into the variant

helpers = (
    (WAIT_POLL + QK_BOTH if VARIANT == "qkgrid2" else WAIT_ATOMIC)
    + '''


@triton.jit
def _qk_consume(flag_ptr, consumed_ptr, consumers, reset_now):
    """Waits for the unit's q/k, counts this consumer in; True for the unit's last consumer."""
    _qk_wait(flag_ptr)
    last = tl.atomic_add(consumed_ptr, 1, sem="relaxed") == consumers - 1
    if reset_now:
        if last:
            _qk_reset(flag_ptr, consumed_ptr)
    return last


@triton.jit
def _qk_reset(flag_ptr, consumed_ptr):
    # Every consumer of the unit has passed its wait (all counted): the next call starts from zero.
    tl.atomic_xchg(flag_ptr, 0, sem="relaxed")
    tl.atomic_xchg(consumed_ptr, 0, sem="relaxed")

'''
)

v_args = ", ".join(v_names)
qk_args = ", ".join(n for n in qk_names)
grid_kernel = f'''

@triton.jit
def _qk_in_grid_kernel(
{v_params_text}
    scale,
    flags_ptr,
    consumed_ptr,
    NUM_V_BLOCKS: tl.constexpr,
):
    pid = tl.program_id(0)
    if USE_PDL:
        gdc_wait()  # the kernel before this launch (the previous call's) is done before any memory is touched
        gdc_launch_dependents()
    n_seqs = tl.num_programs(0) // (NUM_V_BLOCKS * HV)
    if pid < n_seqs * H:
        p_n = pid // H
        p_h = pid % H
{{PRODUCE}}
        p_len = tl.load(query_start_loc_ptr + p_n + 1) - tl.load(query_start_loc_ptr + p_n)
        p_conv = tl.load(state_indices_ptr + p_n.to(tl.int64) * stride_si_seq)
        if (p_len > 0) & (p_conv > NULL_SLOT_MAX):  # the units whose consumers wait
            tl.debug_barrier()  # every thread's scratch stores before the release
            tl.atomic_xchg(flags_ptr + pid, 1, sem="release")
    # Items by unit: program u < N*H takes item 0 of unit u (the flag it just raised), the others the rest of
    # every unit in order, so no program waits on a producer with a higher id (nor, interpreted, a later one).
    per_unit = (HV // H) * NUM_V_BLOCKS
    rest = pid - n_seqs * H
    u = tl.where(rest < 0, pid, rest // tl.maximum(per_unit - 1, 1))
    r = tl.where(rest < 0, 0, 1 + rest % tl.maximum(per_unit - 1, 1))
    i_nhv = (u // H) * HV + (u % H) * (HV // H) + r // NUM_V_BLOCKS
    _v_gdn_item(r % NUM_V_BLOCKS, i_nhv, {v_args}, flags_ptr, consumed_ptr)


NO_DIRECT_LAUNCH = True
NO_QK_KERNEL = True
NAMES = {v_names!r}
_counters = {{}}


def _buffers(device, units):
    import torch

    flags = _counters.get(device)
    if flags is None or flags.numel() < 2 * units:
        flags = _counters[device] = torch.zeros(2 * max(units, 1024), dtype=torch.int32, device=device)
    half = flags.numel() // 2
    return flags[:half], flags[half:]


class _QkInGrid:
    """``kernel[grid](*args, ...)`` as for main's V/GDN kernel: launches the 1-D grid over grid[0] x grid[1] items."""

    def __getitem__(self, grid):
        def launch(*args, **kw):
            a = dict(zip(NAMES, args))
            items = grid[0] * grid[1]
            flags, consumed = _buffers(args[0].device, items)
            return _qk_in_grid_kernel[(items,)](
                *args, a["K"] ** -0.5, flags, consumed, NUM_V_BLOCKS=grid[0], **kw
            )

        return launch

    def warmup(self, *args, grid, **kw):
        import triton

        a = dict(zip(NAMES, args))
        flags, consumed = _buffers(args[0].device, 1)
        return _qk_in_grid_kernel.warmup(
            *args, a["K"] ** -0.5, flags, consumed, NUM_V_BLOCKS=triton.cdiv(a["V"], a["BV"]), grid=(1,), **kw
        )


_caovan_sm75_fused_v_gdn_spec_decode_kernel = _QkInGrid()
'''

both_args = ", ".join(n for n in qk_names if n not in ("USE_PDL",))
produce = (
    f"        _qk_both(p_n, p_h, {both_args})"
    if VARIANT == "qkgrid2"
    else f"        _qk_half(p_n, p_h, 0, {qk_args})\n        _qk_half(p_n, p_h, 1, {qk_args})"
)
grid_kernel = grid_kernel.replace("{PRODUCE}", produce)
text = src[:qk_start] + helpers + qk + item + grid_kernel
open(f".exp/variants2/k_{VARIANT}.py", "w").write(text)
print(f"wrote .exp/variants2/k_{VARIANT}.py")
