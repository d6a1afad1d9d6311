"""Environment guards Turbo3 users rely on, applied by the plugin at load time on SM75 hosts.

Each guard only fills in a default (never overrides what the user set) and says so in one line:

* ``VLLM_USE_FLASHINFER_SAMPLER=0`` on SM75: FlashInfer's sampler JIT fails on SM75 with CUDA 13; MTP, Marlin,
  PIECEWISE graphs and caovan stay on (Turbo3 log key ``flashinfer_sampler=disabled-sm75-guard``).
* A JIT cache folder isolated per caovan version / Python / torch / CUDA (``CAOVAN_CACHE_DIR``, default
  ``${XDG_CACHE_HOME:-~/.cache}/caovan-sm75-turbo3``) used for Triton's cache when ``TRITON_CACHE_DIR`` is unset,
  so kernels built by another stack are never picked up and nothing is wiped between starts.

The plugin's status line always carries ``sm75=N/M`` (SM75 GPUs / GPUs visible to this process) and each guard's
token, whether it acted or not: ``flashinfer_sampler=`` ``disabled-sm75-guard``, ``disabled-by-user``,
``enabled-by-user``, ``set-by-user`` (a value vLLM cannot read) or ``default`` (left to vLLM);
``triton_cache=`` ``isolated``, ``set-by-user`` or ``default``.  The processes vLLM starts after the guard inherit
its values; ``CAOVAN_GUARDS_APPLIED`` tells them which were the guard's.

GPU capabilities are read through NVML (``pynvml``, a vLLM dependency) so that loading the plugin never
initialises CUDA in vLLM's front-end process (vLLM forks workers after it).
"""

from __future__ import annotations

import os
import platform
from collections.abc import Callable, Mapping, MutableMapping, Sequence
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from caovan import __version__

SM75 = (7, 5)


@dataclass(frozen=True)
class Guard:
    name: str  # Turbo3 log key
    env: str
    value: str
    applies: bool
    why: str
    #: The value of the Turbo3 status-line token ``name=status``: what the variable is and who set it.
    status: str = ""


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


def _device_toolkit() -> str:
    """The CUDA (or ROCm) version torch was built for, as in wheel tags: ``cu130``; ``cpu`` for a CPU build."""
    try:
        import torch
    except ImportError:
        return "cpu"
    cuda = getattr(torch.version, "cuda", None)
    if cuda:
        return "cu" + cuda.replace(".", "")
    hip = getattr(torch.version, "hip", None)
    return f"rocm{hip.split('-')[0]}" if hip else "cpu"


def isolated_cache_dir(environ: Mapping[str, str] | None = None) -> Path:
    """One folder per caovan / Python / torch / CUDA stack: a different stack never reuses these kernels."""
    py = ".".join(platform.python_version_tuple()[:2])
    torch_version = _dist_version("torch").replace("+", "-")
    return base_cache_dir(environ) / f"caovan{__version__}-py{py}-torch{torch_version}-{_device_toolkit()}"


#: Names of the variables a guard set, for the processes vLLM starts after it: they inherit the value, and without
#: this mark would report it as the user's.
GUARDS_ENV = "CAOVAN_GUARDS_APPLIED"


def visible_indices(cuda_visible_devices: str | None, uuids: Sequence[str]) -> list[int | None]:
    """NVML indices of the GPUs this process sees through ``CUDA_VISIBLE_DEVICES``, in its order.

    As CUDA reads it: indices or (prefixes of) ``GPU-`` UUIDs, the list ending at the first entry that names no
    GPU (or one already named).  NVML's index is taken as CUDA's, as vLLM's own platform does.  A ``MIG-``
    instance is visible but has no NVML index here: None (MIG starts with sm_80, so it is never an SM75 GPU).
    """
    if cuda_visible_devices is None:
        return list(range(len(uuids)))
    visible: list[int | None] = []
    for entry in (e.strip() for e in cuda_visible_devices.split(",")):
        if entry.lstrip("-").isdigit():
            index: int | None = int(entry)
            if not 0 <= index < len(uuids):
                break
        elif entry.startswith("GPU-"):
            matches = [i for i, uuid in enumerate(uuids) if uuid.startswith(entry)]
            if len(matches) != 1:
                break
            index = matches[0]
        elif entry.startswith("MIG-"):
            index = None
        else:
            break
        if index is not None and index in visible:
            break
        visible.append(index)
    return visible


