"""The installed vLLM's own CUDA platform, made to report a chosen compute capability, for the time of a probe.

:mod:`caovan.sm75.vllm_decisions` asks vLLM's selection and validation code what it decides on a 7.5 device without
one: :func:`simulated_cuda_platform` subclasses the release's ``CudaPlatform`` with ``get_device_capability`` fixed
(``has_device_capability`` and the other capability tests are the release's generic ones from its ``Platform``
interface, so they read the fixed value), puts an instance where vLLM's modules look for ``current_platform``, and
puts everything back on exit.  Nothing is read from vLLM's version number: each piece is found by probing.

On a machine without the CUDA driver, ``vllm.platforms.cuda`` cannot be imported as it is (its first lines load
``vllm._C``, which links ``libcuda.so.1``); such an extension is replaced by an empty module for that one import
only, and the names replaced are reported (:attr:`SimulatedPlatform.stubbed`).  Only vLLM's Python decisions run
under the simulation: no kernel, no CUDA call.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.abc
import importlib.machinery
import logging
import os
import sys
import types
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

#: The shared libraries of the NVIDIA driver: an extension failing to load for one of them is not broken, the
#: machine simply has no driver.
_DRIVER_LIBRARIES = ("libcuda.so", "libnvidia-ml.so")


def is_missing_driver(exc: BaseException) -> bool:
    """Whether ``exc`` says a shared library of the NVIDIA driver is missing (a machine without a GPU driver)."""
    return isinstance(exc, ImportError) and any(lib in str(exc) for lib in _DRIVER_LIBRARIES)


def is_machine_bound(exc: BaseException) -> bool:
    """Whether ``exc`` comes from this machine having no GPU or driver (torch's "Found no NVIDIA driver", a driver
    library missing): vLLM's code asked the device itself, so its failure is no answer about the simulated one."""
    text = str(exc)
    return is_missing_driver(exc) or "no NVIDIA driver" in text or "Torch not compiled with CUDA" in text


class _StubLoader(importlib.abc.Loader):
    """Loads the real extension; where it fails only for want of the driver, gives an empty module instead."""

    def __init__(self, real: importlib.abc.Loader, stubbed: list[str]) -> None:
        self.real, self.stubbed = real, stubbed

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType | None:
        try:
            return self.real.create_module(spec)
        except ImportError as exc:
            if not is_missing_driver(exc):
                raise
        self.stubbed.append(spec.name)
        return types.ModuleType(spec.name, f"caovan stand-in: {spec.name} needs the NVIDIA driver, absent here")

    def exec_module(self, module: types.ModuleType) -> None:
        if module.__name__ not in self.stubbed:
            self.real.exec_module(module)


class _DriverlessExtensionFinder(importlib.abc.MetaPathFinder):
    """Finds vLLM's compiled extensions as Python would, loading them through :class:`_StubLoader`."""

    def __init__(self) -> None:
        self.stubbed: list[str] = []

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        if not name.startswith("vllm."):
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or not isinstance(spec.loader, importlib.machinery.ExtensionFileLoader):
            return None
        spec.loader = _StubLoader(spec.loader, self.stubbed)
        return spec


def import_cuda_platform_module() -> tuple[types.ModuleType, list[str]]:
    """``vllm.platforms.cuda`` and the extensions that had to be stubbed to import it (none where a driver is)."""
    try:
        return importlib.import_module("vllm.platforms.cuda"), []
    except ImportError as exc:
        if not is_missing_driver(exc):
            raise
    finder = _DriverlessExtensionFinder()
    sys.meta_path.insert(0, finder)
    try:
        module = importlib.import_module("vllm.platforms.cuda")
    finally:
        sys.meta_path.remove(finder)
        # Later imports of these extensions fail as they would have: only the platform module saw the stand-ins.
        for name in finder.stubbed:
            sys.modules.pop(name, None)
            parent, _, leaf = name.rpartition(".")
            if parent in sys.modules and isinstance(getattr(sys.modules[parent], leaf, None), types.ModuleType):
                with contextlib.suppress(AttributeError):
                    delattr(sys.modules[parent], leaf)
    return module, list(finder.stubbed)


