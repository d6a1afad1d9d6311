"""Which Triton kernels a piece of vLLM code launches, with which arguments and autotune configs, without running any.

Inside :func:`recording`, ``JITFunction.run`` records its bound arguments and launch options and returns without
compiling or launching, and ``Autotuner.run`` records the configs it would tune over (after vLLM's own pruning,
``prune_configs``) and passes each of them down, so that the kernel underneath records one launch per config with
every heuristic resolved for it. The Python around the kernels (vLLM's wrappers, FLA's chunk bookkeeping, the
GDN layer's metadata handling) runs for real on CPU tensors: what is recorded is what the row's code launches.
Kernel outputs are left as allocated, so recording is for launch signatures, never for values.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

#: Keyword arguments of ``JITFunction.run`` that are launch options, not kernel parameters (Triton's own names).
_NOT_OPTIONS = frozenset({"grid", "warmup"})


@dataclass
class KernelLaunch:
    """One launch as the row's code made it: the JITFunction, its bound arguments, its launch options."""

    kernel: Any  # triton.runtime.jit.JITFunction
    arguments: dict[str, Any]
    options: dict[str, Any]
    #: The autotuned call this launch is one config of (None: the kernel is not autotuned).
    autotuned: AutotunedCall | None = None
    config_index: int | None = None
    step: str = ""

    @property
    def name(self) -> str:
        return self.kernel.fn.__name__

    @property
    def module(self) -> str:
        return self.kernel.fn.__module__


@dataclass
class AutotunedCall:
    """One call of an autotuned kernel: the configs the autotuner would benchmark, in vLLM's order."""

    configs: list[Any]  # triton.Config
    keys: list[str]
    pruned_from: int
    launches: list[KernelLaunch] = field(default_factory=list)
    prune_error: str | None = None


@dataclass
class Recording:
    """What :func:`recording` collected; ``step`` labels the launches made while it is set."""

    launches: list[KernelLaunch] = field(default_factory=list)
    step: str = ""
    _autotuning: list[AutotunedCall] = field(default_factory=list)


def _bind(kernel: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(kernel parameters by name with defaults applied, launch options) of one ``run`` call."""
    names = set(kernel.arg_names)
    params = {k: v for k, v in kwargs.items() if k in names}
    options = {k: v for k, v in kwargs.items() if k not in names and k not in _NOT_OPTIONS}
    bound = kernel.signature.bind(*args, **params)
    bound.apply_defaults()
    return dict(bound.arguments), options


@contextlib.contextmanager
def recording() -> Iterator[Recording]:
    """Record every Triton launch made in the block instead of making it (see the module docstring)."""
    from triton.runtime.autotuner import Autotuner
    from triton.runtime.jit import JITFunction

    record = Recording()
    original_run, original_autotune = JITFunction.run, Autotuner.run

    def record_launch(self, *args, grid=None, warmup=False, **kwargs):
        arguments, options = _bind(self, args, kwargs)
        call = record._autotuning[-1] if record._autotuning else None
        launch = KernelLaunch(self, arguments, options, call, None, record.step)
        if call is not None:
            launch.config_index = len(call.launches)
            call.launches.append(launch)
        record.launches.append(launch)
        return None

    def record_autotuned(self, *args, **kwargs):
        self.nargs = dict(zip(self.arg_names, args, strict=False))  # as Triton's own run() sets it
        prune_error = None
        try:
            configs = list(self.prune_configs(kwargs))
        except Exception as exc:  # vLLM's pruner may read values a recording leaves unset: keep every config
            configs, prune_error = list(self.configs), f"{type(exc).__name__}: {exc}"
        call = AutotunedCall(configs, list(getattr(self, "keys", [])), len(self.configs), prune_error=prune_error)
        record._autotuning.append(call)
        try:
            for config in configs:
                self.fn.run(*args, **kwargs, **config.all_kwargs())
        finally:
            record._autotuning.pop()
            self.nargs = None
        return None

    JITFunction.run, Autotuner.run = record_launch, record_autotuned
    try:
        yield record
    finally:
        JITFunction.run, Autotuner.run = original_run, original_autotune
