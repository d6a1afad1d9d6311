"""Environment guards Turbo3 users rely on, applied by the plugin at load time on SM75 hosts.

Each guard only fills in a default (never overrides what the user set) and says so in one line:

* ``VLLM_USE_FLASHINFER_SAMPLER=0`` on SM75: FlashInfer's sampler JIT fails on SM75 with CUDA 13; MTP, Marlin,
  PIECEWISE graphs and caovan stay on (Turbo3 log key ``flashinfer_sampler=disabled-sm75-guard``).
* A JIT cache folder isolated per caovan version / Python / torch / CUDA (``CAOVAN_CACHE_DIR``, default
  ``${XDG_CACHE_HOME:-~/.cache}/caovan-sm75-turbo3``) used for Triton's cache when ``TRITON_CACHE_DIR`` is unset,
  so kernels built by another stack are never picked up and nothing is wiped between starts.

GPU capabilities are read through NVML (``pynvml``, a vLLM dependency) so that loading the plugin never
initialises CUDA in vLLM's front-end process (vLLM forks workers after it).
"""

from __future__ import annotations

import os
import platform
from collections.abc import Mapping, MutableMapping, Sequence
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from . import __version__

SM75 = (7, 5)


@dataclass(frozen=True)
class Guard:
    name: str  # Turbo3 log key
    env: str
    value: str
    applies: bool
    why: str


def base_cache_dir(environ: Mapping[str, str] | None = None) -> Path:
    env = os.environ if environ is None else environ
    if env.get("CAOVAN_CACHE_DIR"):
        return Path(env["CAOVAN_CACHE_DIR"]).expanduser()
    xdg = env.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(xdg).expanduser() / "caovan-sm75-turbo3"


def _dist_version(name: str) -> str:
    try:
        return version(name)
    except PackageNotFoundError:
        return "none"


def isolated_cache_dir(environ: Mapping[str, str] | None = None) -> Path:
    """One folder per caovan / Python / torch stack: a different stack never reuses these kernels."""
    py = ".".join(platform.python_version_tuple()[:2])
    torch_version = _dist_version("torch").replace("+", "-")
    return base_cache_dir(environ) / f"caovan{__version__}-py{py}-torch{torch_version}"


def nvml_capabilities() -> list[tuple[int, int]]:
    """Compute capabilities of visible GPUs without initialising CUDA; [] when NVML is unavailable."""
    try:
        import pynvml
    except ImportError:
        return []
    try:
        pynvml.nvmlInit()
    except Exception:
        return []
    try:
        caps = []
        for i in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(i)
            caps.append(tuple(pynvml.nvmlDeviceGetCudaComputeCapability(handle)))
        return caps
    finally:
        pynvml.nvmlShutdown()


def plan_guards(capabilities: Sequence[tuple[int, int]], environ: Mapping[str, str]) -> list[Guard]:
    sm75 = sum(tuple(c) == SM75 for c in capabilities)
    guards = []
    if "VLLM_USE_FLASHINFER_SAMPLER" in environ:
        guards.append(
            Guard(
                "flashinfer_sampler",
                "VLLM_USE_FLASHINFER_SAMPLER",
                environ["VLLM_USE_FLASHINFER_SAMPLER"],
                False,
                "set by the user",
            )
        )
    else:
        guards.append(
            Guard(
                "flashinfer_sampler",
                "VLLM_USE_FLASHINFER_SAMPLER",
                "0",
                sm75 > 0,
                f"disabled-sm75-guard (sm75={sm75}/{len(capabilities)})" if sm75 else "no SM75 GPU: left to vLLM",
            )
        )
    if "TRITON_CACHE_DIR" in environ:
        guards.append(Guard("triton_cache", "TRITON_CACHE_DIR", environ["TRITON_CACHE_DIR"], False, "set by the user"))
    else:
        cache = str(isolated_cache_dir(environ) / "triton")
        guards.append(Guard("triton_cache", "TRITON_CACHE_DIR", cache, sm75 > 0, "isolated per caovan/Python/torch"))
    return guards


def apply_guards(environ: MutableMapping[str, str] | None = None) -> list[Guard]:
    env = os.environ if environ is None else environ
    guards = plan_guards(nvml_capabilities(), env)
    for guard in guards:
        if guard.applies:
            env.setdefault(guard.env, guard.value)
    return guards