def nvml_capabilities(environ: Mapping[str, str] | None = None) -> list[tuple[int, int]]:
    """Compute capabilities of the GPUs visible to this process without initialising CUDA; [] without NVML.

    NVML lists every GPU of the host: ``CUDA_VISIBLE_DEVICES`` decides which of them this process (and the
    workers vLLM starts from it) can use.
    """
    env = os.environ if environ is None else environ
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
        for _, handle in visible_nvml_handles(pynvml, env.get("CUDA_VISIBLE_DEVICES")):
            if handle is None:
                caps.append((0, 0))  # a MIG instance (see visible_indices)
            else:
                caps.append(tuple(pynvml.nvmlDeviceGetCudaComputeCapability(handle)))
        return caps
    except Exception:  # a query NVML refuses: no GPU facts rather than a broken plugin load
        return []
    finally:
        pynvml.nvmlShutdown()


def visible_nvml_handles(pynvml, cuda_visible_devices: str | None) -> list[tuple[int | None, object | None]]:
    """(NVML index, handle) of each GPU visible through ``cuda_visible_devices``, in its order; (None, None) for a
    MIG instance. NVML must be initialised."""
    handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]
    uuids = [nvml_text(pynvml.nvmlDeviceGetUUID(h)) for h in handles]
    return [
        (index, None if index is None else handles[index]) for index in visible_indices(cuda_visible_devices, uuids)
    ]


def nvml_text(value: str | bytes) -> str:
    """An NVML string: bytes in older pynvml releases, str in newer ones."""
    return value.decode() if isinstance(value, bytes) else value


#: Files that mark a host where vLLM finds a GPU without NVML: a Jetson (vLLM's ``cuda_is_jetson``) or an AMD GPU
#: (``/dev/kfd``, the ROCm driver: vLLM's ROCm platform).
_GPU_WITHOUT_NVML = ("/etc/nv_tegra_release", "/sys/class/tegra-firmware", "/dev/kfd")


def cuda_gpu_missing(
    environ: Mapping[str, str] | None = None,
    *,
    vllm_version: str | None = None,
    exists: Callable[[str], bool] = os.path.exists,
) -> str | None:
    """Why ``vllm serve`` will find no CUDA GPU here, in a few words; None when it will, or when caovan cannot tell
    (vLLM then decides and says so itself).

    ``caovan serve`` asks before it hands over to vLLM, which otherwise ends in a 40-line traceback. Asked as vLLM
    0.21 picks its platform (``vllm/platforms/__init__.py``, ``cuda_platform_plugin``): NVML must start and count
    a GPU. That is quick and initialises no CUDA (torch is not even imported: vLLM would take seconds to import).
    vLLM does not read ``CUDA_VISIBLE_DEVICES`` there, but torch does once the engine starts, so a value that hides
    every GPU ends in the same traceback and is said here too. Left to vLLM: a CPU build of vLLM (its version says
    ``cpu``, as vLLM checks), a Jetson or an AMD GPU (:data:`_GPU_WITHOUT_NVML`), no ``pynvml`` to ask.
    """
    env = os.environ if environ is None else environ
    if vllm_version is None:
        vllm_version = _dist_version("vllm")
    if "cpu" in vllm_version or any(exists(path) for path in _GPU_WITHOUT_NVML):
        return None
    try:
        import pynvml
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
    except Exception as exc:  # NVMLError_LibraryNotFound, _DriverNotLoaded, ...: vLLM's own check fails alike
        return f"no CUDA GPU here (NVML, which vLLM asks for GPUs, cannot start: {exc})"
    try:
        uuids = [
            nvml_text(pynvml.nvmlDeviceGetUUID(pynvml.nvmlDeviceGetHandleByIndex(i)))
            for i in range(pynvml.nvmlDeviceGetCount())
        ]
    except Exception:  # a query NVML refuses: vLLM's own start says more than a guess here would
        return None
    finally:
        pynvml.nvmlShutdown()
    if not uuids:
        return "no CUDA GPU here (the NVIDIA driver lists none)"
    if not visible_indices(env.get("CUDA_VISIBLE_DEVICES"), uuids):
        return (
            f"no CUDA GPU visible (CUDA_VISIBLE_DEVICES={env['CUDA_VISIBLE_DEVICES']!r} hides all {len(uuids)} of "
            "this host's)"
        )
    return None


