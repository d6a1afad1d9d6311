"""GatedDeltaNet speculative-decode (MTP verify) step in two Triton launches.

``gdn_spec_decode`` does, for a batch of spec sequences, what vLLM 0.21.0 does with
``causal_conv1d_update(..., num_accepted_tokens=..., query_start_loc=...)`` followed by
``fused_sigmoid_gating_delta_rule_update(..., use_qk_l2norm_in_kernel=True,
inplace_final_state=True)``: conv state and SSM state updated in place, output written into the
caller's buffer. ``naive.gdn_spec_decode_reference`` is the float64 oracle with the same
arguments.

The Python entry runs on every GDN layer of every decode step (eagerly under PIECEWISE CUDA
graphs), so it stays lean: shape/dtype/stride checks on tensor metadata only, no host sync, one
fp32 scratch allocation, two launches.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch
import triton
from triton import knobs
from triton.runtime.jit import JITFunction

from ...log import logger
from . import row_butterfly
from .launch_configs import ArchLaunchConfig, config_for
from .occupancy import SMLimits, choose_value_block, resident_programs_per_sm, value_block_candidates
from .triton_kernels import (
    _caovan_sm75_fused_v_gdn_spec_decode_kernel,
    _caovan_sm75_prepare_qk_conv_spec_decode_kernel,
)

__all__ = ["KERNEL_NAMES", "gdn_spec_decode"]

KERNEL_NAMES = (
    "_caovan_sm75_prepare_qk_conv_spec_decode_kernel",
    "_caovan_sm75_fused_v_gdn_spec_decode_kernel",
)

_FLOAT_DTYPES = frozenset((torch.float16, torch.bfloat16, torch.float32))
_INDEX_DTYPES = frozenset((torch.int32, torch.int64))
_MAX_GRID_Y = 65535  # CUDA limit of gridDim.y, which carries N * HV

# True when TRITON_INTERPRET=1 was set before this package was imported: the kernels then run
# on CPU tensors (tests); otherwise CPU tensors are refused with a clear message.
_INTERPRETED = not isinstance(_caovan_sm75_prepare_qk_conv_spec_decode_kernel, JITFunction)

_config_by_device: dict[int, ArchLaunchConfig] = {}


def _fail(name: str, expected: str, got: object) -> None:
    raise ValueError(f"gdn_spec_decode: {name}: expected {expected}, got {got}")


def _check_float(name: str, t: torch.Tensor, ndim: int) -> None:
    if t.dtype not in _FLOAT_DTYPES:
        _fail(name, "dtype float16, bfloat16 or float32", t.dtype)
    if t.ndim != ndim:
        _fail(name, f"{ndim}-D tensor", f"shape {tuple(t.shape)}")


def _check_index(name: str, t: torch.Tensor, ndim: int) -> None:
    if t.dtype not in _INDEX_DTYPES:
        _fail(name, "index dtype int32 or int64", t.dtype)
    if t.ndim != ndim:
        _fail(name, f"{ndim}-D tensor", f"shape {tuple(t.shape)}")
    if t.shape[-1] > 1 and t.stride(-1) != 1:
        _fail(name, "stride 1 along its last dimension", f"strides {t.stride()}")


def _check_written(name: str, t: torch.Tensor) -> None:
    # Written in place by many programs at once: a zero stride over more than one element (an expand()ed view)
    # makes several written elements one memory location, and the writes race.
    for size, stride in zip(t.shape, t.stride(), strict=True):
        if stride == 0 and size > 1:
            _fail(
                name,
                "no zero stride over a dimension of size > 1 (it is written in place: not an expand()ed view)",
                f"shape {tuple(t.shape)} strides {t.stride()}",
            )


def _block_sizes(K: int, V: int, width: int, t_max: int, bv: int) -> tuple[int, int, int, int]:
    """(BK, BV, BU, BT) for one shape: BV as the launch entry asks (the one-wave rule may raise it),
    BU covers the W - 2 + T_max conv positions, BT the T_max tokens."""
    BK = triton.next_power_of_2(K)
    BV = min(triton.next_power_of_2(bv), triton.next_power_of_2(V))
    BU = triton.next_power_of_2(width - 2 + t_max)
    BT = triton.next_power_of_2(t_max)
    return BK, BV, BU, BT


def _launch_config(device: torch.device) -> ArchLaunchConfig:
    index = device.index if device.type == "cuda" else -1
    config = _config_by_device.get(index)
    if config is None:
        # CPU only reaches here under the interpreter: use the SM75 configuration.
        capability = torch.cuda.get_device_capability(device) if index >= 0 else (7, 5)
        config = _config_by_device[index] = config_for(capability)
    return config


@dataclass(frozen=True)
class _Plan:
    """Everything a launch needs, derived from tensor metadata and options after full
    validation; cached per key (see gdn_spec_decode)."""

    N: int
    num_spec_tokens: int
    scratch_shape: tuple[int, int, int, int]
    qk_grid: tuple[int, int, int]
    v_grid: tuple[int, int, int]
    v_block: int  # BV the V/GDN kernel runs with (see occupancy.py)
    qk_tail: tuple  # scale, strides and constexprs of the QK kernel, in signature order
    v_tail: tuple
    qk_warps: int
    qk_stages: int
    v_warps: int
    v_stages: int
    v_maxnreg: int | None  # register cap at the plan's BV (None: ptxas chooses)
    row_lanes: int  # lanes per row of the V/GDN kernel's state slab (32: a row spans the warp; see the kernel)
    row_butterfly: bool  # the split rows reduced by row_butterfly's PTX (its layout checked on this Triton)
    # Programmatic dependent launches: the Q/K kernel of the kernel before it, the V/GDN kernel of the Q/K kernel
    pdl: bool
    stagger: bool  # half of the V/GDN programs start behind the Q/K kernel (large state writes, PDL only)
    write_through_last: bool  # the last token's state stored write-through (calls writing most of L2 in state)
    # q/k scratch reused by eager calls, one per CUDA stream (see _qk_scratch)
    scratch_by_stream: dict = field(default_factory=dict, compare=False, repr=False)


_plans: dict[tuple, _Plan] = {}
_MAX_PLANS = 4096  # a model has a handful of layouts; the bound only guards against misuse


def gdn_spec_decode(
    mixed_qkv: torch.Tensor,
    a: torch.Tensor,
    b: torch.Tensor,
    A_log: torch.Tensor,
    dt_bias: torch.Tensor,
    conv_weight: torch.Tensor,
    conv_bias: torch.Tensor | None,
    conv_state: torch.Tensor,
    ssm_state: torch.Tensor,
    query_start_loc: torch.Tensor,
    state_indices: torch.Tensor,
    num_accepted_tokens: torch.Tensor,
    out: torch.Tensor,
    *,
    num_k_heads: int,
    head_k_dim: int,
    head_v_dim: int,
    ssm_layout: str = "vk",
    null_slot_max: int = 0,
    token_index: torch.Tensor | None = None,
    launch_config: ArchLaunchConfig | None = None,
) -> None:
    """Conv update + gated delta rule for N speculative-decode sequences, in place.

    mixed_qkv    (num_tokens, 2*H*K + HV*V) fp16/bf16/fp32, packed [q | k | v], channel stride 1
    a, b         (num_tokens, HV) gating inputs
    A_log        (HV,), dt_bias (HV,)
    conv_weight  (conv_dim, width); conv_bias (conv_dim,) or None
    conv_state   (num_blocks, conv_dim, state_len) logical dim-first view (any strides),
                 state_len >= width - 2 + T_max
    ssm_state    (num_blocks, HV, V, K) for ssm_layout "vk", (num_blocks, HV, K, V) for "kv"
    query_start_loc (N + 1,), state_indices (N' >= N, T_max), num_accepted_tokens (N',): int32/int64
    out          (num_tokens_total, HV, V), written in place (last-dim stride 1)
    token_index  optional (num_spec_tokens,): spec token i lives at row token_index[i] of
                 mixed_qkv / a / b / out; None: row i.
    null_slot_max: a state index <= this means "no slot" (0 for vLLM >= 0.20, -1 before).
    launch_config: override of the per-architecture launch configuration (tests, tuning).

    Sequences whose conv slot (column 0) or initial slot (column num_accepted_tokens - 1) is null
    get zero output rows and no SSM state read or write; the conv state is still updated when
    column 0 is valid, as vLLM does.
    """
    # Everything validation looks at, as one hashable key (full shapes: a handful of plans per
    # batch size is cheaper than slicing shapes on every call). Validation and the launch
    # constants run once per key; the common path is this tuple, one dict lookup and the two
    # launches. Only metadata is read: no host sync, graph-capture safe.
    ti = token_index
    cb = conv_bias
    try:
        key = (
            mixed_qkv.dtype,
            mixed_qkv.shape,
            mixed_qkv.stride(),
            mixed_qkv.device,
            a.dtype,
            a.shape,
            a.stride(),
            a.device,
            b.dtype,
            b.shape,
            b.stride(),
            b.device,
            A_log.dtype,
            A_log.shape,
            A_log.stride(),
            A_log.device,
            dt_bias.dtype,
            dt_bias.shape,
            dt_bias.stride(),
            dt_bias.device,
            conv_weight.dtype,
            conv_weight.shape,
            conv_weight.stride(),
            conv_weight.device,
            None if cb is None else (cb.dtype, cb.shape, cb.stride(), cb.device),
            conv_state.dtype,
            conv_state.shape,
            conv_state.stride(),
            conv_state.device,
            ssm_state.dtype,
            ssm_state.shape,
            ssm_state.stride(),
            ssm_state.device,
            query_start_loc.dtype,
            query_start_loc.shape,
            query_start_loc.stride(),
            query_start_loc.device,
            state_indices.dtype,
            state_indices.shape,
            state_indices.stride(),
            state_indices.device,
            num_accepted_tokens.dtype,
            num_accepted_tokens.shape,
            num_accepted_tokens.stride(),
            num_accepted_tokens.device,
            out.dtype,
            out.shape,
            out.stride(),
            out.device,
            None if ti is None else (ti.dtype, ti.shape, ti.stride(), ti.device),
            num_k_heads,
            head_k_dim,
            head_v_dim,
            ssm_layout,
            null_slot_max,
            # Equal values of other types (2.0, True) hash like the int: without their types they would take
            # the int's plan instead of being refused.
            type(num_k_heads),
            type(head_k_dim),
            type(head_v_dim),
            type(null_slot_max),
            launch_config,
        )
        plan = _plans.get(key)
    except (AttributeError, TypeError, RuntimeError) as exc:
        # Not a tensor where one goes (no .dtype / .stride()), a sparse tensor (no strides) or an unhashable
        # option: the validation below names it; what it lets through is raised as it was.
        key, plan, unkeyed = None, None, exc
    if plan is None:
        plan = _validate_and_plan(
            mixed_qkv,
            a,
            b,
            A_log,
            dt_bias,
            conv_weight,
            conv_bias,
            conv_state,
            ssm_state,
            query_start_loc,
            state_indices,
            num_accepted_tokens,
            out,
            num_k_heads,
            head_k_dim,
            head_v_dim,
            ssm_layout,
            null_slot_max,
            token_index,
            launch_config,
        )
        if key is None:
            raise unkeyed
        if len(_plans) >= _MAX_PLANS:
            _plans.clear()
            _direct.clear()
        _plans[key] = plan
    N = plan.N
    if N == 0 or plan.num_spec_tokens == 0:
        return

    device = mixed_qkv.device
    with _device_guard(device):
        stream = None if _INTERPRETED else _current_stream(device.index)
        # Normalised q/k, computed once per key head and read by its HV/H value heads.
        qk_scratch = _qk_scratch(plan, device, stream)
        # The V/GDN kernel's tensor arguments in signature order; the Q/K kernel's are a subset (_QK_TENSORS).
        tensors = (
            mixed_qkv, a, b, A_log, dt_bias, conv_weight, conv_bias, conv_state, ssm_state,
            query_start_loc, state_indices, num_accepted_tokens, token_index, qk_scratch, out,
        )  # fmt: skip
        fast = _direct.get(key)
        if fast is not None and not _launch_hooks_set():
            ptrs = _aligned_pointers(tensors)
            if ptrs is not None:
                (qk_launch, qk_grid, qk_head), (v_launch, v_grid, v_head) = fast
                qk_launch(*qk_grid, stream, *qk_head, *[ptrs[i] for i in _QK_TENSORS], *plan.qk_tail)
                v_launch(*v_grid, stream, *v_head, *ptrs, *plan.v_tail)
                return
        qk_kernel = _caovan_sm75_prepare_qk_conv_spec_decode_kernel[plan.qk_grid](
            *[tensors[i] for i in _QK_TENSORS], *plan.qk_tail,
            num_warps=plan.qk_warps, num_stages=plan.qk_stages, launch_pdl=plan.pdl,
        )  # fmt: skip
        v_kernel = _caovan_sm75_fused_v_gdn_spec_decode_kernel[plan.v_grid](
            *tensors, *plan.v_tail,
            num_warps=plan.v_warps, num_stages=plan.v_stages, launch_pdl=plan.pdl, maxnreg=plan.v_maxnreg,
        )  # fmt: skip
        if not _INTERPRETED and _aligned_pointers(tensors) is not None and not _launch_hooks_set():
            _direct[key] = (_direct_launch(qk_kernel, plan.qk_grid), _direct_launch(v_kernel, plan.v_grid))


def _qk_scratch(plan: _Plan, device: torch.device, stream: int | None) -> torch.Tensor:
    """The q/k scratch of one call: reused by the eager calls of a plan on one stream, fresh otherwise.

    Allocating it (``torch.empty``) was ~3 us of a ~24 us eager call on an H200 host, paid for every GDN layer
    of every decode step under PIECEWISE graphs. Reuse is safe on one stream: the Q/K kernel of the next call
    writes it only after the V/GDN kernel that read it is done (stream order; with programmatic dependent
    launch the Q/K kernel's ``gdc_wait()`` waits for the kernel before it). A call on another stream gets its
    own buffer. Under CUDA-graph capture a fresh buffer is taken from the graph's pool, so that a replay never
    shares memory with eager calls or other graphs. Interpreted (CPU) calls have no stream: fresh each time.
    """
    if stream is None or torch.cuda.is_current_stream_capturing():
        return torch.empty(plan.scratch_shape, dtype=torch.float32, device=device)
    scratch = plan.scratch_by_stream.get(stream)
    if scratch is None:
        scratch = plan.scratch_by_stream[stream] = torch.empty(plan.scratch_shape, dtype=torch.float32, device=device)
    return scratch


# Direct launches: Triton's ``kernel[grid](...)`` re-binds and re-specialises every argument in Python on
# each call (~10-20 us per launch), which under vLLM's PIECEWISE graphs runs for every GDN layer of every
# decode step. Once a plan's kernels are compiled, the launcher of the compiled kernel is called directly with
# the same arguments. That is only sound while Triton would pick the same compiled kernel: the plan key fixes
# dtypes, shapes, strides and options, and Triton also specialises pointers on 16-byte alignment, so the
# direct path is taken only when every pointer is 16-byte aligned (the case the cached kernel was compiled
# for; anything else goes through Triton's own dispatch). Launch hooks (profilers) also disable it. It passes
# the data pointers as ints (see _aligned_pointers).
_direct: dict[tuple, tuple] = {}


#: Positions in the V/GDN kernel's tensor arguments of the Q/K kernel's, in its signature order: mixed_qkv,
#: conv_weight, conv_bias, conv_state, query_start_loc, state_indices, num_accepted_tokens, token_index, scratch.
_QK_TENSORS = (0, 5, 6, 7, 9, 10, 11, 12, 13)


def _aligned_pointers(tensors: tuple) -> tuple | None:
    """The tensors' data pointers as ints (None stays None), or None when one is not 16-byte aligned.

    The direct launch passes these ints in place of the tensors. For a tensor argument Triton's launcher calls
    ``data_ptr()`` and then ``cuPointerGetAttribute`` to check that the pointer is device memory, a driver call
    per pointer (24 per call here); the plan key fixes every tensor's device, validated once per key as the
    plan's CUDA device, so that check cannot fail on this path. (``isinstance(x, torch.Tensor)`` is avoided:
    it goes through torch's Python ``__instancecheck__``.)
    """
    ptrs = tuple(None if t is None else t.data_ptr() for t in tensors)
    bits = 0
    for p in ptrs:
        if p is not None:
            bits |= p
    return ptrs if bits & 15 == 0 else None


# Triton releases whose CudaLauncher.__call__ was read for _direct_launch (triton/backends/nvidia/driver.py:
# it allocates the global and profile scratch buffers, then calls ``self.launch(gridX, gridY, gridZ, stream,
# function, launch_cooperative_grid, launch_pdl, global_scratch, profile_scratch, *args)``).
_LAUNCHER_LAYOUT_READ = ("3.6.",)


def _direct_launch(kernel, grid: tuple) -> tuple[Callable, tuple, tuple]:
    """``(launch, grid, head)``: ``launch(*grid, stream, *head, *kernel_args)`` launches the compiled kernel.

    Triton's launcher object adds a Python frame that only allocates scratch buffers; for kernels that need
    none (ours, on the releases whose launcher was read) its C launch function is called directly, which
    saved ~0.7 us per launch on an H200 host (docs/bench/experiments/host-launch-path). Anything else keeps
    the launcher object, with the same effect.
    """
    run = kernel.run
    launch = getattr(run, "launch", None)
    if (
        triton.__version__.startswith(_LAUNCHER_LAYOUT_READ)
        and callable(launch)
        and getattr(run, "global_scratch_size", None) == 0
        and getattr(run, "profile_scratch_size", None) == 0
        and getattr(run, "num_ctas", None) == 1
        and isinstance(getattr(run, "launch_cooperative_grid", None), bool)
        and isinstance(getattr(run, "launch_pdl", None), bool)
    ):
        head = (kernel.function, run.launch_cooperative_grid, run.launch_pdl, None, None)
        return launch, tuple(grid), (*head, kernel.packed_metadata, None, None, None)
    return run, tuple(grid), (kernel.function, kernel.packed_metadata, None, None, None)


def _launch_hooks_set() -> bool:
    """True when a profiler or tool hooked Triton launches (the direct path would bypass it).

    Triton 3.6 keeps these hooks in a ``HookChain`` (never None; empty ``calls`` means no hook); older
    releases used a plain callable or None.
    """
    for hook in (knobs.runtime.launch_enter_hook, knobs.runtime.launch_exit_hook):
        calls = getattr(hook, "calls", None)
        if calls if calls is not None else hook is not None:
            return True
    return False


def _current_stream(index: int) -> int:
    return torch._C._cuda_getCurrentRawStream(index)


def _validate_and_plan(
    mixed_qkv,
    a,
    b,
    A_log,
    dt_bias,
    conv_weight,
    conv_bias,
    conv_state,
    ssm_state,
    query_start_loc,
    state_indices,
    num_accepted_tokens,
    out,
    H,
    K,
    V,
    ssm_layout,
    null_slot_max,
    token_index,
    launch_config,
) -> _Plan:
    """Full validation (ValueError naming the tensor) and the launch constants of one layout."""
    required = (
        ("mixed_qkv", mixed_qkv),
        ("a", a),
        ("b", b),
        ("A_log", A_log),
        ("dt_bias", dt_bias),
        ("conv_weight", conv_weight),
        ("conv_state", conv_state),
        ("ssm_state", ssm_state),
        ("query_start_loc", query_start_loc),
        ("state_indices", state_indices),
        ("num_accepted_tokens", num_accepted_tokens),
        ("out", out),
    )
    optional = (("conv_bias", conv_bias), ("token_index", token_index))
    for name, t in required:
        if not isinstance(t, torch.Tensor):
            _fail(name, "a torch.Tensor", type(t).__name__)
    for name, t in optional:
        if t is not None and not isinstance(t, torch.Tensor):
            _fail(name, "a torch.Tensor or None", type(t).__name__)
    for name, t in (*required, *optional):
        # The kernels address every tensor through data pointer and strides: sparse layouts have neither.
        if t is not None and t.layout != torch.strided:
            _fail(name, "a dense (strided) tensor", t.layout)
    if launch_config is not None and not isinstance(launch_config, ArchLaunchConfig):
        _fail("launch_config", "an ArchLaunchConfig or None", type(launch_config).__name__)
    device = mixed_qkv.device
    if ssm_layout != "vk" and ssm_layout != "kv":
        _fail("ssm_layout", "'vk' or 'kv'", repr(ssm_layout))
    if type(null_slot_max) is not int:
        _fail("null_slot_max", "an int (0 for vLLM >= 0.20, -1 before)", repr(null_slot_max))
    for name, size in (("num_k_heads", H), ("head_k_dim", K), ("head_v_dim", V)):
        if type(size) is not int:
            _fail(name, "an int", repr(size))
    _check_float("A_log", A_log, 1)
    HV = A_log.shape[0]
    if H <= 0 or K <= 0 or V <= 0 or HV % H != 0 or HV == 0:
        _fail(
            "num_k_heads/head_k_dim/head_v_dim",
            f"positive sizes with HV (= A_log.shape[0] = {HV}) a multiple of num_k_heads",
            f"num_k_heads={H}, head_k_dim={K}, head_v_dim={V}",
        )
    conv_dim = 2 * H * K + HV * V
    _check_float("mixed_qkv", mixed_qkv, 2)
    num_rows = mixed_qkv.shape[0]
    if mixed_qkv.shape[1] != conv_dim:
        _fail("mixed_qkv", f"shape (num_tokens, {conv_dim}) (2*H*K + HV*V)", tuple(mixed_qkv.shape))
    if mixed_qkv.stride(1) != 1:
        _fail("mixed_qkv", "channel stride 1", f"strides {mixed_qkv.stride()}")
    for name, t in (("a", a), ("b", b)):
        _check_float(name, t, 2)
        if t.shape[1] != HV or t.shape[0] < num_rows:
            _fail(name, f"shape (>= {num_rows}, {HV})", tuple(t.shape))
    for name, t in (("A_log", A_log), ("dt_bias", dt_bias)):
        _check_float(name, t, 1)
        if t.shape[0] != HV or (HV > 1 and t.stride(0) != 1):
            _fail(name, f"contiguous shape ({HV},)", f"shape {tuple(t.shape)} strides {t.stride()}")
    _check_float("conv_weight", conv_weight, 2)
    width = conv_weight.shape[1]
    if conv_weight.shape[0] != conv_dim or width < 2:
        _fail("conv_weight", f"shape ({conv_dim}, width >= 2)", tuple(conv_weight.shape))
    if conv_bias is not None:
        _check_float("conv_bias", conv_bias, 1)
        if conv_bias.shape[0] != conv_dim or conv_bias.stride(0) != 1:
            _fail(
                "conv_bias",
                f"contiguous shape ({conv_dim},)",
                f"shape {tuple(conv_bias.shape)} strides {conv_bias.stride()}",
            )
    _check_index("query_start_loc", query_start_loc, 1)
    N = query_start_loc.shape[0] - 1
    if N < 0:
        _fail("query_start_loc", "shape (N + 1,)", tuple(query_start_loc.shape))
    _check_index("state_indices", state_indices, 2)
    t_max = state_indices.shape[1]
    if state_indices.shape[0] < N or t_max < 1:
        _fail("state_indices", f"shape (>= {N}, T_max >= 1)", tuple(state_indices.shape))
    _check_index("num_accepted_tokens", num_accepted_tokens, 1)
    if num_accepted_tokens.shape[0] < N:
        _fail("num_accepted_tokens", f"shape (>= {N},)", tuple(num_accepted_tokens.shape))
    _check_float("conv_state", conv_state, 3)
    if conv_state.shape[1] != conv_dim or conv_state.shape[2] < width - 2 + t_max:
        _fail(
            "conv_state",
            f"shape (num_blocks, {conv_dim}, >= {width - 2 + t_max}) (dim-first view, state_len >= width - 2 + T_max)",
            tuple(conv_state.shape),
        )
    _check_written("conv_state", conv_state)
    _check_float("ssm_state", ssm_state, 4)
    expected_ssm = (HV, V, K) if ssm_layout == "vk" else (HV, K, V)
    if ssm_state.shape[1:] != expected_ssm:
        _fail(
            "ssm_state",
            f"shape (num_blocks, {', '.join(map(str, expected_ssm))}) for ssm_layout={ssm_layout!r}",
            tuple(ssm_state.shape),
        )
    _check_written("ssm_state", ssm_state)
    _check_float("out", out, 3)
    if out.shape[0] < num_rows or out.shape[1] != HV or out.shape[2] != V:
        _fail("out", f"shape (>= {num_rows}, {HV}, {V})", tuple(out.shape))
    if V > 1 and out.stride(2) != 1:
        _fail("out", "stride 1 along head_v_dim", f"strides {out.stride()}")
    _check_written("out", out)
    if token_index is None:
        num_spec_tokens = num_rows
    else:
        _check_index("token_index", token_index, 1)
        # No activation rows: every row token_index could name is out of bounds, so a launch could only read
        # and write outside the tensors. Nothing is a spec token: an empty batch, a no-op.
        num_spec_tokens = token_index.shape[0] if num_rows > 0 else 0
    for name, t in (
        ("a", a),
        ("b", b),
        ("A_log", A_log),
        ("dt_bias", dt_bias),
        ("conv_weight", conv_weight),
        ("conv_bias", conv_bias),
        ("conv_state", conv_state),
        ("ssm_state", ssm_state),
        ("query_start_loc", query_start_loc),
        ("state_indices", state_indices),
        ("num_accepted_tokens", num_accepted_tokens),
        ("out", out),
        ("token_index", token_index),
    ):
        if t is not None and t.device != device:
            _fail(name, f"a tensor on {device} (like mixed_qkv)", t.device)
    if device.type != "cuda" and not (device.type == "cpu" and _INTERPRETED):
        _fail("mixed_qkv", "CUDA tensors (CPU only with TRITON_INTERPRET=1 set before importing triton)", device)
    if N * HV > _MAX_GRID_Y:
        _fail("query_start_loc", f"N * HV <= {_MAX_GRID_Y} (CUDA grid limit)", f"N={N}, HV={HV}")

    config = launch_config if launch_config is not None else _launch_config(device)
    v_config = config.v_gdn
    BK, BV, BU, BT = _block_sizes(K, V, width, t_max, v_config.BV)
    use_pdl = _use_pdl(config, device)
    has_bias = conv_bias is not None
    has_token_index = token_index is not None
    s_ssm_block, s_ssm_head, s_ssm_2, s_ssm_3 = ssm_state.stride()
    # The kernels address the slab as (v, k); "kv" storage just swaps the two strides.
    s_ssm_v, s_ssm_k = (s_ssm_2, s_ssm_3) if ssm_layout == "vk" else (s_ssm_3, s_ssm_2)
    s_cs_block, s_cs_dim, s_cs_pos = conv_state.stride()
    s_w_dim, s_w_width = conv_weight.stride()
    s_x_token = mixed_qkv.stride(0)
    s_si_seq = state_indices.stride(0)
    qk_tail = (
        K**-0.5,
        s_x_token,
        s_w_dim,
        s_w_width,
        s_cs_block,
        s_cs_dim,
        s_cs_pos,
        s_si_seq,
        H,
        K,
        BK,
        width,
        BU,
        null_slot_max,
        has_bias,
        has_token_index,
        use_pdl,
    )

    # Only a programmatic dependent launch has a wait to start half of the programs behind (see the kernel).
    state_write_bytes = num_spec_tokens * HV * V * K * ssm_state.element_size()
    stagger = use_pdl and config.stagger_on(state_write_bytes)
    write_through_last = config.write_through_last_on(state_write_bytes)
    # The split tile needs 4 key columns per lane, and it picks token rows and state slots as int32: every value
    # indexes a tensor dimension, which must then be shorter than 2**31.
    split_rows = (
        config.row_split_on(state_write_bytes, ssm_state.element_size())
        and v_config.row_split_lanes is not None
        and BK >= 4 * v_config.row_split_lanes
        and max(num_rows, ssm_state.shape[0]) < 2**31
    )

    def slab_constants(BV: int) -> tuple[bool, int, int]:
        # (CONST_SLAB_OFFSETS, SLAB_STRIDE_V, SLAB_STRIDE_K): the strides compiled in where the entry asks for it
        # at this block and every offset the kernel forms (padded rows and columns too) fits int32.
        largest = (triton.cdiv(V, BV) * BV - 1) * s_ssm_v + (BK - 1) * s_ssm_k
        if v_config.options_for(BV, split_rows)[1] and largest < 2**31:
            return True, s_ssm_v, s_ssm_k
        return False, 0, 0

    def v_tail(BV: int, stagger: bool = False, write_through_last: bool = False, butterfly: bool = False) -> tuple:
        return (
            s_x_token,
            a.stride(0),
            a.stride(1),
            b.stride(0),
            b.stride(1),
            s_w_dim,
            s_w_width,
            s_cs_block,
            s_cs_dim,
            s_cs_pos,
            s_ssm_block,
            s_ssm_head,
            s_ssm_v,
            s_ssm_k,
            s_si_seq,
            out.stride(0),
            out.stride(1),
            H,
            HV,
            K,
            V,
            BK,
            BV,
            width,
            BU,
            BT,
            null_slot_max,
            has_bias,
            has_token_index,
            use_pdl,
            stagger,
            write_through_last,
            *slab_constants(BV),
            v_config.row_lanes_for(BV, split_rows),
            butterfly,
        )

    butterfly = False
    if N > 0 and device.type == "cuda" and not _INTERPRETED:
        v_args = (
            mixed_qkv, a, b, A_log, dt_bias, conv_weight, conv_bias, conv_state, ssm_state,
            query_start_loc, state_indices, num_accepted_tokens, token_index, torch.float32, out,
        )  # fmt: skip
        BV = _fit_value_block(
            device,
            BV,
            BK,
            V,
            N * HV,
            v_config,
            use_pdl,
            lambda bv: (*v_args, *v_tail(bv)),
            lambda bv: v_config.options_for(bv, split_rows)[0],
        )
        if v_config.row_butterfly_for(BV, split_rows):
            butterfly = _row_butterfly_layout_holds(
                device,
                (*v_args, *v_tail(BV, stagger, write_through_last, True)),
                (triton.cdiv(V, BV), N * HV, 1),
                v_config,
                use_pdl,
                v_config.options_for(BV, split_rows)[0],
            )
    num_v_blocks = triton.cdiv(V, BV)
    return _Plan(
        N=N,
        num_spec_tokens=num_spec_tokens,
        scratch_shape=(num_spec_tokens, 2, H, K),
        qk_grid=(N, H, 2),  # axis 2: q, k
        v_grid=(num_v_blocks, N * HV, 1),
        v_block=BV,
        qk_tail=qk_tail,
        v_tail=v_tail(BV, stagger, write_through_last, butterfly),
        qk_warps=config.qk.num_warps,
        qk_stages=config.qk.num_stages,
        v_warps=v_config.num_warps,
        v_stages=v_config.num_stages,
        v_maxnreg=v_config.options_for(BV, split_rows)[0],
        row_lanes=v_config.row_lanes_for(BV, split_rows),
        row_butterfly=butterfly,
        pdl=use_pdl,
        stagger=stagger,
        write_through_last=write_through_last,
    )


def _fit_value_block(
    device: torch.device,
    preferred: int,
    BK: int,
    V: int,
    programs_per_block_column: int,
    v_config,
    use_pdl: bool,
    v_args_for: Callable[[int], tuple],
    maxnreg_for: Callable[[int], int | None],
) -> int:
    """The launch configuration's BV, or a larger one when its grid would need more than one wave here.

    Each candidate is compiled (Triton's ``warmup``: no launch, no synchronisation, cached for the real
    launch) to read its register count; the scratch is passed as its dtype, which Triton specialises like
    the 16-byte-aligned buffer the launch passes.
    """
    candidates = value_block_candidates(preferred, BK, v_config.num_warps, triton.next_power_of_2(V))
    if len(candidates) == 1:
        return preferred
    limits = _sm_limits(device)

    def resident(bv: int) -> int:
        with _device_guard(device):
            kernel = _caovan_sm75_fused_v_gdn_spec_decode_kernel.warmup(
                *v_args_for(bv),
                grid=(triton.cdiv(V, bv), programs_per_block_column, 1),
                num_warps=v_config.num_warps,
                num_stages=v_config.num_stages,
                launch_pdl=use_pdl,
                maxnreg=maxnreg_for(bv),
            )
            kernel.run  # noqa: B018 - loads the module: n_regs is read from the loaded function
        per_sm = resident_programs_per_sm(kernel.n_regs, v_config.num_warps, kernel.metadata.shared, limits)
        return per_sm * limits.multiprocessors

    return choose_value_block(candidates, lambda bv: triton.cdiv(V, bv) * programs_per_block_column, resident)


_row_butterfly_refused: set[str] = set()  # the reasons logged so far (one line each)


def _row_butterfly_layout_holds(
    device: torch.device, v_args: tuple, grid: tuple, v_config, use_pdl: bool, maxnreg: int | None
) -> bool:
    """Whether the V/GDN kernel compiled with the row butterfly lays its partial sums out as the PTX assumes.

    The kernel is compiled as the launch will run it (Triton's ``warmup``: no launch, cached for the launch) and
    its TTGIR read; where the layout differs (another Triton), the call runs Triton's own reductions instead
    and one line says why."""
    with _device_guard(device):
        kernel = _caovan_sm75_fused_v_gdn_spec_decode_kernel.warmup(
            *v_args,
            grid=grid,
            num_warps=v_config.num_warps,
            num_stages=v_config.num_stages,
            launch_pdl=use_pdl,
            maxnreg=maxnreg,
        )
    problem = row_butterfly.layout_problem(kernel.asm["ttgir"])
    if problem is not None and problem not in _row_butterfly_refused:
        _row_butterfly_refused.add(problem)
        logger.warning(
            "caovan: row butterfly off (Triton %s lays the V/GDN slab out otherwise: %s); "
            "its rows are reduced by Triton instead",
            triton.__version__,
            problem,
        )
    return problem is None


_sm_limits_by_device: dict[int, SMLimits] = {}


def _sm_limits(device: torch.device) -> SMLimits:
    limits = _sm_limits_by_device.get(device.index)
    if limits is None:
        limits = _sm_limits_by_device[device.index] = SMLimits.of_device(torch.cuda.get_device_properties(device))
    return limits


def _use_pdl(config: ArchLaunchConfig, device: torch.device) -> bool:
    """Programmatic dependent launch where the entry asks for it and the GPU has it (never interpreted)."""
    return not _INTERPRETED and device.type == "cuda" and config.pdl_on(torch.cuda.get_device_capability(device))


class _NoGuard:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


_NO_GUARD = _NoGuard()


def _device_guard(device: torch.device):
    # Triton launches on the *current* CUDA device; switch only when the tensors live elsewhere
    # (vLLM workers own one device, so the common path costs one comparison).
    # torch.cuda.current_device() minus its lazy-init check: CUDA is initialised once tensors live on it.
    if device.type == "cuda" and device.index != torch._C._cuda_getDevice():
        return torch.cuda.device(device)
    return _NO_GUARD
