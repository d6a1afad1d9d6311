"""Scenarios for the GDN spec-decode kernels under the Triton interpreter (CPU, tiny shapes).

Run as a script (``TRITON_INTERPRET=1 python gdn_interpreter_cases.py --out results.json``) it
executes every scenario and writes one result per scenario id; ``test_interpreter_numerics.py``
runs it in a subprocess and turns each result into a pytest test. Keeping the interpreter in its
own process is deliberate: triton decides "interpreted or compiled" when a kernel is *decorated*
(``triton.jit`` reads TRITON_INTERPRET at import of the kernel module, in triton 3.6), so setting
the variable inside a pytest process that already imported our kernels, or vLLM's, changes
nothing, and setting it globally (e.g. from a conftest) would silently turn every other Triton
test of the session (GPU tiers, the sm_75 gate) into interpreter runs.

Importing this module does not import triton or the kernels (the parent pytest only needs the
scenario ids).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
import traceback
import warnings
from dataclasses import asdict, dataclass, field, replace

import torch

DTYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32}

# Max-abs tolerance vs the float64 oracle. Kernels and oracle consume bit-identical inputs, so
# the gap is fp32-vs-fp64 arithmetic (relative ~1e-6 for K <= 32 reductions over T <= 4 steps;
# FP32_ARITH_REL leaves a margin) plus at most one rounding step of the stored dtype (<= 1 ulp
# <= eps * |x|; 2 eps for margin), both scaled by the largest magnitude (at least 1).
FP32_ARITH_REL = 2e-5


def tolerance(dtype: torch.dtype, reference: torch.Tensor) -> float:
    scale = max(1.0, reference.double().abs().max().item()) if reference.numel() else 1.0
    return max(FP32_ARITH_REL, 2 * torch.finfo(dtype).eps) * scale


# Rule-test floor: ours may exceed vLLM's max error by at most 2 ulps of the stored dtype at the
# reference's largest magnitude. Where vLLM's intermediate roundings are invisible after the last
# rounding (e.g. fp32 everywhere), both errors sit at the final-rounding level and either one can
# be the smaller by chance; the floor absorbs that coin flip and nothing more.
FLOOR_ULPS = 2


@dataclass(frozen=True)
class Scenario:
    id: str
    num_k_heads: int = 2
    group: int = 2  # HV / H
    head_k_dim: int = 16
    head_v_dim: int = 32
    bv: int = 16  # BV override so that V=32 spans two value blocks
    width: int = 4
    t_max: int = 4
    seq_lens: tuple[int, ...] = (4, 2, 0, 3)  # 0: CUDA-graph padding row
    num_accepted: tuple[int, ...] | None = None  # default: cycles 1..T_max
    act_dtype: str = "float16"
    conv_dtype: str = "float16"
    ssm_dtype: str = "float32"
    ssm_layout: str = "vk"
    conv_dim_first: bool = False  # False: vLLM's (blocks, L, dim) cache, passed transposed
    page_strided: bool = True  # caches are views into a padded per-block page buffer
    null_slot_max: int = 0
    mixed_batch: bool = False  # spec tokens scattered among other rows, via token_index
    has_bias: bool = True
    extra_state_len: int = 0  # conv state longer than width - 2 + T_max
    null_columns: tuple[tuple[int, int], ...] = ()  # (sequence, column) set to the null slot
    extra_index_rows: int = 0  # state_indices / num_accepted_tokens have N' > N rows
    vllm_rule: bool = False  # also run vLLM 0.21.0's kernels and apply the error rule
    repeat_call: bool = False  # call twice: the second call goes through the cached plan
    write_through_last: bool = False  # the last token's state stored write-through (forced on, threshold 0)
    constant_slab_offsets: bool = False  # the slab's strides compiled in (the sm90 entry's option at its BV)
    row_lanes: int = 32  # < 32: the slab's rows split over this many lanes (the sm90 entry's large fp32 calls)
    seed: int = 0
    notes: str = field(default="", compare=False)


def _switched_on(scenarios: list[Scenario], switch: str, *sources: str) -> list[Scenario]:
    """Copies of the named scenarios with one boolean field of Scenario set, ids prefixed with its name."""
    by_id = {c.id: c for c in scenarios}
    return [replace(by_id[source], id=f"{switch}_{source}", **{switch: True}) for source in sources]


def _scenarios() -> list[Scenario]:
    base = Scenario(id="base")
    s: list[Scenario] = [replace(base, repeat_call=True)]
    # Head ratios HV/H = 1, 2, 3 with one and two key heads.
    for h in (1, 2):
        for g in (1, 2, 3):
            s.append(replace(base, id=f"heads_H{h}_G{g}", num_k_heads=h, group=g, seed=10 * h + g))
    # SSM layout x conv-state orientation x page striding.
    for layout in ("vk", "kv"):
        for dim_first in (False, True):
            for paged in (False, True):
                s.append(
                    replace(
                        base,
                        id=f"layout_{layout}_convdimfirst{int(dim_first)}_paged{int(paged)}",
                        ssm_layout=layout,
                        conv_dim_first=dim_first,
                        page_strided=paged,
                        seed=100 + 4 * (layout == "kv") + 2 * dim_first + paged,
                    )
                )
    # Activation x state dtypes (conv state follows the model dtype unless noted).
    for act, conv, ssm in (
        ("float16", "float16", "float16"),
        ("float16", "float16", "float32"),
        ("bfloat16", "bfloat16", "bfloat16"),
        ("bfloat16", "bfloat16", "float32"),
        ("float32", "float32", "float32"),
        ("float16", "float32", "float32"),
        ("bfloat16", "float16", "float16"),
    ):
        s.append(
            replace(
                base,
                id=f"dtypes_{act}_conv_{conv}_ssm_{ssm}",
                act_dtype=act,
                conv_dtype=conv,
                ssm_dtype=ssm,
                seed=200 + len(s),
            )
        )
    # Every num_accepted_tokens 1..T for each T_max 1..4 (one sequence per value).
    for t in (1, 2, 3, 4):
        s.append(
            replace(
                base,
                id=f"accepted_sweep_T{t}",
                t_max=t,
                seq_lens=(t,) * t,
                num_accepted=tuple(range(1, t + 1)),
                seed=300 + t,
            )
        )
    # Varlen lengths, N = 1..3, padded rows, N' > N.
    s += [
        replace(base, id="varlen_N1", seq_lens=(3,), num_accepted=(2,), seed=401),
        replace(base, id="varlen_N2_short", seq_lens=(1, 2), num_accepted=(4, 3), seed=402),
        replace(base, id="varlen_N3", seq_lens=(2, 4, 1), num_accepted=(3, 1, 4), seed=403),
        replace(base, id="padded_rows_trailing", seq_lens=(4, 4, 0, 0), seed=404),
        replace(base, id="padded_rows_extra_index_rows", seq_lens=(2, 0, 3), extra_index_rows=2, seed=405),
        replace(base, id="all_rows_padded", seq_lens=(0, 0), seed=406),
    ]
    # Null slots: sentinel 0 (vLLM >= 0.20) and -1 (<= 0.19, where block 0 is a real block).
    for null in (0, -1):
        tag = "null0" if null == 0 else "nullm1"
        s += [
            replace(base, id=f"{tag}_plain", null_slot_max=null, seed=500 + 10 * (null + 1)),
            replace(
                base, id=f"{tag}_conv_slot_null", null_slot_max=null, null_columns=((0, 0),), seed=501 + 10 * (null + 1)
            ),
            replace(
                base,
                id=f"{tag}_initial_slot_null",
                null_slot_max=null,
                num_accepted=(3, 1, 1, 2),
                null_columns=((0, 2),),
                seed=502 + 10 * (null + 1),
            ),
            replace(
                base,
                id=f"{tag}_middle_column_null",
                null_slot_max=null,
                num_accepted=(1, 1, 1, 1),
                null_columns=((0, 2), (3, 1)),
                seed=503 + 10 * (null + 1),
            ),
        ]
    # Mixed batches (token_index) and odd shapes.
    s += [
        replace(base, id="mixed_batch_token_index", mixed_batch=True, repeat_call=True, seed=601),
        replace(
            base,
            id="mixed_batch_kv_dimfirst_bf16",
            mixed_batch=True,
            ssm_layout="kv",
            conv_dim_first=True,
            act_dtype="bfloat16",
            conv_dtype="bfloat16",
            ssm_dtype="bfloat16",
            seed=602,
        ),
        replace(base, id="no_bias", has_bias=False, seed=603),
        replace(base, id="longer_conv_state", extra_state_len=3, seed=604),
        replace(base, id="non_pow2_heads_K24_V24", head_k_dim=24, head_v_dim=24, bv=32, seed=605),
        replace(base, id="K32_V32_BV32_one_value_block", head_k_dim=32, head_v_dim=32, bv=32, seed=606),
        replace(base, id="width2", width=2, seed=607),
        replace(base, id="width3_T2", width=3, t_max=2, seq_lens=(2, 1), seed=608),
        replace(base, id="empty_batch_N0", seq_lens=(), seed=609),
        # The edges of the kernels' envelope (envelope.py) not run above: conv widths 5 and 6, the largest K and
        # the smallest V.
        replace(base, id="envelope_width5", width=5, seed=610),
        replace(base, id="envelope_width6", width=6, seed=611),
        replace(base, id="envelope_K256", head_k_dim=256, seed=612),
        replace(base, id="envelope_V8", head_v_dim=8, seed=613),
    ]
    # The rule tests against vLLM 0.21.0's own kernels (vk layout, null slot 0, no token_index).
    rule = replace(base, vllm_rule=True, num_accepted=(1, 4, 1, 2))
    s += [
        replace(rule, id="vllm_rule_fp16_fp16state", ssm_dtype="float16", seed=701),
        replace(rule, id="vllm_rule_fp16_fp32state", seed=702),
        replace(rule, id="vllm_rule_bf16_fp32state", act_dtype="bfloat16", conv_dtype="bfloat16", seed=703),
        replace(
            rule,
            id="vllm_rule_bf16_bf16state",
            act_dtype="bfloat16",
            conv_dtype="bfloat16",
            ssm_dtype="bfloat16",
            seed=704,
        ),
        replace(rule, id="vllm_rule_fp32", act_dtype="float32", conv_dtype="float32", seed=705),
        replace(rule, id="vllm_rule_G3_dimfirst_unpaged", group=3, conv_dim_first=True, page_strided=False, seed=706),
        replace(rule, id="vllm_rule_accepted_sweep", seq_lens=(4, 4, 4, 4), num_accepted=(1, 2, 3, 4), seed=707),
    ]
    # The last token's state stored write-through (the sm90 entry's large-write path): two predicated stores per
    # token instead of one branch, so every token's state must still land once, in its own slot, null slots skipped.
    s += _switched_on(
        s,
        "write_through_last",
        "base",
        "accepted_sweep_T4",
        "varlen_N3",
        "padded_rows_trailing",
        "null0_initial_slot_null",
        "nullm1_middle_column_null",
        "mixed_batch_token_index",
        "layout_kv_convdimfirst1_paged1",
    )
    # The slab's strides as compile-time constants (the sm90 entry at its own BV): both storage orders, paged and
    # not, fp16 and fp32 state, null slots and a mixed batch; the offsets must address exactly the runtime strides'.
    s += _switched_on(
        s,
        "constant_slab_offsets",
        "base",
        "layout_vk_convdimfirst0_paged0",
        "layout_kv_convdimfirst0_paged1",
        "layout_kv_convdimfirst1_paged0",
        "dtypes_float16_conv_float16_ssm_float16",
        "null0_initial_slot_null",
        "mixed_batch_token_index",
        "write_through_last_accepted_sweep_T4",
    )
    # The slab's rows over 16 (or 8) lanes, a 6-D tile (the sm90 entry's large fp32-state calls). K >= 4 lanes
    # per row: K 64, 48 (masked key columns) and 128 (the model shapes' two column groups per lane). Edge cases,
    # layouts, head ratios, a mixed batch, the write-through, 2-row value blocks (BV * lanes = 32, the smallest)
    # and the rule against vLLM's kernels.
    by_id = {c.id: c for c in s}
    s += [
        replace(by_id[source], id=f"rows16_{source}", row_lanes=16, head_k_dim=64)
        for source in (
            "base",
            "accepted_sweep_T4",
            "varlen_N3",
            "padded_rows_trailing",
            "null0_initial_slot_null",
            "nullm1_middle_column_null",
            "mixed_batch_token_index",
            "layout_kv_convdimfirst1_paged1",
            "heads_H2_G3",
            "dtypes_bfloat16_conv_bfloat16_ssm_float32",
            "write_through_last_accepted_sweep_T4",
            "vllm_rule_fp16_fp32state",
        )
    ]
    s += [
        replace(base, id="rows16_K48", row_lanes=16, head_k_dim=48, seed=801),
        replace(base, id="rows16_BV2", row_lanes=16, head_k_dim=64, bv=2, seed=802),
        replace(base, id="rows8_K32", row_lanes=8, head_k_dim=32, seed=803),
        # Two key column groups per lane (KR = 2), as at the model shapes (K 128, rows of 16 lanes).
        replace(base, id="rows16_K128", row_lanes=16, head_k_dim=128, seed=804),
        replace(base, id="rows8_K64_varlen", row_lanes=8, head_k_dim=64, seq_lens=(2, 4, 1), seed=805),
    ]
    ids = [c.id for c in s]
    assert len(ids) == len(set(ids)), "duplicate scenario id"
    return s


SCENARIOS: list[Scenario] = _scenarios()
SCENARIO_IDS: list[str] = [c.id for c in SCENARIOS]


# --------------------------------------------------------------------------------------------
# Inputs
# --------------------------------------------------------------------------------------------


def _paged(
    num_blocks: int, shape: tuple[int, ...], dtype: torch.dtype, paged: bool, gen: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor]:
    """(backing buffer, per-block view of `shape`); paged: blocks sit inside larger pages."""
    per_block = 1
    for d in shape:
        per_block *= d
    pad_front, pad_back = (3, 5) if paged else (0, 0)
    page = pad_front + per_block + pad_back
    buf = torch.randn(num_blocks * page, generator=gen).to(dtype)
    strides, acc = [], 1
    for d in reversed(shape):
        strides.append(acc)
        acc *= d
    view = buf.as_strided((num_blocks, *shape), (page, *reversed(strides)), pad_front)
    return buf, view


def make_inputs(sc: Scenario) -> dict:
    """All arguments of gdn_spec_decode (positional list + kwargs) for one scenario."""
    gen = torch.Generator().manual_seed(sc.seed)
    H, G, K, V, W, T = sc.num_k_heads, sc.group, sc.head_k_dim, sc.head_v_dim, sc.width, sc.t_max
    HV = H * G
    conv_dim = 2 * H * K + HV * V
    act = DTYPES[sc.act_dtype]
    N = len(sc.seq_lens)
    assert all(0 <= L <= T for L in sc.seq_lens)
    num_spec = sum(sc.seq_lens)
    null = 0 if sc.null_slot_max == 0 else -1
    n_rows_idx = N + sc.extra_index_rows

    # Cache blocks: every real (sequence, column) gets its own block, in shuffled order; with the
    # -1 sentinel block 0 is a real block and must be used.
    first_block = 1 if null == 0 else 0
    num_blocks = first_block + n_rows_idx * T + 2
    perm = torch.randperm(num_blocks - first_block, generator=gen) + first_block
    state_indices = torch.full((n_rows_idx, T), null, dtype=torch.int32)
    used = 0
    for n in range(N):
        if sc.seq_lens[n] == 0:
            continue
        state_indices[n] = perm[used : used + T]
        used += T
    if null == -1 and N and sc.seq_lens[0] > 0 and 0 not in state_indices[0].tolist():
        # Make sure the real block 0 is exercised: swap it into sequence 0's conv slot.
        where_zero = (state_indices == 0).nonzero()
        if len(where_zero):
            state_indices[tuple(where_zero[0])] = state_indices[0, 0].item()
        state_indices[0, 0] = 0
    for n, col in sc.null_columns:
        state_indices[n, col] = null
    if sc.num_accepted is not None:
        accepted = list(sc.num_accepted)
    else:
        accepted = [(n % T) + 1 for n in range(N)]
    # Padding rows carry an out-of-range count: it must never be read (length 0 returns first).
    accepted = [a if L > 0 else 0 for a, L in zip(accepted, sc.seq_lens, strict=True)]
    accepted += [0] * sc.extra_index_rows
    num_accepted_tokens = torch.tensor(accepted, dtype=torch.int32)
    starts = [0]
    for L in sc.seq_lens:
        starts.append(starts[-1] + L)
    query_start_loc = torch.tensor(starts, dtype=torch.int32)

    # Activations; mixed batch: spec tokens scattered among extra rows, row-strided views.
    num_rows = num_spec + (3 if sc.mixed_batch else 0)
    proj = torch.randn(num_rows, conv_dim + 8, generator=gen).to(act)
    mixed_qkv = proj[:, :conv_dim] if sc.mixed_batch else proj[:, :conv_dim].contiguous()
    ba = torch.randn(num_rows, 2 * HV, generator=gen).to(act)
    b, a = (ba[:, :HV], ba[:, HV:]) if sc.mixed_batch else (ba[:, :HV].contiguous(), ba[:, HV:].contiguous())
    out = torch.randn(num_rows + 2, HV, V, generator=gen).to(act)  # extra rows stay untouched
    token_index = None
    if sc.mixed_batch:
        token_index = torch.randperm(num_rows, generator=gen)[:num_spec].sort().values
        token_index = token_index.to(torch.int64)

    A_log = torch.log(torch.empty(HV).uniform_(1.0, 16.0, generator=gen))
    dt = torch.exp(torch.empty(HV).uniform_(-6.9, -2.3, generator=gen))
    dt_bias = (dt + torch.log(-torch.expm1(-dt))).to(act)  # inverse softplus, as the model inits
    conv_weight = (torch.randn(conv_dim, W, generator=gen) * 0.5).to(act)
    conv_bias = (torch.randn(conv_dim, generator=gen) * 0.1).to(act) if sc.has_bias else None

    state_len = W - 2 + T + sc.extra_state_len
    conv_dtype = DTYPES[sc.conv_dtype]
    if sc.conv_dim_first:
        conv_buf, conv_state = _paged(num_blocks, (conv_dim, state_len), conv_dtype, sc.page_strided, gen)
    else:  # vLLM's default cache (blocks, L, dim), given to the kernels as its transpose
        conv_buf, conv_sd = _paged(num_blocks, (state_len, conv_dim), conv_dtype, sc.page_strided, gen)
        conv_state = conv_sd.transpose(-1, -2)
    ssm_shape = (HV, V, K) if sc.ssm_layout == "vk" else (HV, K, V)
    ssm_buf, ssm_state = _paged(num_blocks, ssm_shape, DTYPES[sc.ssm_dtype], sc.page_strided, gen)
    ssm_buf.mul_(0.5)

    return dict(
        tensors=dict(
            mixed_qkv=mixed_qkv,
            a=a,
            b=b,
            A_log=A_log,
            dt_bias=dt_bias,
            conv_weight=conv_weight,
            conv_bias=conv_bias,
            conv_state=conv_state,
            ssm_state=ssm_state,
            query_start_loc=query_start_loc,
            state_indices=state_indices,
            num_accepted_tokens=num_accepted_tokens,
            out=out,
            token_index=token_index,
        ),
        buffers=dict(conv=conv_buf, ssm=ssm_buf),
        kwargs=dict(
            num_k_heads=H, head_k_dim=K, head_v_dim=V, ssm_layout=sc.ssm_layout, null_slot_max=sc.null_slot_max
        ),
    )


def clone_inputs(inp: dict) -> dict:
    """Deep copy that keeps every view's strides and offset; views sharing a storage (a cache view
    and its page buffer, a and b cut from one projection) share the copied storage too."""
    storages: dict[int, torch.UntypedStorage] = {}

    def clone_view(t: torch.Tensor | None) -> torch.Tensor | None:
        if t is None:
            return None
        key = t.untyped_storage().data_ptr()
        if key not in storages:
            storages[key] = t.untyped_storage().clone()
        return torch.empty(0, dtype=t.dtype).set_(storages[key], t.storage_offset(), t.shape, t.stride())

    return dict(
        tensors={k: clone_view(v) for k, v in inp["tensors"].items()},
        buffers={k: clone_view(v) for k, v in inp["buffers"].items()},
        kwargs=dict(inp["kwargs"]),
    )


def _call(fn, inp: dict, **extra) -> None:
    t = inp["tensors"]
    fn(
        t["mixed_qkv"],
        t["a"],
        t["b"],
        t["A_log"],
        t["dt_bias"],
        t["conv_weight"],
        t["conv_bias"],
        t["conv_state"],
        t["ssm_state"],
        t["query_start_loc"],
        t["state_indices"],
        t["num_accepted_tokens"],
        t["out"],
        token_index=t["token_index"],
        **inp["kwargs"],
        **extra,
    )


def _max_abs(x: torch.Tensor, y: torch.Tensor) -> float:
    if x.numel() == 0:
        return 0.0
    return (x.double() - y.double()).abs().max().item()


def _run_vllm(inp: dict) -> None:
    """vLLM 0.21.0's spec branch of GatedDeltaNetAttention._forward_core (pure spec batch)."""
    with warnings.catch_warnings():
        # vLLM's conv computes on lanes past conv_dim that it loads without `other=` (junk
        # values under the interpreter, never stored): numpy overflow warnings there are noise.
        warnings.simplefilter("ignore", RuntimeWarning)
        _run_vllm_unchecked(inp)


