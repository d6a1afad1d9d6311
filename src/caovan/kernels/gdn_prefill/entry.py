"""``gdn_prefill``: the GDN prefill of a varlen batch, states read from and written to vLLM's cache in place.

What vLLM's prefill branch does with ``ssm_state[idx].contiguous()``, a masked zero fill, FLA's
``chunk_gated_delta_rule`` (six to eight launches) and a scatter of the final states, this does in two launches
(fused path): the WY kernel (every chunk at once) and the state kernel (every sequence, value head and value block at
once), the second reading each initial state from its cache slot and writing the final state back in place. From the
entry's ``chunked.from_tokens`` tokens in a call on (null in the shipped entries: forced only), the chunked path
(``chunked_kernels.py``) replaces the state kernel by three launches whose serial part does a third of its work per
token.
"""

from __future__ import annotations

import torch
import triton
from triton.runtime.jit import JITFunction

from .chunked_kernels import (
    _caovan_gdn_prefill_chunk_state_kernel,
    _caovan_gdn_prefill_merge_kernel,
    _caovan_gdn_prefill_output_kernel,
)
from .direct import launch_fused
from .launch_configs import (
    CHUNK,
    MAX_KEY_SLABS,
    ChunkedLaunch,
    PrefillLaunchConfig,
    block_v_of,
    config_for,
    launch_grids,
    takes_chunked_path,
)
from .triton_kernels import _caovan_gdn_prefill_state_kernel, _caovan_gdn_prefill_wy_kernel

#: Every kernel a call may launch: the WY kernel, then the fused state kernel or the chunked path's three.
KERNEL_NAMES = tuple(
    fn.__name__
    for fn in (
        _caovan_gdn_prefill_wy_kernel,
        _caovan_gdn_prefill_state_kernel,
        _caovan_gdn_prefill_merge_kernel,
        _caovan_gdn_prefill_chunk_state_kernel,
        _caovan_gdn_prefill_output_kernel,
    )
)
#: True when TRITON_INTERPRET=1 was set before import: the kernels then run on CPU tensors (tests).
INTERPRETED = not isinstance(_caovan_gdn_prefill_wy_kernel, JITFunction)
#: The tensor (or None) arguments leading each fused-path kernel's signature (the rest are scalars).
WY_TENSORS, STATE_TENSORS = 10, 11
#: Activation dtypes the kernels take (their dots run in the activation dtype, as FLA's do).
ACTIVATION_DTYPES = (torch.float16, torch.bfloat16)
_configs: dict[int, PrefillLaunchConfig] = {}


def launch_config(device: torch.device) -> PrefillLaunchConfig:
    """The launch configuration of this device's architecture (sm75 under the interpreter)."""
    if device.type != "cuda":
        return config_for((7, 5))
    index = device.index if device.index is not None else torch.cuda.current_device()
    config = _configs.get(index)
    if config is None:
        config = _configs[index] = config_for(torch.cuda.get_device_capability(index))
    return config


def _state_strides(ssm_state: torch.Tensor, ssm_layout: str) -> tuple[int, int]:
    """(stride of k, stride of v) of one head's state: vLLM's ``(V, K)`` layout or the older ``(K, V)``."""
    if ssm_layout == "vk":
        return ssm_state.stride(3), ssm_state.stride(2)
    if ssm_layout == "kv":
        return ssm_state.stride(2), ssm_state.stride(3)
    raise ValueError(f"gdn_prefill: ssm_layout must be 'vk' or 'kv', got {ssm_layout!r}")


