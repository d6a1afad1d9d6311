"""The GPUs ``caovan serve``'s start-up profiles size for: measured through NVML, as this process would see them.

NVML lists every GPU of the host; ``CUDA_VISIBLE_DEVICES`` decides which of them vLLM's workers get, in which order
(read as CUDA reads it: ``caovan.plugin.guards.visible_indices``). Memory is read per device, total and free, so
what other processes already hold on a shared card counts against it. NVML initialises no CUDA context, so asking
costs nothing to the server started next.

The total is the one CUDA reports (``cudaMemGetInfo``, which vLLM multiplies by ``--gpu-memory-utilization``): NVML's
total less the memory the driver reserves (``nvmlDeviceGetMemoryInfo_v2``'s ``reserved``). On a lent H100 80GB
NVML's first version gave 79.65 GiB total where CUDA has 79.18 GiB, and the difference showed as "0.47 GiB held by
others": the profiles then promised vLLM 0.45 GiB it never got. Drivers without the v2 query give NVML's total.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from caovan.plugin.guards import nvml_text, visible_nvml_handles

GIB = 1 << 30


class GpuInventoryError(Exception):
    """The GPUs cannot be measured here; the message says why."""


@dataclass(frozen=True)
class Gpu:
    """One visible GPU: NVML index, name, compute capability, and its memory in bytes when measured."""

    index: int
    name: str
    capability: tuple[int, int]
    total_bytes: int
    free_bytes: int

    def __post_init__(self) -> None:
        if not 0 <= self.free_bytes <= self.total_bytes:
            raise ValueError(f"GPU {self.index}: free {self.free_bytes} B is not within total {self.total_bytes} B")

    @property
    def used_bytes(self) -> int:
        """What is held on the card already (other processes, a display), by NVML's count."""
        return self.total_bytes - self.free_bytes

    def describe(self) -> str:
        major, minor = self.capability
        return (
            f"GPU {self.index} {self.name} sm_{major}{minor}: {self.free_bytes / GIB:.1f} of "
            f"{self.total_bytes / GIB:.1f} GiB free"
        )


def _memory(pynvml, handle) -> tuple[int, int]:
    """(total as CUDA sees it, free) of one device: the v2 query's total less what the driver reserves, else v1's."""
    version = getattr(pynvml, "nvmlMemory_v2", None)
    if version is not None:
        try:
            memory = pynvml.nvmlDeviceGetMemoryInfo(handle, version=version)
            free = int(memory.free)
            return max(int(memory.total) - int(memory.reserved), free), free
        except Exception:  # NVML_ERROR_FUNCTION_NOT_FOUND / NOT_SUPPORTED on older drivers: the first version
            pass
    memory = pynvml.nvmlDeviceGetMemoryInfo(handle)
    return int(memory.total), int(memory.free)


def read_gpus(environ: Mapping[str, str] | None = None) -> list[Gpu]:
    """Every GPU visible to this process (``CUDA_VISIBLE_DEVICES`` order), measured now through NVML."""
    env = os.environ if environ is None else environ
    try:
        import pynvml
    except ImportError:
        raise GpuInventoryError(
            "pynvml (nvidia-ml-py, a vLLM dependency) is not installed: no GPU to measure"
        ) from None
    try:
        pynvml.nvmlInit()
    except Exception as exc:
        raise GpuInventoryError(f"NVML does not start ({exc}): no NVIDIA driver, or no GPU") from None
    try:
        gpus = []
        for index, handle in visible_nvml_handles(pynvml, env.get("CUDA_VISIBLE_DEVICES")):
            if index is None:
                raise GpuInventoryError("a MIG instance is visible: its memory is not measured here")
            total, free = _memory(pynvml, handle)
            gpus.append(
                Gpu(
                    index=index,
                    name=nvml_text(pynvml.nvmlDeviceGetName(handle)),
                    capability=tuple(pynvml.nvmlDeviceGetCudaComputeCapability(handle)),
                    total_bytes=total,
                    free_bytes=free,
                )
            )
    except GpuInventoryError:
        raise
    except Exception as exc:  # a query NVML refuses
        raise GpuInventoryError(f"NVML refused a query: {type(exc).__name__}: {exc}") from None
    finally:
        pynvml.nvmlShutdown()
    if not gpus:
        raise GpuInventoryError(f"no GPU visible (CUDA_VISIBLE_DEVICES={env.get('CUDA_VISIBLE_DEVICES')!r})")
    return gpus
