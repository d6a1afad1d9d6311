"""Validation of ``gdn_spec_decode``'s arguments: one ValueError naming the argument, before any launch.

It reads tensor metadata only (dtypes, shapes, strides, devices): no host sync, nothing touches a GPU, so it
runs under CUDA-graph capture and, on CPU tensors, in tests. It runs once per plan key (see ``plans``). Head
shapes, conv width and dtypes are judged by ``envelope`` (as the adapter and check-model judge them); the rest
here is the layout contract of the arguments.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from . import launcher
from .envelope import envelope_problems
from .launch_configs import ArchLaunchConfig

_INDEX_DTYPES = frozenset((torch.int32, torch.int64))
MAX_GRID_Y = 65535  # CUDA limit of gridDim.y, which carries N * HV


@dataclass(frozen=True)
class ValidatedCall:
    """The sizes validation derived from the arguments; the launch plan is made from them."""

    N: int  # sequences (query_start_loc.shape[0] - 1)
    HV: int  # value heads (A_log.shape[0])
    width: int  # conv window (conv_weight.shape[1])
    t_max: int  # state slots per sequence (state_indices.shape[1])
    num_rows: int  # rows of mixed_qkv
    num_spec_tokens: int
    device: torch.device


def _fail(name: str, expected: str, got: object) -> None:
    raise ValueError(f"gdn_spec_decode: {name}: expected {expected}, got {got}")


#: The argument each envelope parameter is read from, which a problem's message names.
_ARGUMENT_OF = {
    "num_k_heads": "num_k_heads",
    "num_v_heads": "A_log",  # HV = A_log.shape[0]
    "head_k_dim": "head_k_dim",
    "head_v_dim": "head_v_dim",
    "conv_width": "conv_weight",  # width = conv_weight.shape[1]
    "activation_dtype": "mixed_qkv",
    "conv_state_dtype": "conv_state",
    "ssm_state_dtype": "ssm_state",
}


def _check_ndim(name: str, t: torch.Tensor, ndim: int) -> None:
    if t.ndim != ndim:
        _fail(name, f"{ndim}-D tensor", f"shape {tuple(t.shape)}")


def _check_float(name: str, t: torch.Tensor, ndim: int) -> None:
    # The weights and the other activations take the dtypes the envelope allows mixed_qkv.
    problems = envelope_problems(activation_dtype=t.dtype)
    if problems:
        raise ValueError(f"gdn_spec_decode: {name}: {problems[0]}")
    _check_ndim(name, t, ndim)


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


def validate(
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
) -> ValidatedCall:
    """Full validation of one call's arguments (``gdn_spec_decode``'s, in its order): a ValueError naming the
    first argument found wrong, else the sizes the launch plan needs."""
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
    # The envelope first (head sizes, conv width, the dtypes of mixed_qkv and the states), so that its problems
    # are reported as the adapter and check-model report them; HV and the width only need the two tensors' ranks.
    _check_ndim("A_log", A_log, 1)
    HV = A_log.shape[0]
    _check_ndim("conv_weight", conv_weight, 2)
    width = conv_weight.shape[1]
    problems = envelope_problems(
        num_k_heads=H,
        num_v_heads=HV,
        head_k_dim=K,
        head_v_dim=V,
        conv_width=width,
        activation_dtype=mixed_qkv.dtype,
        conv_state_dtype=conv_state.dtype,
        ssm_state_dtype=ssm_state.dtype,
    )
    if problems:
        raise ValueError("gdn_spec_decode: " + "; ".join(f"{_ARGUMENT_OF[p.parameter]}: {p}" for p in problems))
    conv_dim = 2 * H * K + HV * V
    _check_ndim("mixed_qkv", mixed_qkv, 2)
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
    if conv_weight.shape[0] != conv_dim:
        _fail("conv_weight", f"shape ({conv_dim}, width)", tuple(conv_weight.shape))
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
    _check_ndim("conv_state", conv_state, 3)
    if conv_state.shape[1] != conv_dim or conv_state.shape[2] < width - 2 + t_max:
        _fail(
            "conv_state",
            f"shape (num_blocks, {conv_dim}, >= {width - 2 + t_max}) (dim-first view, state_len >= width - 2 + T_max)",
            tuple(conv_state.shape),
        )
    _check_written("conv_state", conv_state)
    _check_ndim("ssm_state", ssm_state, 4)
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
    if device.type != "cuda" and not (device.type == "cpu" and launcher.INTERPRETED):
        _fail("mixed_qkv", "CUDA tensors (CPU only with TRITON_INTERPRET=1 set before importing triton)", device)
    if N * HV > MAX_GRID_Y:
        _fail("query_start_loc", f"N * HV <= {MAX_GRID_Y} (CUDA grid limit)", f"N={N}, HV={HV}")
    return ValidatedCall(
        N=N, HV=HV, width=width, t_max=t_max, num_rows=num_rows, num_spec_tokens=num_spec_tokens, device=device
    )
