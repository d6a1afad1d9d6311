"""Make vLLM's older FLA kernels run under Triton's interpreter: rebind their aliases of ``triton.language`` builtins.

Why: the interpreter makes ``tl.exp`` and the other builtins callable by patching them where a kernel's globals hold
the ``triton.language`` module, but vLLM's FLA ops up to 0.17 bind ``exp = tl.exp`` (and ``log``, ``log2``) at
import in ``fla/ops/op.py`` and import that name into the kernel modules (``fused_recurrent.py``): the interpreter
never patches such an alias and the kernel stops with "Did you forget to add @triton.jit ?". How: each alias found in
a loaded ``vllm.`` module is rebound to a jitted function that returns the same builtin's result, so the maths is
vLLM's; compiled kernels are never affected (this runs in the numerics child only). Remove when no matrix row's
vLLM binds such an alias (0.18 on call ``tl.exp`` in the spec path).
"""

from __future__ import annotations

import sys

import triton
import triton.language as tl


@triton.jit
def _exp(x):
    return tl.exp(x)


@triton.jit
def _log(x):
    return tl.log(x)


@triton.jit
def _log2(x):
    return tl.log2(x)


_WRAPPERS = {"exp": (tl.exp, _exp), "log": (tl.log, _log), "log2": (tl.log2, _log2)}


def rebind_builtin_aliases() -> list[str]:
    """Rebind every ``vllm.*`` module attribute named exp/log/log2 that is ``tl``'s builtin; the ``module.name`` of
    each one rebound. Call it after vLLM's kernel modules are imported and before any kernel has run."""
    rebound = []
    for name, module in list(sys.modules.items()):
        if module is None or not name.startswith("vllm."):
            continue
        for alias, (builtin, wrapper) in _WRAPPERS.items():
            if getattr(module, "__dict__", {}).get(alias) is builtin:
                setattr(module, alias, wrapper)
                rebound.append(f"{name}.{alias}")
    return rebound
