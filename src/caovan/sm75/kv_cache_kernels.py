"""Whether the attention backend vLLM selected for a KV-cache dtype can run it, beyond what its selection checks.

vLLM's selection (``get_attn_backend_cls`` and the backends' ``validate_configuration``) takes some KV-cache dtypes
that the chosen backend then refuses when the model's layers are built, or whose kernels fail at the first forward.
A start-up profile that picks such a dtype gives the user a server that dies. Three checks, each asked of the
installed code where it can be:

* the backend's own ``AttentionImpl`` is built for a layer with that KV-cache dtype (vLLM 0.25's Triton backend
  refuses fp8 below sm_89 there, quoting ``--kv-cache-dtype float16``);
* ``TRITON_ATTN`` with an fp8 cache: its kernels read the cache as ``current_platform.fp8_dtype()`` (e4m3fn,
  Triton's ``fp8e4nv``), which the installed Triton is asked to compile for the device; Triton 3.6 refuses it below
  sm_89, which is how vLLM 0.21, without the check above, fails on a 2080 Ti;
* ``FLASH_ATTN`` with an fp8 cache and a float16 model: FlashAttention 3 takes fp8 queries, keys and values only
  with a bfloat16 output, and vLLM 0.25's backend quantises the query to fp8 for an fp8 cache but keeps the model's
  output dtype. Its first forward fails with ``For FP16/BF16 input, output must have the same dtype as inputs. For
  FP8 input, output must have dtype BF16`` (seen on a lent H200 with vLLM 0.25.0, a float16 model and
  ``--kv-cache-dtype fp8``). This one is a rule, not a probe: remove it once vLLM's FLASH_ATTN backend refuses the
  pair itself (``supports_combination``) or casts its output. The decisions judge a float16 layer (what a 2080 Ti
  serves), so on sm_90 a bfloat16 model that FLASH_ATTN could give an fp8 cache gets ``auto`` instead: a smaller
  cache than it could have, never a server that dies;
* a backend that takes an fp8 query (its impl's ``supports_quant_query_input``, FlashAttention 3 on sm_90) with an
  fp8 cache other than e4m3: vLLM's ``Attention`` layer makes a query quantiser for every ``fp8*`` cache dtype, and
  its ``forward`` then asserts ``kv_cache_dtype in {"fp8", "fp8_e4m3", ...}`` (vLLM 0.14 to 0.33), so
  ``fp8_e5m2`` dies at the first forward (seen on a lent H100 with vLLM 0.25.0 and the 27B architecture). Probed:
  the assertion's set is read from the installed ``Attention.forward``; once it is gone, nothing is refused.
"""

from __future__ import annotations

import ast
import functools
import importlib
import inspect
import re
from typing import Any

from .vllm_attention import HEAD_SIZE, keyword_call
from .vllm_platform import is_machine_bound

#: A Qwen3.5 / 3.6 full-attention layer as its impl is built (the head counts do not change a KV-dtype rule).
_LAYER = {
    "num_heads": 16,
    "head_size": HEAD_SIZE,
    "scale": HEAD_SIZE**-0.5,
    "num_kv_heads": 2,
    "alibi_slopes": None,
    "sliding_window": None,
    "logits_soft_cap": None,
    "attn_type": "decoder",
    "kv_sharing_target_layer_name": None,
    "blocksparse_params": None,
}

#: torch's fp8 dtypes as Triton names them in a kernel signature.
_TRITON_FP8 = {
    "float8_e4m3fn": "fp8e4nv",
    "float8_e5m2": "fp8e5",
    "float8_e4m3fnuz": "fp8e4b8",
    "float8_e5m2fnuz": "fp8e5b16",
}


def impl_refusal(backend_path: str, kv_cache_dtype: str) -> str | None:
    """vLLM's refusal of ``kv_cache_dtype`` when the backend at ``backend_path`` builds a layer's attention, or at the
    built impl's first forward (:func:`query_quant_refusal`), or None: built and nothing against it, or the impl cannot
    be built here even with ``auto`` (then there is nothing to tell, and the selection's answer stands)."""
    if kv_cache_dtype == "auto":  # the control build below: whatever it does, there is nothing to tell
        return None
    module, _, name = backend_path.rpartition(".")
    try:
        impl_cls = getattr(importlib.import_module(module), name).get_impl_cls()
    except Exception:  # no such class, or it cannot be imported here: the selection's answer stands
        return None

    def build(dtype: str) -> Any:
        return keyword_call(impl_cls, {**_LAYER, "kv_cache_dtype": dtype})

    try:
        build("auto")
    except Exception:  # the impl needs more than caovan can give outside an engine
        return None
    try:
        impl = build(kv_cache_dtype)
    except Exception as exc:
        if is_machine_bound(exc):
            return None
        text = str(exc).strip() or type(exc).__name__
        return f"{impl_cls.__name__} refuses it when the model's layers are built: {text}"
    return query_quant_refusal(impl, kv_cache_dtype)


