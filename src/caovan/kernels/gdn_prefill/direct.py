"""The fused path's two launches, past Triton's per-call dispatch once a call's kernels are compiled.

A prefill call is host-bound at the lengths most prompts have: on an H100 a 256-token call at TP=2 took about as long
as one of 1024 tokens (``docs/bench/bench-prefill-fused-h100-db65fa5.json``), the time of the Python around two
launches. Triton's ``kernel[grid](...)`` re-binds and re-specialises each of the ~35 arguments on every call; as
``gdn_spec_decode/launcher.py`` does for the spec step, the compiled kernels' launcher is called directly instead.

That is sound only while Triton would pick the same compiled kernels. Nothing the kernels take depends on the
number of tokens (only the grids and the scratch buffers do), so the key holds every other argument exactly: the
tensors' dtypes (and which are None), every stride and integer, the scale, the constexprs and the launch options.
Pointers are checked for 16-byte alignment on every call (the case the kernels were compiled for), and launch
hooks (profilers) send every call through Triton, as does the interpreter.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..gdn_spec_decode.launcher import aligned_pointers, current_stream, direct_launch, launch_hooks_set
from .launch_configs import KernelLaunch

#: Keys kept at most (one per layer shape, dtype set and batch size seen); the cache is emptied when full.
MAX_CACHED = 64
#: key -> ((launch, head, tail) of the WY kernel, the same of the state kernel)
_launches: dict[tuple, tuple] = {}


def _key(args: Sequence[Any], tensors: int, meta: Mapping[str, Any], launch: KernelLaunch) -> tuple:
    head = tuple(None if t is None else t.dtype for t in args[:tensors])
    return (head, tuple(args[tensors:]), tuple(meta.items()), launch.num_warps, launch.num_stages)


def _tail(kernel: Any, args: Sequence[Any], tensors: int, meta: Mapping[str, Any]) -> tuple:
    """Every argument after the tensors, in the kernel's signature order (the constexprs too: the compiled
    kernel's launcher takes all of them and skips the constexprs)."""
    names = kernel.arg_names[len(args) :]
    return (*args[tensors:], *(meta[name] for name in names))


def launch_fused(
    kernels: tuple[Any, Any],
    grids: tuple[tuple[int, ...], tuple[int, ...]],
    calls: tuple[tuple[Sequence[Any], int, Mapping[str, Any], KernelLaunch], ...],
    device_index: int,
    interpreted: bool,
) -> None:
    """Launch the WY kernel then the state kernel. ``calls``: per kernel (its positional arguments, how many of
    them lead as tensors, its constexprs, its launch options)."""
    key = (device_index, *(_key(args, n, meta, opts) for args, n, meta, opts in calls)) if not interpreted else None
    fast = _launches.get(key) if key is not None else None
    if fast is not None and not launch_hooks_set():
        ptrs = [aligned_pointers(tuple(args[:n])) for args, n, _, _ in calls]
        if None not in ptrs:
            stream = current_stream(device_index)
            for (launch, head, tail), grid, pointers in zip(fast, grids, ptrs, strict=True):
                launch(*(*grid, 1, 1)[:3], stream, *head, *pointers, *tail)  # the launcher takes x, y and z
            return
    compiled = [
        kernel[grid](*args, **meta, num_warps=opts.num_warps, num_stages=opts.num_stages)
        for kernel, grid, (args, _, meta, opts) in zip(kernels, grids, calls, strict=True)
    ]
    if key is None or launch_hooks_set() or any(aligned_pointers(tuple(a[:n])) is None for a, n, _, _ in calls):
        return
    if len(_launches) >= MAX_CACHED:
        _launches.clear()
    entries = []
    for kernel, done, (args, n, meta, _) in zip(kernels, compiled, calls, strict=True):
        launch, _, head = direct_launch(done, ())
        entries.append((launch, head, _tail(kernel, args, n, meta)))
    _launches[key] = tuple(entries)
