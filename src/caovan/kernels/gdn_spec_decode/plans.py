"""Launch plans: everything the two launches of one argument layout need, worked out once and cached.

A plan is made the first time a layout (dtypes, shapes, strides, devices and options: the entry's plan key)
is seen: the arguments are validated, then the block sizes, grids, launch options and the kernels' scalar
arguments are derived. Later calls with the same key only look the plan up.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch
import triton

from ...log import logger
from . import launcher, row_butterfly
from .launch_configs import ArchLaunchConfig, config_for
from .occupancy import SMLimits, choose_value_block, resident_programs_per_sm, value_block_candidates
from .triton_kernels import _caovan_sm75_fused_v_gdn_spec_decode_kernel
from .validation import validate


@dataclass(frozen=True)
class LaunchPlan:
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
    # q/k scratch reused by eager calls, one per CUDA stream (see scratch.qk_scratch)
    scratch_by_stream: dict = field(default_factory=dict, compare=False, repr=False)


#: Plans by the entry's plan key. The entry reads it as ``plans.cached`` on every call.
cached: dict[tuple, LaunchPlan] = {}
MAX_CACHED = 4096  # a model has a handful of layouts; the bound only guards against misuse

_config_by_device: dict[int, ArchLaunchConfig] = {}


def block_sizes(K: int, V: int, width: int, t_max: int, bv: int) -> tuple[int, int, int, int]:
    """(BK, BV, BU, BT) for one shape: BV as the launch entry asks (the one-wave rule may raise it),
    BU covers the W - 2 + T_max conv positions, BT the T_max tokens."""
    BK = triton.next_power_of_2(K)
    BV = min(triton.next_power_of_2(bv), triton.next_power_of_2(V))
    BU = triton.next_power_of_2(width - 2 + t_max)
    BT = triton.next_power_of_2(t_max)
    return BK, BV, BU, BT


def launch_config_for(device: torch.device) -> ArchLaunchConfig:
    """The launch configuration of this device's architecture (cached per device)."""
    index = device.index if device.type == "cuda" else -1
    config = _config_by_device.get(index)
    if config is None:
        # CPU only reaches here under the interpreter: use the SM75 configuration.
        capability = torch.cuda.get_device_capability(device) if index >= 0 else (7, 5)
        config = _config_by_device[index] = config_for(capability)
    return config


def validate_and_plan(
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
) -> LaunchPlan:
    """Full validation (ValueError naming the tensor) and the launch constants of one layout."""
    call = validate(
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
    )
    N, HV, width, device = call.N, call.HV, call.width, call.device
    num_rows, num_spec_tokens = call.num_rows, call.num_spec_tokens

    config = launch_config if launch_config is not None else launch_config_for(device)
    v_config = config.v_gdn
    BK, BV, BU, BT = block_sizes(K, V, width, call.t_max, v_config.BV)
    use_pdl = launcher.use_pdl(config, device)
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
    if N > 0 and device.type == "cuda" and not launcher.INTERPRETED:
        v_args = (
            mixed_qkv, a, b, A_log, dt_bias, conv_weight, conv_bias, conv_state, ssm_state,
            query_start_loc, state_indices, num_accepted_tokens, token_index, torch.float32, out,
        )  # fmt: skip
        BV = fit_value_block(
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
            butterfly = row_butterfly_layout_holds(
                device,
                (*v_args, *v_tail(BV, stagger, write_through_last, True)),
                (triton.cdiv(V, BV), N * HV, 1),
                v_config,
                use_pdl,
                v_config.options_for(BV, split_rows)[0],
            )
    num_v_blocks = triton.cdiv(V, BV)
    return LaunchPlan(
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


def fit_value_block(
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
    limits = sm_limits(device)

    def resident(bv: int) -> int:
        with launcher.device_guard(device):
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


def row_butterfly_layout_holds(
    device: torch.device, v_args: tuple, grid: tuple, v_config, use_pdl: bool, maxnreg: int | None
) -> bool:
    """Whether the V/GDN kernel compiled with the row butterfly lays its partial sums out as the PTX assumes.

    The kernel is compiled as the launch will run it (Triton's ``warmup``: no launch, cached for the launch) and
    its TTGIR read; where the layout differs (another Triton), the call runs Triton's own reductions instead
    and one line says why."""
    with launcher.device_guard(device):
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


def sm_limits(device: torch.device) -> SMLimits:
    limits = _sm_limits_by_device.get(device.index)
    if limits is None:
        limits = _sm_limits_by_device[device.index] = SMLimits.of_device(torch.cuda.get_device_properties(device))
    return limits
