"""Inputs for the GDN spec-decode kernels at tiny shapes, laid out as vLLM lays them out, for runs under the Triton
interpreter: one scenario record, the input builder, deep copies that keep every view, and the checks both
interpreter suites share (``tests/kernels/gdn_interpreter_cases.py``: caovan vs the float64 oracle;
``tests/numerics/family_numerics_cases.py``: both vs the installed vLLM's own kernels).

Importing this module imports torch, never triton, the kernels or vLLM: the pytest parents only need scenario ids.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field, replace

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
    a_log_in_act_dtype: bool = False  # A_log stored in the activations' dtype (vLLM 0.12 - 0.18), else float32
    mixed_batch: bool = False  # spec tokens among other rows, via token_index
    spec_tokens_first: bool = False  # mixed batch: spec tokens lead the rows (vLLM's batch order), else scattered
    has_bias: bool = True
    extra_state_len: int = 0  # conv state longer than width - 2 + T_max
    null_columns: tuple[tuple[int, int], ...] = ()  # (sequence, column) set to the null slot
    extra_index_rows: int = 0  # state_indices / num_accepted_tokens have N' > N rows
    repeat_call: bool = False  # call twice: the second call goes through the cached plan
    write_through_last: bool = False  # the last token's state stored write-through (forced on, threshold 0)
    constant_slab_offsets: bool = False  # the slab's strides compiled in (the sm90 entry's option at its BV)
    row_lanes: int = 32  # < 32: the slab's rows split over this many lanes (the sm90 entry's large fp32 calls)
    seed: int = 0
    notes: str = field(default="", compare=False)


def paged_blocks(
    num_blocks: int, shape: tuple[int, ...], dtype: torch.dtype, paged: bool, gen: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor]:
    """(backing buffer, per-block view of `shape`); paged: blocks sit inside larger pages."""
    per_block = 1
    for d in shape:
        per_block *= d
    pad_front, pad_back = (3, 5) if paged else (0, 0)
    page = pad_front + per_block + pad_back
    buf = torch.randn(num_blocks * page, generator=gen, device=gen.device).to(dtype)
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
        if sc.spec_tokens_first:
            token_index = torch.arange(num_spec, dtype=torch.int64)
        else:
            token_index = torch.randperm(num_rows, generator=gen)[:num_spec].sort().values.to(torch.int64)

    batch = dict(
        mixed_qkv=mixed_qkv, a=a, b=b, out=out, token_index=token_index, query_start_loc=query_start_loc,
        state_indices=state_indices, num_accepted_tokens=num_accepted_tokens,
    )  # fmt: skip
    return assemble_inputs(sc, gen, batch, act=act, dims=(H, HV, K, V), conv=(conv_dim, W, T), num_blocks=num_blocks)


def assemble_inputs(sc, gen: torch.Generator, batch: dict, *, act, dims, conv, num_blocks: int) -> dict:
    """The rest of a spec step's inputs around ``batch`` (the rows, slots and counts the caller laid out): the
    layer's weights and its paged conv and SSM caches, drawn from ``gen`` as a model initialises them, in the
    dtypes and layouts ``sc`` names (a ``Scenario`` here or a fuzzed case: the fields they share)."""
    H, HV, K, V = dims
    conv_dim, W, T = conv
    on = gen.device  # drawn where the generator lives (a fuzzed GPU case draws on the GPU)
    A_log = torch.log(torch.empty(HV, device=on).uniform_(1.0, 16.0, generator=gen))
    if sc.a_log_in_act_dtype:
        A_log = A_log.to(act)
    dt = torch.exp(torch.empty(HV, device=on).uniform_(-6.9, -2.3, generator=gen))
    dt_bias = (dt + torch.log(-torch.expm1(-dt))).to(act)  # inverse softplus, as the model inits
    conv_weight = (torch.randn(conv_dim, W, generator=gen, device=on) * 0.5).to(act)
    conv_bias = (torch.randn(conv_dim, generator=gen, device=on) * 0.1).to(act) if sc.has_bias else None

    state_len = W - 2 + T + sc.extra_state_len
    conv_dtype = DTYPES[sc.conv_dtype]
    if sc.conv_dim_first:
        conv_buf, conv_state = paged_blocks(num_blocks, (conv_dim, state_len), conv_dtype, sc.page_strided, gen)
    else:  # vLLM's default cache (blocks, L, dim), given to the kernels as its transpose
        conv_buf, conv_sd = paged_blocks(num_blocks, (state_len, conv_dim), conv_dtype, sc.page_strided, gen)
        conv_state = conv_sd.transpose(-1, -2)
    ssm_shape = (HV, V, K) if sc.ssm_layout == "vk" else (HV, K, V)
    ssm_buf, ssm_state = paged_blocks(num_blocks, ssm_shape, DTYPES[sc.ssm_dtype], sc.page_strided, gen)
    ssm_buf.mul_(0.5)

    return dict(
        tensors=dict(
            mixed_qkv=batch["mixed_qkv"],
            a=batch["a"],
            b=batch["b"],
            A_log=A_log,
            dt_bias=dt_bias,
            conv_weight=conv_weight,
            conv_bias=conv_bias,
            conv_state=conv_state,
            ssm_state=ssm_state,
            query_start_loc=batch["query_start_loc"],
            state_indices=batch["state_indices"],
            num_accepted_tokens=batch["num_accepted_tokens"],
            out=batch["out"],
            token_index=batch["token_index"],
        ),
        buffers=dict(conv=conv_buf, ssm=ssm_buf),
        kwargs=dict(
            num_k_heads=H, head_k_dim=K, head_v_dim=V, ssm_layout=sc.ssm_layout, null_slot_max=sc.null_slot_max
        ),
    )


def clone_inputs(inp: dict, device: torch.device | str | None = None) -> dict:
    """Deep copy that keeps every view's strides and offset; views sharing a storage (a cache view
    and its page buffer, a and b cut from one projection) share the copied storage too. With ``device``,
    the copy lives there."""
    storages: dict[int, torch.UntypedStorage] = {}

    def clone_view(t: torch.Tensor | None) -> torch.Tensor | None:
        if t is None:
            return None
        key = t.untyped_storage().data_ptr()
        if key not in storages:
            source = t.untyped_storage()
            # A fresh storage, then a copy: `storage.to(device)` would hand back the same storage on its own device.
            storages[key] = torch.UntypedStorage(source.nbytes(), device=device or source.device).copy_(source)
        storage = storages[key]
        view = torch.empty(0, dtype=t.dtype, device=storage.device)
        return view.set_(storage, t.storage_offset(), t.shape, t.stride())

    return dict(
        tensors={k: clone_view(v) for k, v in inp["tensors"].items()},
        buffers={k: clone_view(v) for k, v in inp["buffers"].items()},
        kwargs=dict(inp["kwargs"]),
    )


def call_kernel(fn, inp: dict, **extra) -> None:
    """``fn`` (caovan's entry, the oracle or vLLM's replay) on the scenario's tensors, caovan's calling convention."""
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


def max_abs(x: torch.Tensor, y: torch.Tensor) -> float:
    if x.numel() == 0:
        return 0.0
    return (x.double() - y.double()).abs().max().item()


def expected_writes(inp: dict) -> tuple[list[int], list[int]]:
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


def view_mask(buf: torch.Tensor, view: torch.Tensor, written_blocks: list[int]) -> torch.Tensor:
    """Boolean mask over `buf`: True where `view` blocks not in `written_blocks` or padding lie."""
    written = torch.zeros(buf.shape, dtype=torch.bool)
    as_view = written.as_strided(view.shape, view.stride(), view.storage_offset())
    for blk in written_blocks:
        as_view[blk] = True
    return ~written


def interpreter_bf16_products_broken() -> str | None:
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
        f"operands without upcasting, so its error cannot be measured under this interpreter (caovan's "
        f"kernels upcast first; tests/kernels checks them in bf16 against the fp64 oracle)"
    )


def launch_config_for(sc: Scenario):
    """The ``sm75`` entry (the launch values an RTX 2080 Ti runs) with the scenario's kernel options switched on;
    a fuzzed GPU case's shipped entry as it is (``"device"``: None, caovan's pick for the GPU)."""
    import triton

    from caovan.kernels.gdn_spec_decode.launch_configs import LAUNCH_CONFIGS, VGdnLaunchConfig

    entry = getattr(sc, "entry", None)
    if entry is not None:
        return None if entry == "device" else LAUNCH_CONFIGS[entry]

    sm75 = LAUNCH_CONFIGS["sm75"]
    split = sc.row_lanes < 32
    block = min(triton.next_power_of_2(sc.bv), triton.next_power_of_2(sc.head_v_dim))  # the block the plan runs
    return replace(
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


def run_caovan(inp: dict, sc: Scenario) -> dict:
    """caovan's kernels on a copy of ``inp`` (interpreted), with the scenario's launch configuration."""
    from caovan.kernels.gdn_spec_decode import gdn_spec_decode

    ours = clone_inputs(inp)
    with warnings.catch_warnings():
        # Our kernels mask every lane they compute on: an overflow or NaN anywhere is a bug.
        warnings.simplefilter("error", RuntimeWarning)
        call_kernel(gdn_spec_decode, ours, launch_config=launch_config_for(sc))
    return ours


def run_vllm(core, inp: dict) -> dict:
    """vLLM's replay (``caovan.bench.vllm_spec_path.VllmSpecCore``) on a copy of ``inp``."""
    theirs = clone_inputs(inp)
    with warnings.catch_warnings():
        # vLLM's conv computes on lanes past conv_dim that it loads without `other=` (junk values under the
        # interpreter, never stored): numpy overflow warnings there are noise.
        warnings.simplefilter("ignore", RuntimeWarning)
        call_kernel(core, theirs)
    return theirs


def run_oracle(inp: dict) -> dict:
    """The float64 oracle on a copy of ``inp``."""
    from caovan.kernels.gdn_spec_decode.naive import gdn_spec_decode_reference

    ref = clone_inputs(inp)
    call_kernel(gdn_spec_decode_reference, ref)
    return ref
