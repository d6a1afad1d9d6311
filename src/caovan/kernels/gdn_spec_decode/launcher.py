"""How the two kernels are launched: the direct path past Triton's per-call dispatch, programmatic dependent
launch, and the CUDA device and stream a launch goes to.

Everything here runs on the hot path of ``gdn_spec_decode`` (every GDN layer of every decode step under
PIECEWISE CUDA graphs) or decides, once per plan, whether that path may be taken.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import triton
from triton import knobs
from triton.runtime.jit import JITFunction

from .launch_configs import ArchLaunchConfig
from .triton_kernels import _caovan_sm75_prepare_qk_conv_spec_decode_kernel

# True when TRITON_INTERPRET=1 was set before this package was imported: the kernels then run on CPU tensors
# (tests) with no stream and no direct launch; otherwise CPU tensors are refused with a clear message.
# Validation and planning read it as ``launcher.INTERPRETED``, so one monkeypatch here reaches them all.
INTERPRETED = not isinstance(_caovan_sm75_prepare_qk_conv_spec_decode_kernel, JITFunction)


# Direct launches: Triton's ``kernel[grid](...)`` re-binds and re-specialises every argument in Python on
# each call (~10-20 us per launch), which under vLLM's PIECEWISE graphs runs for every GDN layer of every
# decode step. Once a plan's kernels are compiled, the launcher of the compiled kernel is called directly with
# the same arguments. That is only sound while Triton would pick the same compiled kernel: the plan key fixes
# dtypes, shapes, strides and options, and Triton also specialises pointers on 16-byte alignment, so the
# direct path is taken only when every pointer is 16-byte aligned (the case the cached kernel was compiled
# for; anything else goes through Triton's own dispatch). Launch hooks (profilers) also disable it. It passes
# the data pointers as ints (see aligned_pointers).
direct_launches: dict[tuple, tuple] = {}


#: Positions in the V/GDN kernel's tensor arguments of the Q/K kernel's, in its signature order: mixed_qkv,
#: conv_weight, conv_bias, conv_state, query_start_loc, state_indices, num_accepted_tokens, token_index, scratch.
QK_TENSORS = (0, 5, 6, 7, 9, 10, 11, 12, 13)


def aligned_pointers(tensors: tuple) -> tuple | None:
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


# Triton releases whose CudaLauncher.__call__ was read for direct_launch (triton/backends/nvidia/driver.py:
# it allocates the global and profile scratch buffers, then calls ``self.launch(gridX, gridY, gridZ, stream,
# function, launch_cooperative_grid, launch_pdl, global_scratch, profile_scratch, *args)``).
LAUNCHER_LAYOUT_READ = ("3.6.",)


def direct_launch(kernel, grid: tuple) -> tuple[Callable, tuple, tuple]:
    """``(launch, grid, head)``: ``launch(*grid, stream, *head, *kernel_args)`` launches the compiled kernel.

    Triton's launcher object adds a Python frame that only allocates scratch buffers; for kernels that need
    none (ours, on the releases whose launcher was read) its C launch function is called directly, which
    saved ~0.7 us per launch on an H200 host (docs/bench/kernel-design.md). Anything else keeps the launcher
    object, with the same effect.
    """
    run = kernel.run
    launch = getattr(run, "launch", None)
    if (
        triton.__version__.startswith(LAUNCHER_LAYOUT_READ)
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


def launch_hooks_set() -> bool:
    """True when a profiler or tool hooked Triton launches (the direct path would bypass it).

    Triton 3.6 keeps these hooks in a ``HookChain`` (never None; empty ``calls`` means no hook); older
    releases used a plain callable or None.
    """
    for hook in (knobs.runtime.launch_enter_hook, knobs.runtime.launch_exit_hook):
        calls = getattr(hook, "calls", None)
        if calls if calls is not None else hook is not None:
            return True
    return False


def current_stream(index: int) -> int:
    return torch._C._cuda_getCurrentRawStream(index)


def use_pdl(config: ArchLaunchConfig, device: torch.device) -> bool:
    """Programmatic dependent launch where the entry asks for it and the GPU has it (never interpreted)."""
    return not INTERPRETED and device.type == "cuda" and config.pdl_on(torch.cuda.get_device_capability(device))


class _NoGuard:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


_NO_GUARD = _NoGuard()


def device_guard(device: torch.device):
    # Triton launches on the *current* CUDA device; switch only when the tensors live elsewhere
    # (vLLM workers own one device, so the common path costs one comparison).
    # torch.cuda.current_device() minus its lazy-init check: CUDA is initialised once tensors live on it.
    if device.type == "cuda" and device.index != torch._C._cuda_getDevice():
        return torch.cuda.device(device)
    return _NO_GUARD