def _run_vllm_unchecked(inp: dict) -> None:
    from vllm.model_executor.layers.fla.ops.fused_sigmoid_gating import (
        fused_sigmoid_gating_delta_rule_update,
    )
    from vllm.model_executor.layers.mamba.ops.causal_conv1d import causal_conv1d_update

    t, kw = inp["tensors"], inp["kwargs"]
    H, K, V = kw["num_k_heads"], kw["head_k_dim"], kw["head_v_dim"]
    N = t["query_start_loc"].shape[0] - 1
    x = t["mixed_qkv"].clone()  # vLLM's conv overwrites its input in place
    num_tokens = x.shape[0]
    y = causal_conv1d_update(
        x,
        t["conv_state"],
        t["conv_weight"],
        t["conv_bias"],
        "silu",
        conv_state_indices=t["state_indices"][:, 0][:N],
        num_accepted_tokens=t["num_accepted_tokens"],
        query_start_loc=t["query_start_loc"],
        max_query_len=t["state_indices"].size(-1),
        validate_data=False,
    )
    q, k, v = torch.split(y, [H * K, H * K, y.shape[1] - 2 * H * K], dim=-1)
    q = q.reshape(1, num_tokens, H, K).contiguous()
    k = k.reshape(1, num_tokens, H, K).contiguous()
    v = v.reshape(1, num_tokens, -1, V).contiguous()
    o, _ = fused_sigmoid_gating_delta_rule_update(
        A_log=t["A_log"],
        a=t["a"],
        b=t["b"],
        dt_bias=t["dt_bias"],
        q=q,
        k=k,
        v=v,
        initial_state=t["ssm_state"],
        inplace_final_state=True,
        cu_seqlens=t["query_start_loc"],
        ssm_state_indices=t["state_indices"],
        num_accepted_tokens=t["num_accepted_tokens"],
        use_qk_l2norm_in_kernel=True,
    )
    t["out"][:num_tokens] = o.squeeze(0)