#: Where vLLM's ``Attention`` layer lives (0.17 on, and before).
_ATTENTION_MODULES = ("vllm.model_executor.layers.attention.attention", "vllm.attention.layer")
_QUERY_QUANT_ASSERT = re.compile(r"assert\s+self\.kv_cache_dtype\s+in\s+(\{[^}]*\})")


@functools.lru_cache(maxsize=1)
def query_quant_dtypes() -> frozenset[str] | None:
    """The KV-cache dtypes the installed ``Attention.forward`` asserts before quantising a query to fp8, or None
    where it asserts no such set (or the layer cannot be read here)."""
    for module in _ATTENTION_MODULES:
        try:
            source = inspect.getsource(importlib.import_module(module).Attention.forward)
        except Exception:  # moved, or not importable here: try the next place
            continue
        found = _QUERY_QUANT_ASSERT.search(source)
        if found is None:
            return None
        try:
            return frozenset(str(x) for x in ast.literal_eval(found.group(1)))
        except (ValueError, SyntaxError):
            return None
    return None


def query_quant_refusal(impl: Any, kv_cache_dtype: str, accepted: frozenset[str] | None = None) -> str | None:
    """Why ``impl`` (built for ``kv_cache_dtype``) dies at the first forward of an fp8 cache that vLLM's
    ``Attention`` layer does not quantise queries for, or None. ``accepted``: :func:`query_quant_dtypes` (asked)."""
    if not kv_cache_dtype.startswith("fp8") or not getattr(impl, "supports_quant_query_input", False):
        return None
    accepted = query_quant_dtypes() if accepted is None else accepted
    if accepted is None or kv_cache_dtype in accepted:
        return None
    return (
        f"{type(impl).__name__} takes an fp8 query, and vLLM's Attention.forward then asserts the cache dtype is one "
        f"of {', '.join(sorted(accepted))}: its first forward fails"
    )


@functools.lru_cache(maxsize=16)
def triton_type_refusal(triton_type: str, capability: tuple[int, int]) -> str | None:
    """The installed Triton's refusal to compile a load of ``triton_type`` for a GPU of ``capability``, or None.

    Only the front end's refusal counts (the type is not one of the architecture's): a later stage's failure is no
    answer. ptxas, run after a refused compile in the same process, has been seen to fail on a type it takes."""
    import triton
    import triton.language as tl
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
    from triton.compiler.errors import CompilationError

    @triton.jit
    def _load_as_float16(src, dst):
        offsets = tl.arange(0, 16)
        tl.store(dst + offsets, tl.load(src + offsets).to(tl.float16))

    source = ASTSource(fn=_load_as_float16, signature={"src": f"*{triton_type}", "dst": "*fp16"}, constexprs={})
    try:
        triton.compile(source, target=GPUTarget("cuda", capability[0] * 10 + capability[1], 32))
    except CompilationError as exc:
        lines = [line for line in str(exc).splitlines() if line.strip()]
        return lines[-1].strip() if lines else type(exc).__name__
    except Exception:  # a later stage (ptxas): no answer about the type
        return None
    return None


def kernel_refusal(
    backend: str, kv_cache_dtype: str, model_dtype: Any, platform: Any, capability: tuple[int, int]
) -> str | None:
    """Why the kernels of ``backend`` (its enum name) cannot run a ``kv_cache_dtype`` cache for a ``model_dtype``
    model on ``capability``, where vLLM's selection does not check it; None: nothing known against it."""
    if not kv_cache_dtype.startswith("fp8"):
        return None
    fp8_dtype = getattr(platform, "fp8_dtype", None)
    if backend == "TRITON_ATTN" and callable(fp8_dtype):
        fp8 = str(fp8_dtype()).removeprefix("torch.")
        triton_type = _TRITON_FP8.get(fp8)
        why = triton_type_refusal(triton_type, capability) if triton_type is not None else None
        if why is not None:
            return f"TRITON_ATTN reads an fp8 cache as {fp8}, which Triton cannot compile here: {why}"
    if backend == "FLASH_ATTN" and str(model_dtype).removeprefix("torch.") == "float16":
        return (
            "FlashAttention 3 takes an fp8 query, key and value only with a bfloat16 output, and vLLM's FLASH_ATTN "
            "quantises a float16 model's query to fp8 for an fp8 cache: its first forward fails ('For FP8 input, "
            "output must have dtype BF16')"
        )
    return None