def _check(q, k, v, g, beta, out, ssm_state, cu_seqlens, state_indices, has_initial_state) -> None:
    """One ValueError naming the argument and what was expected; nothing is launched before it passes."""
    T, H, K = q.shape[-3:]
    HV, V = v.shape[-2:]
    problems = []
    if q.dtype not in ACTIVATION_DTYPES:
        problems.append(f"q: dtype {q.dtype}, expected float16 or bfloat16")
    for name, t, shape in (("k", k, (T, H, K)), ("v", v, (T, HV, V)), ("out", out, (T, HV, V))):
        if tuple(t.shape[-3:]) != shape or t.numel() != T * shape[1] * shape[2]:
            problems.append(f"{name}: shape {tuple(t.shape)}, expected (T, heads, dim) = {shape}")
        elif t.stride(-1) != 1:
            problems.append(f"{name}: its last dimension must be contiguous (stride {t.stride(-1)})")
    for name, t in (("k", k), ("v", v)):
        if t.dtype != q.dtype:
            problems.append(f"{name}: dtype {t.dtype}, expected q's {q.dtype}")
    if q.stride(-1) != 1:
        problems.append(f"q: its last dimension must be contiguous (stride {q.stride(-1)})")
    for name, t in (("g", g), ("beta", beta)):
        if tuple(t.shape[-2:]) != (T, HV) or t.numel() != T * HV:
            problems.append(f"{name}: shape {tuple(t.shape)}, expected (T, value heads) = {(T, HV)}")
    if HV % H:
        problems.append(f"v: {HV} value heads are not a multiple of q's {H} key heads")
    if ssm_state.dim() != 4 or ssm_state.shape[1] != HV or sorted(ssm_state.shape[2:]) != sorted((V, K)):
        problems.append(f"ssm_state: shape {tuple(ssm_state.shape)}, expected (slots, {HV}, {V}, {K}) or its (K, V)")
    if cu_seqlens.dim() != 1 or cu_seqlens.shape[0] < 2 or cu_seqlens.dtype not in (torch.int32, torch.int64):
        problems.append(
            f"cu_seqlens: {cu_seqlens.dtype} of shape {tuple(cu_seqlens.shape)}, expected int32/int64 (N + 1,)"
        )
    n = cu_seqlens.shape[0] - 1
    for name, t in (("state_indices", state_indices), ("has_initial_state", has_initial_state)):
        if t is not None and (t.dim() < 1 or t.shape[0] < n):
            problems.append(f"{name}: shape {tuple(t.shape)}, expected at least {n} entries (one per sequence)")
    if state_indices is None and ssm_state.shape[0] < n:
        problems.append(f"ssm_state: {ssm_state.shape[0]} states for {n} sequences (no state_indices given)")
    devices = {t.device for t in (q, k, v, g, beta, out, ssm_state, cu_seqlens) if t is not None}
    if len(devices) != 1:
        problems.append(f"tensors on several devices: {sorted(map(str, devices))}")
    elif not INTERPRETED and next(iter(devices)).type != "cuda":
        problems.append("tensors must be on a CUDA device (CPU runs need TRITON_INTERPRET=1)")
    if problems:
        raise ValueError("gdn_prefill: " + "; ".join(problems))


def gdn_prefill(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    out: torch.Tensor,
    ssm_state: torch.Tensor,
    cu_seqlens: torch.Tensor,
    *,
    state_indices: torch.Tensor | None = None,
    has_initial_state: torch.Tensor | None = None,
    scale: float | None = None,
    use_qk_l2norm: bool = True,
    ssm_layout: str = "vk",
    null_slot_max: int = 0,
    write_final_state: bool = True,
    config: PrefillLaunchConfig | None = None,
) -> None:
    """Prefill ``cu_seqlens``' sequences: outputs into ``out``, final states into ``ssm_state`` in place.

    ``q``/``k``: (T, H, K) (or (1, T, H, K)); ``v``/``out``: (T, HV, V); ``g`` (log gates) and ``beta``: (T, HV);
    ``ssm_state``: (slots, HV, V, K) for ``ssm_layout="vk"``, (slots, HV, K, V) for ``"kv"``. Sequence ``n``
    starts from ``ssm_state[state_indices[n]]`` where ``has_initial_state[n]`` (both optional: slot ``n``, always),
    zeros otherwise; a slot ``<= null_slot_max`` is null (zeros in, nothing written). Semantics: ``naive.py``.
    """
    _check(q, k, v, g, beta, out, ssm_state, cu_seqlens, state_indices, has_initial_state)
    stride_sk, stride_sv = _state_strides(ssm_state, ssm_layout)
    T, H, K = q.shape[-3:]
    HV, V = v.shape[-2:]
    num_seqs = cu_seqlens.shape[0] - 1
    if T == 0 or num_seqs == 0:
        return
    config = config or launch_config(q.device)
    ks = min(config.key_slice, triton.next_power_of_2(K))
    vs = min(config.value_slice, triton.next_power_of_2(V))
    nk = triton.cdiv(K, ks)
    if nk > MAX_KEY_SLABS:
        raise ValueError(f"gdn_prefill: head_k_dim {K} needs {nk} slabs of {ks} keys; the kernels hold {MAX_KEY_SLABS}")
    chunked = takes_chunked_path(config, T)
    grids = launch_grids(config, T, num_seqs, HV, V)
    fp32_dots = config.fp32_dots
    w = torch.empty((T, HV, K), dtype=torch.float32 if fp32_dots else q.dtype, device=q.device)
    u = torch.empty((T, HV, V), dtype=torch.float32, device=q.device)
    # Per token and value head: the gate cumsum, then 1 / |q| and 1 / |k| where the kernels normalise q and k.
    gc = torch.empty((T, HV, 3 if use_qk_l2norm else 1), dtype=torch.float32, device=q.device)
    # The chunked path's attention rows span a pair of chunks (chunked_kernels.py).
    attn = torch.empty((T, HV, 2 * CHUNK if chunked else CHUNK), dtype=torch.float32, device=q.device)
    group = HV // H
    scale = K**-0.5 if scale is None else scale
    common = dict(GROUP=group, K=K, V=V, KS=ks, NK=nk, BT=CHUNK, L2NORM=use_qk_l2norm, FP32=fp32_dots)
    wy_args = (
        q, k, v, g, beta, cu_seqlens, w, u, gc, attn, num_seqs,
        q.stride(-3), q.stride(-2), k.stride(-3), k.stride(-2), v.stride(-3), v.stride(-2),
        g.stride(-2), g.stride(-1), beta.stride(-2), beta.stride(-1),
        w.stride(0), w.stride(1), u.stride(0), u.stride(1), gc.stride(0), gc.stride(1),
        attn.stride(0), attn.stride(1),
    )  # fmt: skip
    wy_meta = dict(VS=vs, PAIRED=chunked, **common)
    with _device(q.device):
        if chunked:
            _caovan_gdn_prefill_wy_kernel[grids[_caovan_gdn_prefill_wy_kernel.__name__]](
                *wy_args, **wy_meta, num_warps=config.wy.num_warps, num_stages=config.wy.num_stages
            )
            _launch_chunked(config.chunked, grids, q, k, out, ssm_state, cu_seqlens, state_indices,
                            has_initial_state, w, u, gc, attn, scale, null_slot_max, ssm_layout, write_final_state,
                            vs, common)  # fmt: skip
            return
        state_args = (
            q, k, w, u, gc, attn, out, ssm_state, cu_seqlens, state_indices, has_initial_state,
            scale, null_slot_max,
            q.stride(-3), q.stride(-2), k.stride(-3), k.stride(-2), w.stride(0), w.stride(1),
            u.stride(0), u.stride(1), gc.stride(0), gc.stride(1), attn.stride(0), attn.stride(1),
            out.stride(-3), out.stride(-2),
            ssm_state.stride(0), ssm_state.stride(1), stride_sk, stride_sv,
        )  # fmt: skip
        state_meta = dict(BV=block_v_of(config.state.BV, V), WRITE_FINAL_STATE=write_final_state, **common)
        launch_fused(
            (_caovan_gdn_prefill_wy_kernel, _caovan_gdn_prefill_state_kernel),
            (grids[_caovan_gdn_prefill_wy_kernel.__name__], grids[_caovan_gdn_prefill_state_kernel.__name__]),
            ((wy_args, WY_TENSORS, wy_meta, config.wy), (state_args, STATE_TENSORS, state_meta, config.state)),
            q.device.index if q.device.type == "cuda" else -1,
            INTERPRETED,
        )


