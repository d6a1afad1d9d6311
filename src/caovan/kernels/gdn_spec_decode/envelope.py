"""What the GDN spec-decode kernels take: head shapes, conv width and activation, dtypes. One table, one check.

Three places decide whether a GatedDeltaNet layer runs on these kernels: the kernel entry (``gdn_spec_decode``
refuses other arguments), the vLLM adapter (takes a layer over or leaves it to vLLM) and ``caovan check-model``
(calls a model folder a candidate or not). All three ask ``envelope_problems``, so a model one of them accepts
is not refused by another. Sizes are per tensor-parallel rank; the head ratio, head dims and conv width are
the same for the whole model.

No torch or Triton import (dtypes are compared by name): check-model runs on machines without either.
"""

from __future__ import annotations

from dataclasses import dataclass

from .launch_configs import LAUNCH_CONFIGS


@dataclass(frozen=True)
class KernelEnvelope:
    """The limits, read from the kernels and the tests (tests/kernels/gdn_interpreter_cases.py runs each edge).

    There is no power-of-two rule on K or V: the kernels pad both to the next power of two (BK, BV) and mask the
    rest (the interpreter runs K 24 and 48, V 24). The multiples of 8 are what the tests exercise, not a limit
    found in the kernels.
    """

    #: HV / H: value head hv reads key head hv // (HV // H). Any ratio would index right; these are tested.
    value_heads_per_key_head: tuple[int, ...]
    #: K bounds: 256 is vLLM's own GDN prefill limit (its chunk_delta_h asserts K <= 256); 16 is the smallest K
    #: tested. A program holds a BV x K fp32 state slab in registers: up to K 256 it fits at the sm90 entry's
    #: block (BV 8, one warp), while the sm75 entry (BV 32, two warps) spills above K 128, slow but correct.
    key_head_dim_min: int
    key_head_dim_max: int
    key_head_dim_multiple: int
    #: V is tiled by BV with a masked tail tile, so any multiple of this works.
    value_head_dim_multiple: int
    #: Causal conv1d window width (linear_conv_kernel_dim): the kernels keep W - 1 past inputs and need W >= 2;
    #: 6 is the widest vLLM's own causal_conv1d_update takes.
    conv_width_min: int
    conv_width_max: int
    #: The conv is followed by SiLU, hard-wired in the kernels ('swish' is vLLM's other name for it).
    activations: tuple[str, ...]
    #: Activations (mixed_qkv, a, b, out) and the layer's weights (A_log, dt_bias, conv weight and bias).
    activation_dtypes: tuple[str, ...]
    #: Conv state (--mamba-cache-dtype) and SSM state (--mamba-ssm-cache-dtype): read and written as they are.
    conv_state_dtypes: tuple[str, ...]
    ssm_state_dtypes: tuple[str, ...]


_FLOATS = ("float16", "bfloat16", "float32")

KERNEL_ENVELOPE = KernelEnvelope(
    value_heads_per_key_head=(1, 2, 3),
    key_head_dim_min=16,
    key_head_dim_max=256,
    key_head_dim_multiple=8,
    value_head_dim_multiple=8,
    conv_width_min=2,
    conv_width_max=6,
    activations=("silu", "swish"),
    activation_dtypes=_FLOATS,
    conv_state_dtypes=_FLOATS,
    ssm_state_dtypes=_FLOATS,
)

#: The head dims the launch configurations were tuned at (Qwen3.5/3.6 and Qwen3-Next): other sizes inside the
#: envelope run correctly but were not timed.
TUNED_KEY_HEAD_DIM = 128
TUNED_VALUE_HEAD_DIM = 128

#: The value block (BV) the SM75 launch configuration tiles V by: a V that is not a multiple of it runs a
#: masked tail tile.
SM75_VALUE_BLOCK = LAUNCH_CONFIGS["sm75"].v_gdn.BV