def _expected_writes(inp: dict) -> tuple[list[int], list[int]]:
    """(rows of out written, SSM cache blocks written) according to the documented semantics."""
    t, null = inp["tensors"], inp["kwargs"]["null_slot_max"]
    starts = t["query_start_loc"].tolist()
    idx = t["state_indices"].tolist()
    acc = t["num_accepted_tokens"].tolist()
    spec_rows = t["token_index"].tolist() if t["token_index"] is not None else None
    rows, blocks = [], []
    for n in range(len(starts) - 1):
        bos, eos = starts[n], starts[n + 1]
        rows += spec_rows[bos:eos] if spec_rows is not None else list(range(bos, eos))
        if eos > bos and idx[n][0] > null and idx[n][acc[n] - 1] > null:
            blocks += [idx[n][c] for c in range(eos - bos) if idx[n][c] > null]
    return rows, blocks


def _view_mask(buf: torch.Tensor, view: torch.Tensor, written_blocks: list[int]) -> torch.Tensor:
    """Boolean mask over `buf`: True where `view` blocks not in `written_blocks` or padding lie."""
    written = torch.zeros(buf.shape, dtype=torch.bool)
    as_view = written.as_strided(view.shape, view.stride(), view.storage_offset())
    for blk in written_blocks:
        as_view[blk] = True
    return ~written