def _set_by_guard(env_name: str, value: str, environ: Mapping[str, str]) -> bool:
    """Whether a guard of an earlier caovan process (vLLM's front end, before it started this one) set it."""
    return env_name in environ.get(GUARDS_ENV, "").split(",") and environ.get(env_name) == value


def _sampler_status(value: str) -> str:
    # As vLLM reads it: int(value) != 0.
    try:
        return "enabled-by-user" if int(value) else "disabled-by-user"
    except ValueError:
        return "set-by-user"


def plan_guards(capabilities: Sequence[tuple[int, int]], environ: Mapping[str, str]) -> list[Guard]:
    sm75 = sum(tuple(c) == SM75 for c in capabilities)
    guards = []
    sampler = "VLLM_USE_FLASHINFER_SAMPLER"
    if sampler in environ and _set_by_guard(sampler, "0", environ):
        guards.append(Guard("flashinfer_sampler", sampler, "0", False, "set by caovan's guard", "disabled-sm75-guard"))
    elif sampler in environ:
        value = environ[sampler]
        guards.append(Guard("flashinfer_sampler", sampler, value, False, "set by the user", _sampler_status(value)))
    elif sm75:
        guards.append(
            Guard(
                "flashinfer_sampler",
                sampler,
                "0",
                True,
                f"disabled-sm75-guard (sm75={sm75}/{len(capabilities)})",
                "disabled-sm75-guard",
            )
        )
    else:
        guards.append(Guard("flashinfer_sampler", sampler, "0", False, "no SM75 GPU: left to vLLM", "default"))
    cache = str(isolated_cache_dir(environ) / "triton")
    if "TRITON_CACHE_DIR" in environ and _set_by_guard("TRITON_CACHE_DIR", cache, environ):
        guards.append(Guard("triton_cache", "TRITON_CACHE_DIR", cache, False, "set by caovan's guard", "isolated"))
    elif "TRITON_CACHE_DIR" in environ:
        value = environ["TRITON_CACHE_DIR"]
        guards.append(Guard("triton_cache", "TRITON_CACHE_DIR", value, False, "set by the user", "set-by-user"))
    else:
        why = "isolated per caovan/Python/torch/CUDA" if sm75 else "no SM75 GPU: left to Triton"
        guards.append(
            Guard("triton_cache", "TRITON_CACHE_DIR", cache, sm75 > 0, why, "isolated" if sm75 else "default")
        )
    return guards


@dataclass(frozen=True)
class GuardReport:
    """What the guards found and did in this process, for the plugin's status line."""

    capabilities: tuple[tuple[int, int], ...]
    guards: tuple[Guard, ...]

    def tokens(self) -> str:
        """``sm75=N/M`` (SM75 GPUs / GPUs visible to this process) and each guard's ``name=status``."""
        sm75 = sum(tuple(c) == SM75 for c in self.capabilities)
        return " ".join([f"sm75={sm75}/{len(self.capabilities)}", *(f"{g.name}={g.status}" for g in self.guards)])


def apply_guards(environ: MutableMapping[str, str] | None = None) -> GuardReport:
    env = os.environ if environ is None else environ
    capabilities = tuple(nvml_capabilities(env))
    guards = plan_guards(capabilities, env)
    applied = [name for name in env.get(GUARDS_ENV, "").split(",") if name]
    for guard in guards:
        if guard.applies:
            env.setdefault(guard.env, guard.value)
            applied.append(guard.env)
    if applied:
        env[GUARDS_ENV] = ",".join(dict.fromkeys(applied))
    return GuardReport(capabilities, tuple(guards))