class EnvelopeProblem(str):
    """One problem: a short human-readable line ``"<parameter>=<value>: <why>"``, which also carries the name of
    the ``envelope_problems`` parameter it is about (for a caller that reports per argument or per check)."""

    parameter: str

    def __new__(cls, parameter: str, text: str) -> EnvelopeProblem:
        problem = super().__new__(cls, text)
        problem.parameter = parameter
        return problem


def dtype_name(dtype: object) -> str:
    """``torch.float16`` or ``"float16"`` -> ``"float16"``: dtypes compared by name, without importing torch."""
    return str(dtype).removeprefix("torch.")


def _one_of(values: tuple) -> str:
    shown = [str(value) for value in values]
    return shown[0] if len(shown) == 1 else f"{', '.join(shown[:-1])} or {shown[-1]}"


def envelope_problems(
    *,
    num_k_heads: int | None = None,
    num_v_heads: int | None = None,
    head_k_dim: int | None = None,
    head_v_dim: int | None = None,
    conv_width: int | None = None,
    activation: str | None = None,
    activation_dtype: object = None,
    conv_state_dtype: object = None,
    ssm_state_dtype: object = None,
) -> list[EnvelopeProblem]:
    """Every way these sizes, activation and dtypes fall outside what the kernels take; empty when they fit.

    Head counts are per tensor-parallel rank. A parameter left None is not known to the caller and not checked.
    Dtypes are ``torch.dtype`` objects or their names. Sizes must be ints (the kernel entry checks types first).
    """
    env = KERNEL_ENVELOPE  # read per call: a test may patch the module's table
    problems: list[EnvelopeProblem] = []

    def add(parameter: str, value: object, why: str) -> None:
        problems.append(EnvelopeProblem(parameter, f"{parameter}={value}: {why}"))

    if num_k_heads is not None and num_k_heads < 1:
        add("num_k_heads", num_k_heads, "the kernels need at least one key head")
    if num_v_heads is not None:
        if num_v_heads < 1:
            add("num_v_heads", num_v_heads, "the kernels need at least one value head")
        elif num_k_heads is not None and num_k_heads >= 1:
            ratio, rest = divmod(num_v_heads, num_k_heads)
            if rest:
                why = f"not a multiple of num_k_heads={num_k_heads} (value heads share key heads evenly)"
                add("num_v_heads", num_v_heads, why)
            elif ratio not in env.value_heads_per_key_head:
                add(
                    "num_v_heads",
                    num_v_heads,
                    f"{ratio} value heads per key head (num_k_heads={num_k_heads}); "
                    f"the kernels take {_one_of(env.value_heads_per_key_head)}",
                )
    if head_k_dim is not None:
        if not env.key_head_dim_min <= head_k_dim <= env.key_head_dim_max:
            add("head_k_dim", head_k_dim, f"the kernels take {env.key_head_dim_min}..{env.key_head_dim_max}")
        elif head_k_dim % env.key_head_dim_multiple:
            add("head_k_dim", head_k_dim, f"the kernels take a multiple of {env.key_head_dim_multiple}")
    if head_v_dim is not None and (head_v_dim < 1 or head_v_dim % env.value_head_dim_multiple):
        add("head_v_dim", head_v_dim, f"the kernels take a positive multiple of {env.value_head_dim_multiple}")
    if conv_width is not None and not env.conv_width_min <= conv_width <= env.conv_width_max:
        add("conv_width", conv_width, f"the kernels take {env.conv_width_min}..{env.conv_width_max}")
    if activation is not None and activation not in env.activations:
        add("activation", repr(activation), f"the kernels apply SiLU after the conv ({_one_of(env.activations)})")
    for parameter, dtype, taken in (
        ("activation_dtype", activation_dtype, env.activation_dtypes),
        ("conv_state_dtype", conv_state_dtype, env.conv_state_dtypes),
        ("ssm_state_dtype", ssm_state_dtype, env.ssm_state_dtypes),
    ):
        if dtype is not None and dtype_name(dtype) not in taken:
            add(parameter, dtype_name(dtype), f"the kernels take {_one_of(taken)}")
    return problems