@dataclass
class SimulatedPlatform:
    """What :func:`simulated_cuda_platform` set up: the platform instance vLLM's modules now see, and how."""

    platform: Any
    capability: Any  # the release's DeviceCapability
    cuda_module: types.ModuleType
    stubbed: list[str] = field(default_factory=list)
    logs: list[tuple[str, str, str]] = field(default_factory=list)  # (level, logger, message) vLLM logged

    def log_messages(self, since: int = 0) -> list[str]:
        """vLLM's log lines from index ``since`` on (their reasons are quoted in the findings)."""
        return [message for _, _, message in self.logs[since:]]


def _platform_class(cuda_module: types.ModuleType, capability: tuple[int, int], device_name: str, sm_count: int | None):
    interface = importlib.import_module("vllm.platforms.interface")
    cuda_cls = getattr(cuda_module, "CudaPlatform", None)
    if not isinstance(cuda_cls, type):
        raise LookupError(f"{cuda_module.__name__} has no CudaPlatform class")
    device_capability = interface.DeviceCapability(*capability)
    namespace: dict[str, Any] = {
        "get_device_capability": classmethod(lambda cls, device_id=0: device_capability),
        "get_device_name": classmethod(lambda cls, device_id=0: device_name),
        "__module__": __name__,
    }
    # The release's own generic tests read get_device_capability; the CUDA class's versions may ask NVML instead.
    for name in ("has_device_capability", "is_device_capability", "is_device_capability_family"):
        generic = interface.Platform.__dict__.get(name)
        if isinstance(generic, classmethod):
            namespace[name] = classmethod(generic.__func__)
    if sm_count is not None:
        namespace["num_compute_units"] = classmethod(lambda cls, device_id=0: sm_count)
    return type(f"Simulated{cuda_cls.__name__}", (cuda_cls,), namespace), device_capability


def _vllm_modules() -> list[types.ModuleType]:
    return [m for name, m in list(sys.modules.items()) if name.split(".")[0] == "vllm" and m is not None]


def _clear_platform_caches() -> None:
    """Empty the functools caches of vLLM functions that may have asked ``current_platform``, so an answer cached
    for the real device is not given for the simulated one (nor the other way round afterwards), and of vLLM's
    log-once helpers, so the probe sees the reasons vLLM logs."""
    for module in _vllm_modules():
        namespace = vars(module)
        if "current_platform" not in namespace and module.__name__ != "vllm.logger":
            continue
        for name, value in list(namespace.items()):
            # Looked up on the type: a platform instance answers any attribute through a __getattr__ that logs.
            if hasattr(type(value), "cache_clear") and (module.__name__ != "vllm.logger" or "once" in name):
                with contextlib.suppress(Exception):
                    value.cache_clear()


class _Capture(logging.Handler):
    def __init__(self, records: list[tuple[str, str, str]]) -> None:
        super().__init__(logging.DEBUG)
        self.records = records

    def emit(self, record: logging.LogRecord) -> None:
        with contextlib.suppress(Exception):
            self.records.append((record.levelname, record.name, record.getMessage()))


@contextlib.contextmanager
def captured_vllm_logs(records: list[tuple[str, str, str]]) -> Iterator[None]:
    """vLLM's log records go to ``records`` instead of its handlers: the probe's imports and calls log lines that
    are no news to the user (a backend tried, a module imported), and the reasons among them are quoted."""
    logger = logging.getLogger("vllm")
    saved = (list(logger.handlers), logger.level, logger.propagate)
    logger.handlers[:] = [_Capture(records)]
    logger.setLevel(logging.DEBUG)
    logger.propagate = False
    try:
        yield
    finally:
        logger.handlers[:] = saved[0]
        logger.setLevel(saved[1])
        logger.propagate = saved[2]


#: What a simulated device answers where vLLM asks more than its capability: the RTX 2080 Ti's 68 SMs (vLLM's
#: FlashInfer sampler wants more than 16), device index 0.
SIMULATED_SM_COUNT = 68


