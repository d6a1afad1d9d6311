"""``gdn_spec_decode``, the public entry: plan lookup by argument layout, then the two launches.

It runs on every GDN layer of every decode step (eagerly under PIECEWISE CUDA graphs), so it stays lean:
metadata only, no host sync, one dict lookup for the plan, two launches. Validation and the launch constants
are worked out once per layout (``plans``); the launch path itself is in ``launcher``.
"""

from __future__ import annotations

import torch

from . import launcher, plans
from .launch_configs import ArchLaunchConfig
from .launcher import QK_TENSORS, aligned_pointers, current_stream, device_guard, direct_launch, launch_hooks_set
from .scratch import qk_scratch
from .triton_kernels import (
    _caovan_sm75_fused_v_gdn_spec_decode_kernel,
    _caovan_sm75_prepare_qk_conv_spec_decode_kernel,
)

__all__ = ["KERNEL_NAMES", "gdn_spec_decode"]

KERNEL_NAMES = (
    "_caovan_sm75_prepare_qk_conv_spec_decode_kernel",
    "_caovan_sm75_fused_v_gdn_spec_decode_kernel",
)


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
        plan = plans.cached.get(key)
    except (AttributeError, TypeError, RuntimeError) as exc:
        # Not a tensor where one goes (no .dtype / .stride()), a sparse tensor (no strides) or an unhashable
        # option: the validation below names it; what it lets through is raised as it was.
        key, plan, unkeyed = None, None, exc
    if plan is None:
        plan = plans.validate_and_plan(
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
        if len(plans.cached) >= plans.MAX_CACHED:
            plans.cached.clear()
            launcher.direct_launches.clear()
        plans.cached[key] = plan
    N = plan.N
    if N == 0 or plan.num_spec_tokens == 0:
        return

    device = mixed_qkv.device
    with device_guard(device):
        stream = None if launcher.INTERPRETED else current_stream(device.index)
        # Normalised q/k, computed once per key head and read by its HV/H value heads.
        scratch = qk_scratch(plan, device, stream)
        # The V/GDN kernel's tensor arguments in signature order; the Q/K kernel's are a subset (QK_TENSORS).
        tensors = (
            mixed_qkv, a, b, A_log, dt_bias, conv_weight, conv_bias, conv_state, ssm_state,
            query_start_loc, state_indices, num_accepted_tokens, token_index, scratch, out,
        )  # fmt: skip
        fast = launcher.direct_launches.get(key)
        if fast is not None and not launch_hooks_set():
            ptrs = aligned_pointers(tensors)
            if ptrs is not None:
                (qk_launch, qk_grid, qk_head), (v_launch, v_grid, v_head) = fast
                qk_launch(*qk_grid, stream, *qk_head, *[ptrs[i] for i in QK_TENSORS], *plan.qk_tail)
                v_launch(*v_grid, stream, *v_head, *ptrs, *plan.v_tail)
                return
        qk_kernel = _caovan_sm75_prepare_qk_conv_spec_decode_kernel[plan.qk_grid](
            *[tensors[i] for i in QK_TENSORS], *plan.qk_tail,
            num_warps=plan.qk_warps, num_stages=plan.qk_stages, launch_pdl=plan.pdl,
        )  # fmt: skip
        v_kernel = _caovan_sm75_fused_v_gdn_spec_decode_kernel[plan.v_grid](
            *tensors, *plan.v_tail,
            num_warps=plan.v_warps, num_stages=plan.v_stages, launch_pdl=plan.pdl, maxnreg=plan.v_maxnreg,
        )  # fmt: skip
        if not launcher.INTERPRETED and aligned_pointers(tensors) is not None and not launch_hooks_set():
            launcher.direct_launches[key] = (
                direct_launch(qk_kernel, plan.qk_grid),
                direct_launch(v_kernel, plan.v_grid),
            )
