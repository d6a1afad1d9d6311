"""One recorded Triton launch compiled ahead of time for a GPU that is not here, with the row's own Triton.

The compile goes through ``JITFunction.run(..., warmup=True)`` under :func:`~caovan.sm75.device_view.sm75_device_view`:
Triton's own binder specialises the recorded arguments (dtypes, alignment, integers equal to 1 or divisible by 16,
constexprs) exactly as it would for a launch on that device, and compiles for its target; nothing is launched.
What decides whether the kernel can run there is then read from the result: its shared memory against the device's
opt-in limit, bf16 in the PTX of a build without bf16 inputs, and registers and spills from ``ptxas -v``.

Outcomes are deterministic in (Triton version, the kernel's source and the sources it calls, the specialisation,
launch options, target), so they are cached as small JSON files keyed by exactly that; a kernel byte-identical
across vLLM releases compiles once per Triton version.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from ..jsonfile import write_text_atomic
from ..kernels.ptx_facts import compiled_ptx, ptx_has_bf16, ptxas_log_usage, ptxas_resource_usage
from .device_view import RTX_2080_TI, DeviceFacts, sm75_device_view
from .launch_recorder import KernelLaunch

#: Where compile outcomes are cached (``nox -s matrix`` points every row at one folder under build/).
CACHE_DIR_ENV = "CAOVAN_SM75_CACHE_DIR"
DEFAULT_CACHE_DIR = Path("build") / "sm75-compile-cache"
#: Bump when what a cached outcome holds, or how it is judged, changes.
CACHE_LAYOUT = 1
_ERROR_CHARS = 600


@dataclass(frozen=True)
class CompileOutcome:
    """What compiling one launch for one target gave. ``error``: the compiler's message when it failed."""

    compiled: bool
    shared_bytes: int | None = None
    registers: int | None = None
    spill_bytes: int | None = None
    bf16_in_ptx: bool = False
    error: str | None = None
    seconds: float = 0.0
    cached: bool = False

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def _argument_class(value: Any) -> Any:
    """How Triton could specialise one argument: at least as fine as its binder, so equal keys mean equal code."""
    if hasattr(value, "data_ptr") and hasattr(value, "dtype"):
        return ["tensor", str(value.dtype), value.data_ptr() % 16 == 0]
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, int):
        return ["int", value == 1, value % 16 == 0, -(2**31) <= value < 2**31]
    if isinstance(value, float):
        return ["float"]
    return ["value", repr(value)]


def specialisation(launch: KernelLaunch) -> dict[str, Any]:
    """The launch as the compiler sees it: constexprs by value, everything else by its specialisation class."""
    constexprs = {p.name for p in launch.kernel.params if p.is_constexpr}
    arguments = {
        name: repr(value) if name in constexprs else _argument_class(value) for name, value in launch.arguments.items()
    }
    options = {k: v for k, v in sorted(launch.options.items()) if isinstance(v, (int, float, str, bool, type(None)))}
    return {"arguments": arguments, "options": options}


def cache_key(launch: KernelLaunch, facts: DeviceFacts) -> str:
    import triton

    data = {
        "layout": CACHE_LAYOUT,
        "triton": triton.__version__,
        "kernel": launch.kernel.cache_key,  # the source of the kernel and of every jitted function it calls
        "target": [facts.arch, facts.warp_size, facts.max_shared_mem],
        **specialisation(launch),
    }
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:32]


def cache_dir() -> Path:
    return Path(os.environ.get(CACHE_DIR_ENV) or DEFAULT_CACHE_DIR)


def _has_bf16_input(launch: KernelLaunch) -> bool:
    return any("bfloat16" in str(getattr(v, "dtype", "")) for v in launch.arguments.values())


@contextlib.contextmanager
def _ptxas_log_printed() -> Iterator[io.StringIO]:
    """Triton runs ``ptxas -v`` itself and prints its log where ``knobs.nvidia.dump_ptxas_log`` is on: read from
    there, registers and spills cost no second ptxas run (the caller falls back to one where no log came)."""
    captured = io.StringIO()
    try:
        from triton import knobs

        saved = knobs.nvidia.dump_ptxas_log
    except (ImportError, AttributeError):  # a Triton without the knob: nothing is printed
        with contextlib.redirect_stdout(captured):
            yield captured
        return
    knobs.nvidia.dump_ptxas_log = True
    try:
        with contextlib.redirect_stdout(captured):
            yield captured
    finally:
        knobs.nvidia.dump_ptxas_log = saved


def _compile(launch: KernelLaunch, facts: DeviceFacts) -> CompileOutcome:
    kernel = launch.kernel
    started = time.perf_counter()
    with sm75_device_view(facts), _ptxas_log_printed() as log:
        # A binder made for another target would compile for it: every compile here starts from a fresh one.
        kernel.device_caches.clear()
        try:
            compiled = kernel.run(grid=None, warmup=True, **launch.arguments, **launch.options)
        except Exception as exc:  # the compiler's verdict on this config, kept as its message
            message = " ".join(f"{type(exc).__name__}: {exc}".split())[:_ERROR_CHARS]
            return CompileOutcome(False, error=message, seconds=round(time.perf_counter() - started, 3))
        finally:
            kernel.device_caches.clear()
    if hasattr(compiled, "result"):  # an asynchronous compile's future
        compiled = compiled.result()
    ptx = compiled_ptx(compiled)
    registers, spills = ptxas_log_usage(log.getvalue())
    if registers is None:  # no log (an older Triton, or its own on-disk cache answered): ask ptxas again
        registers, spills = ptxas_resource_usage(ptx, facts.capability)
    return CompileOutcome(
        True,
        shared_bytes=int(compiled.metadata.shared),
        registers=registers,
        spill_bytes=spills,
        bf16_in_ptx=ptx_has_bf16(ptx),
        seconds=round(time.perf_counter() - started, 3),
    )


def compile_launch(launch: KernelLaunch, facts: DeviceFacts = RTX_2080_TI, *, use_cache: bool = True) -> CompileOutcome:
    """The outcome of compiling ``launch`` for ``facts``' target, from the cache when it holds it."""
    path = cache_dir() / f"{cache_key(launch, facts)}.json"
    if use_cache and path.is_file():
        try:
            return CompileOutcome(**{**json.loads(path.read_text(encoding="utf-8")), "cached": True})
        except (OSError, ValueError, TypeError):
            pass  # a damaged entry is compiled again and rewritten
    outcome = _compile(launch, facts)
    if use_cache:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_text_atomic(path, json.dumps(outcome.to_json(), sort_keys=True) + "\n")
    return outcome


def fits(outcome: CompileOutcome, launch: KernelLaunch, facts: DeviceFacts = RTX_2080_TI) -> str | None:
    """Why this compiled config cannot run on the device (None: it can)."""
    if not outcome.compiled:
        return f"does not compile: {outcome.error}"
    if outcome.shared_bytes is not None and outcome.shared_bytes > facts.max_shared_mem:
        return f"needs {outcome.shared_bytes} B of shared memory, the limit is {facts.max_shared_mem} B"
    if outcome.bf16_in_ptx and not _has_bf16_input(launch):
        return "bf16 instructions in a build without bf16 inputs"
    return None