@contextlib.contextmanager
def _device_facts_simulated(capability: tuple[int, int]) -> Iterator[None]:
    """Where vLLM's decision asks the device itself rather than the platform (torch's device capability and
    current device index, FlashInfer's detected target architectures), give the simulated device's answer;
    restored on exit."""
    with contextlib.ExitStack() as stack:
        torch = importlib.import_module("torch")
        # Some capability checks ask torch rather than the platform (vllm_flash_attn's FA2 check, for one).
        saved_capability = torch.cuda.get_device_capability
        torch.cuda.get_device_capability = lambda device=None: tuple(capability)
        stack.callback(setattr, torch.cuda, "get_device_capability", saved_capability)
        accelerator = getattr(torch, "accelerator", None)
        if accelerator is not None and hasattr(accelerator, "current_device_index"):
            saved_index = accelerator.current_device_index
            accelerator.current_device_index = lambda: 0
            stack.callback(setattr, accelerator, "current_device_index", saved_index)
        arch_env = "FLASHINFER_CUDA_ARCH_LIST"
        saved_env = os.environ.get(arch_env)
        os.environ[arch_env] = f"{capability[0]}.{capability[1]}"
        stack.callback(_restore_env, arch_env, saved_env)
        # FlashInfer caches the architectures it detected in a shared set (refreshed from the variable above when
        # empty): emptied for the probe, and afterwards put back, or left empty to be detected again.
        saved_targets = _flashinfer_targets()
        saved_copy = None if saved_targets is None else set(saved_targets)
        if saved_targets is not None:
            saved_targets.clear()
        stack.callback(_restore_flashinfer_targets, saved_copy)
        yield


def _flashinfer_targets() -> set[Any] | None:
    context = getattr(sys.modules.get("flashinfer.jit.core"), "current_compilation_context", None)
    targets = getattr(context, "TARGET_CUDA_ARCHS", None)
    return targets if isinstance(targets, set) else None


def _restore_flashinfer_targets(saved: set[Any] | None) -> None:
    targets = _flashinfer_targets()
    if targets is not None:
        targets.clear()
        targets.update(saved or ())


def _restore_env(name: str, value: str | None) -> None:
    if value is None:
        os.environ.pop(name, None)
    else:
        os.environ[name] = value


@contextlib.contextmanager
def simulated_cuda_platform(
    capability: tuple[int, int], *, device_name: str | None = None, real_device: bool = False
) -> Iterator[SimulatedPlatform]:
    """vLLM's CUDA platform reporting ``capability``, seen as ``current_platform`` by every vLLM module, until exit.

    ``device_name``: what ``get_device_name`` says (vLLM quotes it in some refusals).  ``real_device``: a GPU of
    this capability is the current device (``caovan doctor``, ``caovan serve``), so the few questions vLLM puts to
    the device itself go to it; otherwise they get a 2080 Ti's answers (:data:`SIMULATED_SM_COUNT`).  Raises
    ImportError or LookupError when this vLLM has no CUDA platform to simulate (every question is then unanswered).
    """
    platforms = importlib.import_module("vllm.platforms")
    cuda_module, stubbed = import_cuda_platform_module()
    name = device_name or f"simulated sm_{capability[0]}{capability[1]}"
    sm_count = None if real_device else SIMULATED_SM_COUNT
    cls, device_capability = _platform_class(cuda_module, capability, name, sm_count)
    simulated = cls()
    original = platforms.current_platform  # resolves it, as vLLM's first use would
    had_attribute = "current_platform" in vars(platforms)
    saved_private = vars(platforms).get("_current_platform", None)
    state = SimulatedPlatform(simulated, device_capability, cuda_module, stubbed)
    try:
        # Modules that ran ``from vllm.platforms import current_platform`` hold their own reference: each is
        # pointed at the simulation; modules imported during the probe get it from vllm.platforms itself.
        for module in _vllm_modules():
            if vars(module).get("current_platform") is original:
                module.current_platform = simulated
        platforms.current_platform = simulated
        if "_current_platform" in vars(platforms):
            platforms._current_platform = simulated
        _clear_platform_caches()
        with contextlib.ExitStack() as stack:
            stack.enter_context(captured_vllm_logs(state.logs))
            if not real_device:
                stack.enter_context(_device_facts_simulated(capability))
            yield state
    finally:
        for module in _vllm_modules():
            if vars(module).get("current_platform") is simulated:
                module.current_platform = original
        if not had_attribute:
            vars(platforms).pop("current_platform", None)
        if "_current_platform" in vars(platforms):
            platforms._current_platform = saved_private if saved_private is not None else original
        _clear_platform_caches()