def run_scenario(sc: Scenario) -> dict:
    import triton

    from caovan.kernels.gdn_spec_decode import gdn_spec_decode
    from caovan.kernels.gdn_spec_decode.launch_configs import (
        LAUNCH_CONFIGS,
        VGdnLaunchConfig,
    )
    from caovan.kernels.gdn_spec_decode.naive import gdn_spec_decode_reference

    sm75 = LAUNCH_CONFIGS["sm75"]
    split = sc.row_lanes < 32
    block = min(triton.next_power_of_2(sc.bv), triton.next_power_of_2(sc.head_v_dim))  # the block the plan runs
    config = replace(
        sm75,
        v_gdn=VGdnLaunchConfig(
            1 if split else sm75.v_gdn.num_warps,  # the split tile is laid out for one warp
            sm75.v_gdn.num_stages,
            sc.bv,
            preferred_block_constant_slab_offsets=sc.constant_slab_offsets,
            row_split_block=block if split else None,
            row_split_lanes=sc.row_lanes if split else None,
            # Asked for wherever the configuration allows it: the interpreted entry must still refuse it.
            row_split_butterfly=split and (block, sc.row_lanes) == (16, 16),
        ),
        write_through_last_min_state_write_bytes=0 if sc.write_through_last else None,
        row_split_min_state_write_bytes=0 if split else None,
    )
    inp = make_inputs(sc)
    ours, ref = clone_inputs(inp), clone_inputs(inp)
    with warnings.catch_warnings():
        # Our kernels mask every lane they compute on: an overflow or NaN anywhere is a bug.
        warnings.simplefilter("error", RuntimeWarning)
        _call(gdn_spec_decode, ours, launch_config=config)
    _call(gdn_spec_decode_reference, ref)
    from caovan.kernels.gdn_spec_decode import plans as plan_cache

    # This scenario's plans (the launch configuration is the last item of a plan's key). The V/GDN kernel's last
    # six arguments: WRITE_THROUGH_LAST, CONST_SLAB_OFFSETS, SLAB_STRIDE_V, SLAB_STRIDE_K, ROW_LANES, ROW_BUTTERFLY.
    plans = [p for key, p in plan_cache.cached.items() if key[-1] == config]
    if sc.write_through_last and not any(p.write_through_last and p.v_tail[-6] is True for p in plans):
        return {"id": sc.id, "errors": {}, "ok": False, "detail": "no plan asked for the write-through store"}
    if not plans or any(p.v_tail[-5] is not sc.constant_slab_offsets for p in plans):
        got = [p.v_tail[-5:-2] for p in plans]
        detail = f"expected every plan with CONST_SLAB_OFFSETS={sc.constant_slab_offsets}, got {got}"
        return {"id": sc.id, "errors": {}, "ok": False, "detail": detail}
    if any(p.row_lanes != sc.row_lanes or p.v_tail[-2] != sc.row_lanes for p in plans):
        got = [(p.row_lanes, p.v_tail[-2]) for p in plans]
        detail = f"expected every plan with rows of {sc.row_lanes} lanes, got {got}"
        return {"id": sc.id, "errors": {}, "ok": False, "detail": detail}
    # The row butterfly is inline PTX, which the interpreter cannot run: interpreted plans never take it
    # (tests/kernels/test_row_butterfly.py checks the PTX on simulated lanes instead).
    if any(p.row_butterfly or p.v_tail[-1] is not False for p in plans):
        got = [(p.row_butterfly, p.v_tail[-1]) for p in plans]
        return {"id": sc.id, "errors": {}, "ok": False, "detail": f"an interpreted plan took the row butterfly: {got}"}

    out_dtype = inp["tensors"]["out"].dtype
    ssm_dtype = inp["buffers"]["ssm"].dtype
    problems: list[str] = []
    errors = {
        "out": _max_abs(ours["tensors"]["out"], ref["tensors"]["out"]),
        "ssm_state": _max_abs(ours["buffers"]["ssm"], ref["buffers"]["ssm"]),
        "conv_state": _max_abs(ours["buffers"]["conv"], ref["buffers"]["conv"]),
    }
    # `not x <= tol` so that a NaN error fails.
    for key, dtype, ref_t in (
        ("out", out_dtype, ref["tensors"]["out"]),
        ("ssm_state", ssm_dtype, ref["buffers"]["ssm"]),
    ):
        tol = tolerance(dtype, ref_t)
        if not errors[key] <= tol:
            problems.append(f"{key} max abs error {errors[key]:.3g} > {tol:.3g}")
    # The conv window is a pure copy of rounded inputs: must match bit for bit (whole buffer,
    # so stray writes into page padding or other blocks are caught too).
    if not torch.equal(ours["buffers"]["conv"], ref["buffers"]["conv"]):
        problems.append(f"conv_state differs from the oracle (max abs {errors['conv_state']:.3g})")
    # Writes must land exactly where the semantics put them: everything else (other rows of
    # out, other blocks and page padding of the SSM cache) stays bit-identical. The sets come
    # from the scenario, not from comparing values (bf16 results often equal the old value).
    written_rows, written_blocks = _expected_writes(inp)
    keep_rows = torch.ones(inp["tensors"]["out"].shape[0], dtype=torch.bool)
    keep_rows[written_rows] = False
    if not torch.equal(ours["tensors"]["out"][keep_rows], inp["tensors"]["out"][keep_rows]):
        problems.append("out changed in rows that are not spec tokens of live sequences")
    keep_ssm = _view_mask(inp["buffers"]["ssm"], inp["tensors"]["ssm_state"], written_blocks)
    if not torch.equal(ours["buffers"]["ssm"][keep_ssm], inp["buffers"]["ssm"][keep_ssm]):
        problems.append("ssm_state cache changed outside the blocks the tokens' states go to")

    if sc.repeat_call:
        # Second call with the same layout takes the cached launch plan: same bits expected.
        again = clone_inputs(inp)
        _call(gdn_spec_decode, again, launch_config=config)
        for part, key in (("tensors", "out"), ("buffers", "conv"), ("buffers", "ssm")):
            if not torch.equal(again[part][key], ours[part][key]):
                problems.append(f"second call (cached plan) changed {key}")
    result = {"id": sc.id, "errors": errors, "ok": not problems, "detail": "; ".join(problems)}
    if sc.vllm_rule:
        try:
            result.update(_vllm_rule(sc, inp, ref, errors))
        except Exception:
            result.update(rule_ok=False, rule_detail="vLLM run failed:\n" + traceback.format_exc())
    return result


