"""A 7.5 device as Triton and torch describe one, for asking vLLM's own code what it decides on a 2080 Ti.

vLLM sizes some of its Triton autotune lists when a kernel module is imported, from what Triton's driver says about
the device (``fla/ops/utils.py``: ``check_shared_mem()`` reads ``get_device_properties(i)["max_shared_mem"]``; its
``is_nvidia_hopper`` reads the device name and capability from torch, or from vLLM's ``current_platform`` from
vLLM 0.34 on). On a machine without a GPU those questions fail (vLLM's CPU platform raises NotImplementedError) or
fall back to defaults, which is not the decision a 2080 Ti gets. Inside :func:`sm75_device_view` Triton's driver,
torch and vLLM's platform answer as an RTX 2080 Ti answers them, so the modules imported there make the decision
they make on one.

Nothing launches under the view: the driver's stream and device calls exist only so that a ``JITFunction.run(...,
warmup=True)`` compiles for the view's target (``caovan.sm75.kernel_compile``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any


@dataclass(frozen=True)
class DeviceFacts:
    """What a CUDA device reports; the defaults are an RTX 2080 Ti's (TU102, compute capability 7.5)."""

    name: str = "NVIDIA GeForce RTX 2080 Ti"
    capability: tuple[int, int] = (7, 5)
    #: cudaDevAttrMaxSharedMemoryPerBlockOptin: what Triton's driver reports as ``max_shared_mem``.
    max_shared_mem: int = 65536
    multiprocessor_count: int = 68
    max_num_regs: int = 65536
    warp_size: int = 32
    total_memory: int = 11 * 1024**3

    @property
    def arch(self) -> int:
        return self.capability[0] * 10 + self.capability[1]

    def triton_properties(self) -> dict[str, int]:
        # The keys of triton's CudaUtils.get_device_properties.
        return {
            "max_shared_mem": self.max_shared_mem,
            "max_num_regs": self.max_num_regs,
            "multiprocessor_count": self.multiprocessor_count,
            "warpSize": self.warp_size,
            "sm_clock_rate": 1545000,
            "mem_clock_rate": 7000000,
            "mem_bus_width": 352,
        }


RTX_2080_TI = DeviceFacts()


class _ViewUtils:
    def __init__(self, facts: DeviceFacts) -> None:
        self._facts = facts

    def get_device_properties(self, device: int) -> dict[str, int]:
        return self._facts.triton_properties()


class _ViewDriver:
    """Triton's active driver as a 7.5 device's would answer; launches are never made through it."""

    def __init__(self, facts: DeviceFacts) -> None:
        from triton.backends.compiler import GPUTarget

        self._target = GPUTarget("cuda", facts.arch, facts.warp_size)
        self.utils = _ViewUtils(facts)

    def get_current_target(self):
        return self._target

    def get_current_device(self) -> int:
        return 0

    def set_current_device(self, device: int) -> None:
        pass

    def get_current_stream(self, device: int | None = None) -> int:
        return 0

    def get_active_torch_device(self):
        import torch

        return torch.device("cpu")

    def is_active(self) -> bool:
        return True


@contextlib.contextmanager
def sm75_device_view(facts: DeviceFacts = RTX_2080_TI) -> Iterator[DeviceFacts]:
    """Within the block, Triton's driver and torch's device queries describe ``facts``; everything is put back after.

    torch.cuda.is_available() stays as it is: code that would then allocate on the device must keep to the CPU.
    """
    import torch
    from triton.runtime import driver

    properties = SimpleNamespace(
        name=facts.name,
        major=facts.capability[0],
        minor=facts.capability[1],
        total_memory=facts.total_memory,
        multi_processor_count=facts.multiprocessor_count,
        shared_memory_per_block_optin=facts.max_shared_mem,
        warp_size=facts.warp_size,
    )
    replacements: dict[str, Any] = {
        "device_count": lambda: 1,
        "get_device_name": lambda device=None: facts.name,
        "get_device_capability": lambda device=None: facts.capability,
        "get_device_properties": lambda device=None: properties,
        "current_device": lambda: 0,
    }
    saved = {name: getattr(torch.cuda, name) for name in replacements}
    # Triton keeps the active driver in ``_active`` from 3.5, in ``active`` before: the whole state is put back.
    saved_driver = dict(vars(driver))
    # vLLM's platform first: it is resolved (from NVML and torch) on first use, which must not see the view.
    with _vllm_platform_view(facts):
        for name, value in replacements.items():
            setattr(torch.cuda, name, value)
        driver.set_active(_ViewDriver(facts))
        try:
            yield facts
        finally:
            for name, value in saved.items():
                setattr(torch.cuda, name, value)
            vars(driver).clear()
            vars(driver).update(saved_driver)


@contextlib.contextmanager
def _vllm_platform_view(facts: DeviceFacts) -> Iterator[None]:
    """vLLM's ``current_platform`` (CudaPlatform on a 2080 Ti, the CPU platform here) names the device and its
    capability as a 2080 Ti's CudaPlatform does; nothing where vLLM is not installed."""
    try:
        from vllm.platforms import current_platform
        from vllm.platforms.interface import DeviceCapability
    except ImportError:
        yield
        return
    answers = {
        "get_device_name": lambda device_id=0: facts.name,
        "get_device_capability": lambda device_id=0: DeviceCapability(*facts.capability),
    }
    own = vars(current_platform)
    before = {name: own[name] for name in answers if name in own}
    own.update(answers)
    try:
        yield
    finally:
        for name in answers:
            own.pop(name, None)
        own.update(before)