def _launch_chunked(
    launch: ChunkedLaunch, grids, q, k, out, ssm_state, cu_seqlens, state_indices, has_initial_state,
    w, u, gc, attn, scale, null_slot_max, ssm_layout, write_final_state, vs, common,
) -> None:  # fmt: skip
    """The chunked path after the WY kernel: merge pairs of chunks, walk the states, make the outputs."""
    stride_sk, stride_sv = _state_strides(ssm_state, ssm_layout)
    HV, V, K = u.shape[1], u.shape[2], w.shape[2]
    num_seqs = cu_seqlens.shape[0] - 1
    pairs = grids[_caovan_gdn_prefill_merge_kernel.__name__][0]
    # The state at each pair's start in fp32: the output kernel's q S takes it as a high and a low 16-bit part.
    h = torch.empty((pairs, HV, K, V), dtype=torch.float32, device=q.device)
    _caovan_gdn_prefill_merge_kernel[grids[_caovan_gdn_prefill_merge_kernel.__name__]](
        q, k, w, u, gc, attn, cu_seqlens, num_seqs,
        q.stride(-3), q.stride(-2), k.stride(-3), k.stride(-2), w.stride(0), w.stride(1),
        u.stride(0), u.stride(1), gc.stride(0), gc.stride(1), attn.stride(0), attn.stride(1),
        VS=vs, **common,
        num_warps=launch.merge.num_warps, num_stages=launch.merge.num_stages,
    )  # fmt: skip
    _caovan_gdn_prefill_chunk_state_kernel[grids[_caovan_gdn_prefill_chunk_state_kernel.__name__]](
        k, w, u, gc, h, ssm_state, cu_seqlens, state_indices, has_initial_state, null_slot_max,
        k.stride(-3), k.stride(-2), w.stride(0), w.stride(1), u.stride(0), u.stride(1), gc.stride(0), gc.stride(1),
        h.stride(0), h.stride(1), ssm_state.stride(0), ssm_state.stride(1), stride_sk, stride_sv,
        BV=block_v_of(launch.state.BV, V), WRITE_FINAL_STATE=write_final_state, **common,
        num_warps=launch.state.num_warps, num_stages=launch.state.num_stages,
    )  # fmt: skip
    _caovan_gdn_prefill_output_kernel[grids[_caovan_gdn_prefill_output_kernel.__name__]](
        q, u, gc, attn, h, out, cu_seqlens, num_seqs, scale,
        q.stride(-3), q.stride(-2), u.stride(0), u.stride(1), gc.stride(0), gc.stride(1),
        attn.stride(0), attn.stride(1), h.stride(0), h.stride(1), out.stride(-3), out.stride(-2),
        BV=block_v_of(launch.output.BV, V), **common,
        num_warps=launch.output.num_warps, num_stages=launch.output.num_stages,
    )  # fmt: skip


class _NoGuard:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


def _device(device: torch.device):
    # Triton launches on the current CUDA device: switch only when the tensors live elsewhere.
    if device.type == "cuda" and device.index is not None and device.index != torch.cuda.current_device():
        return torch.cuda.device(device)
    return _NoGuard()
