"""What caovan's GDN prefill kernels take: head shapes and the activation dtype. One check, read by the prefill
entry's caller in vLLM (``adapters/prefill_hook.py``) at layer construction and by ``caovan doctor``.

No torch or Triton import (dtypes are compared by name).
"""

from __future__ import annotations

#: K bounds: the state kernel holds 64 x K key and query tiles and a K x BV state slab per program; above 128 the
#: sm_75 entry would spill (the sm_75 gate compiles K 128). 16: the smallest tile ``tl.dot`` takes.
KEY_HEAD_DIM_MIN, KEY_HEAD_DIM_MAX = 16, 128
VALUE_HEAD_DIM_MIN = 16
#: The dots run in the activation dtype, as FLA's do; fp32 activations would run them in TF32 on Ampere and later.
ACTIVATION_DTYPES = ("float16", "bfloat16")
#: bf16 tensor-core instructions start at sm_80.
BF16_MIN_CAPABILITY = (8, 0)


def prefill_envelope_problems(
    *,
    num_k_heads: int,
    num_v_heads: int,
    head_k_dim: int,
    head_v_dim: int,
    activation_dtype: object,
    capability: tuple[int, int] | None = None,
) -> list[str]:
    """Why a GDN layer of these shapes (per tensor-parallel rank) cannot run on the prefill kernels; empty: it can."""
    dtype = str(activation_dtype).removeprefix("torch.")
    problems = []
    if not KEY_HEAD_DIM_MIN <= head_k_dim <= KEY_HEAD_DIM_MAX:
        problems.append(f"head_k_dim {head_k_dim} outside the prefill kernels' {KEY_HEAD_DIM_MIN}..{KEY_HEAD_DIM_MAX}")
    if head_v_dim < VALUE_HEAD_DIM_MIN:
        problems.append(f"head_v_dim {head_v_dim} below the prefill kernels' {VALUE_HEAD_DIM_MIN}")
    if num_k_heads < 1 or num_v_heads % num_k_heads:
        problems.append(f"{num_v_heads} value heads are not a multiple of {num_k_heads} key heads")
    if dtype not in ACTIVATION_DTYPES:
        problems.append(f"activation dtype {dtype}: the prefill kernels take {' or '.join(ACTIVATION_DTYPES)}")
    elif dtype == "bfloat16" and capability is not None and tuple(capability) < BF16_MIN_CAPABILITY:
        problems.append(f"bfloat16 activations on sm{capability[0]}{capability[1]}, which has no bf16 tensor cores")
    return problems
