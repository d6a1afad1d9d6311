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


def single_config_autotuners() -> list[str]:
    """Give every autotuned ``vllm.*`` kernel its first config only; the ``module.name`` of each one changed.

    Why: the interpreter has no GPU to time configs on, and Triton's autotuner asks the (absent) driver for a
    benchmarker as soon as it has more than one config (vLLM's FLA prefill kernels have up to twelve). How: the
    config list is cut to its first entry, which the autotuner then runs without timing; the maths is the same for
    every config. Runs in the interpreter children only. Remove when Triton's interpreter skips autotuning itself.
    """
    from triton.runtime.autotuner import Autotuner
    from triton.runtime.jit import KernelInterface

    cut = []
    for name, module in list(sys.modules.items()):
        if module is None or not name.startswith("vllm."):
            continue
        for attr, value in list(getattr(module, "__dict__", {}).items()):
            while isinstance(value, KernelInterface):  # heuristics wrap the autotuner, which wraps the jit
                if isinstance(value, Autotuner) and len(value.configs) > 1:
                    value.configs = value.configs[:1]
                    cut.append(f"{name}.{attr}")
                value = getattr(value, "fn", None)
    return cut


def _tensor_range(*bounds):
    """``range`` whose induction variable is a Triton scalar, as in compiled code (see ``tensor_loop_ranges``)."""
    import builtins

    import numpy as np
    from triton.runtime.interpreter import TensorHandle

    for i in builtins.range(*(int(b) for b in bounds)):
        yield tl.core.tensor(TensorHandle(np.array(i, dtype=np.int32), tl.int32), tl.int32)


def tensor_loop_ranges() -> list[str]:
    """Make ``for i in range(n)`` in vLLM's FLA kernels give a Triton scalar under the interpreter; modules changed.

    Why: compiled, the induction variable of a loop over a runtime bound is a tensor (FLA's ``chunk_delta_h`` calls
    ``i_t.to(tl.int64)`` on it); the interpreter runs the loop in Python and hands out ints, which have no ``.to``.
    How: a ``range`` global in each loaded ``vllm.*.fla...ops.*`` module (kernels resolve ``range`` there before
    the builtin) that yields interpreter scalars; the maths is unchanged. Interpreter children only. Remove when
    Triton's interpreter gives tensor induction variables.
    """
    changed = []
    for name, module in list(sys.modules.items()):
        fla = ".fla.ops." in name or ".flash_linear_attention.ops." in name
        if module is None or not name.startswith("vllm.") or not fla:
            continue
        module.range = _tensor_range
        changed.append(name)
    return changed


def cpu_device_guards() -> bool:
    """Make ``torch.cuda.device(None)`` a no-op in a CUDA-less process; True when it was not one.

    Why: vLLM's FLA ``input_guard`` (up to 0.20) enters ``torch.cuda.device(tensor.device.index)`` around every
    prefill op; for a CPU tensor the index is None, which torch turns into a device exchange that fails without a
    driver ("invalid argument to exchangeDevice"). How: ``torch.cuda.device`` gets a wrapper that returns a null
    context for None and defers to torch otherwise. Interpreter children only (no CUDA there by construction).
    Remove when no matrix row's FLA guards devices that way (0.21 on use ``torch.accelerator.device_index``).
    """
    import contextlib

    import torch

    original = torch.cuda.device
    if getattr(original, "_caovan_cpu_guard", False):
        return False
    try:
        with original(None):
            return False
    except RuntimeError:
        pass

    def device(index):
        return contextlib.nullcontext() if index is None else original(index)

    device._caovan_cpu_guard = True
    torch.cuda.device = device
    return True