def _interpreter_bf16_products_broken() -> str | None:
    """Triton 3.6's interpreter multiplies bf16 operands wrongly (raw bits); probe it once."""
    import triton
    import triton.language as tl

    @triton.jit
    def _bf16_product_probe(x_ptr, y_ptr, out_ptr):
        i = tl.arange(0, 4)
        out = tl.zeros([4], dtype=tl.float32) + tl.load(x_ptr + i) * tl.load(y_ptr + i)
        tl.store(out_ptr + i, out)

    x = torch.tensor([1.5, -2.0, 0.25, 3.0], dtype=torch.bfloat16)
    y = torch.tensor([2.0, 0.5, -4.0, 1.0], dtype=torch.bfloat16)
    out = torch.empty(4)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        _bf16_product_probe[(1,)](x, y, out)
    expected = x.float() * y.float()
    if torch.equal(out, expected):
        return None
    return (
        f"the Triton {triton.__version__} interpreter computes bf16 x bf16 products wrongly "
        f"(probe {x.tolist()} * {y.tolist()} gave {out.tolist()}); vLLM's conv multiplies bf16 "
        f"operands without upcasting, so its error cannot be measured here (ours upcasts to fp32 "
        f"first and is still checked against the fp64 oracle in this scenario)"
    )


def _vllm_0_21_missing() -> str | None:
    """Reason the rule cannot run here, or None: it pins vLLM 0.21.0's kernels."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        installed = version("vllm")
    except PackageNotFoundError:
        return "vLLM is not installed: the rule compares against vLLM 0.21.0's own kernels"
    if not installed.startswith("0.21."):
        return f"the rule pins vLLM 0.21.0's kernels; installed vLLM is {installed}"
    return None


def _vllm_rule(sc: Scenario, inp: dict, ref: dict, errors: dict) -> dict:
    missing = _vllm_0_21_missing()
    if missing:
        return {"rule_skip": missing}
    if sc.act_dtype == "bfloat16" or sc.conv_dtype == "bfloat16":
        reason = _interpreter_bf16_products_broken()
        if reason:
            return {"rule_skip": reason}
    vl = clone_inputs(inp)
    _run_vllm(vl)
    vllm_errors = {
        "out": _max_abs(vl["tensors"]["out"], ref["tensors"]["out"]),
        "ssm_state": _max_abs(vl["buffers"]["ssm"], ref["buffers"]["ssm"]),
    }
    problems = []
    # The window bookkeeping (offset num_accepted - 1, W - 2 + L positions written) is a copy in
    # both implementations: vLLM's conv cache must equal the oracle's bit for bit.
    if not torch.equal(vl["buffers"]["conv"], ref["buffers"]["conv"]):
        problems.append("vLLM's conv_state differs from the oracle: semantics drifted")
    for key, ref_t in (("out", ref["tensors"]["out"]), ("ssm_state", ref["buffers"]["ssm"])):
        floor = FLOOR_ULPS * torch.finfo(ref_t.dtype).eps * ref_t.double().abs().max().item()
        if not math.isfinite(vllm_errors[key]):
            problems.append(f"vLLM's {key} is not finite: the baseline is broken")
        elif not errors[key] <= vllm_errors[key] + floor:
            problems.append(f"{key} error {errors[key]:.3g} > vLLM's {vllm_errors[key]:.3g} + floor {floor:.3g}")
    return {"vllm_errors": vllm_errors, "rule_ok": not problems, "rule_detail": "; ".join(problems)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="JSON file for the results")
    parser.add_argument("ids", nargs="*", help="scenario ids (default: all)")
    args = parser.parse_args(argv)
    import os

    if os.environ.get("TRITON_INTERPRET") != "1":
        print("TRITON_INTERPRET=1 must be set in the environment", file=sys.stderr)
        return 2
    wanted = set(args.ids) if args.ids else set(SCENARIO_IDS)
    results = {}
    for sc in SCENARIOS:
        if sc.id not in wanted:
            continue
        t0 = time.perf_counter()
        try:
            res = run_scenario(sc)
        except Exception:
            res = {"id": sc.id, "ok": False, "detail": traceback.format_exc()}
        res["seconds"] = round(time.perf_counter() - t0, 3)
        res["scenario"] = asdict(sc)
        results[sc.id] = res
        rule = ""
        if "rule_ok" in res:
            rule = " | rule " + ("ok" if res["rule_ok"] else "FAIL " + res["rule_detail"])
        elif "rule_skip" in res:
            rule = " | rule skipped"
        status = "ok  " if res["ok"] else "FAIL"
        print(f"{status} {sc.id} ({res['seconds']} s) {res['detail']}{rule}", flush=True)
        with open(args.out, "w") as f:  # rewrite each time: partial results survive a crash
            json.dump(results, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
