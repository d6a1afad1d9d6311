"""The ``binaries`` part of the sm75 tier: does the row's compiled CUDA code carry code a 7.5 device can run?

vLLM's extensions (``vllm/_C.abi3.so``, ``_moe_C``, the flash-attention and FlashMLA builds, ...) and torch's CUDA
libraries keep their device code as fat binaries in the ELF section ``.nv_fatbin``: a run of containers (one per
compiled CUDA source), each a list of entries that are either SASS (an ELF cubin for one ``sm_XY``) or PTX
(``compute_XY``, compiled by the driver when the module loads). :mod:`caovan.sm75.fatbin` reads their archs from the
entry headers alone; this module finds the binaries by scanning the two packages, judges each one for a device arch
by NVIDIA's rules, and adds torch's own compiled arch list (``torch._C._cuda_getArchFlags()``, which needs no GPU
where ``torch.cuda.get_arch_list()`` returns ``[]``).

Not seen here: device code a library keeps somewhere other than ``.nv_fatbin`` (cubins embedded as data, kernels
compiled at run time such as Triton's or DeepGEMM's), and libraries outside the vllm and torch packages (the
``nvidia-*`` wheels).
"""

from __future__ import annotations

import importlib.machinery
import importlib.metadata
import importlib.util
import os
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from .fatbin import FATBIN_SECTION, KIND_PTX, KIND_SASS, BinaryReadError, read_fatbins

__all__ = ["BinaryReadError", "inspect_binaries", "inspect_binary", "judge", "ptx_runs_on", "sass_runs_on"]

#: torch's CUDA libraries listed even where they carry no device code (libc10_cuda is host code only).
TORCH_CUDA_LIBRARIES = ("libtorch_cuda.so", "libc10_cuda.so")
# vLLM's own kernel libraries, which every model's forward pass calls into (custom ops, MoE routing): ``_C`` and
# ``_moe_C``, or ``_C_stable_libtorch`` / ``_moe_C_stable_libtorch`` built against torch's stable ABI (0.12 has the
# former, 0.21 both, 0.33 only the latter). vLLM's CUDA platform imports them at start-up (``import_kernels``); a
# device needs code in each. The other extensions (flash-attention, FlashMLA, QuTLASS, DeepGEMM, ...) back kernels,
# quantisation methods and attention backends that vLLM picks by compute capability: lacking sm_75 there is expected.
_STARTUP_EXTENSION = re.compile(r"^(_C|_moe_C)(_\w+)?\.")
_CORE_EXTENSION = re.compile(r"^_C(_\w+)?\.")
_SHARED_LIBRARY = re.compile(r"\.so(\.\d+)*$")
_ABI_TAGGED_EXTENSION = re.compile(r"\.(cpython|pypy)[^.]*\.so$")
_ARCH_FLAG = re.compile(r"(sm|compute)_(\d+)([af]?)")


# --- NVIDIA's compatibility rules ---------------------------------------------------------------------------------
# SASS: "a cubin object generated for compute capability X.y will only execute on devices of compute capability X.z
# where z >= y" (CUDA C++ Programming Guide, "Binary Compatibility"). So sm_70 and sm_72 SASS do run on 7.5: the
# Turing Compatibility Guide, 1.3 "Compatibility between Volta and Turing", says so in as many words ("any binary
# that runs on Volta will be able to run on Turing"), save Volta kernels that opt into more than 64 KB of shared
# memory, which will not launch on Turing. Arch-specific cubins (sm_90a) run only on their exact arch; none exists
# below 9.0, so the rule below does not need to read that flag.
# PTX: "PTX code produced for some specific compute capability can always be compiled to binary code of greater or
# equal compute capability" (CUDA C++ Programming Guide, "PTX Compatibility"); the driver compiles it at load,
# provided it knows the PTX ISA version (a CUDA 13 build's PTX 9.0 needs an R580 or newer driver).


def sass_runs_on(code_arch: int, device_arch: int) -> bool:
    """Whether ``sm_<code_arch>`` SASS runs on a ``device_arch`` device: same major arch, minor not above it."""
    return code_arch // 10 == device_arch // 10 and code_arch % 10 <= device_arch % 10


def ptx_runs_on(code_arch: int, device_arch: int) -> bool:
    """Whether the driver can compile ``compute_<code_arch>`` PTX for a ``device_arch`` device."""
    return code_arch <= device_arch


def judge(sass: Iterable[int], ptx: Iterable[int], device_arch: int) -> tuple[str, str | None]:
    """(``"sass"`` | ``"ptx"`` | ``"none"``, the code the device would use): SASS first, as the CUDA runtime
    prefers a cubin to compiling PTX, and the highest arch that fits."""
    runnable = [arch for arch in sass if sass_runs_on(arch, device_arch)]
    if runnable:
        return "sass", f"sm_{max(runnable)}"
    compilable = [arch for arch in ptx if ptx_runs_on(arch, device_arch)]
    if compilable:
        return "ptx", f"compute_{max(compilable)}"
    return "none", None


# --- judging binaries ---------------------------------------------------------------------------------------------


def _arch_list(names: Iterable[str]) -> str:
    return ", ".join(names) or "nothing"


def inspect_binary(path: Path, root: Path, arch: int = 75) -> dict[str, Any]:
    """One binary's entry: its SASS and PTX archs, its verdict for an ``sm_<arch>`` device, and how many of its
    fatbins (compiled sources) have code for it."""
    key = f"sm{arch}"
    entry: dict[str, Any] = {"file": path.relative_to(root).as_posix(), "has_fatbin": False, "sass": [], "ptx": []}
    entry.update({key: None, "error": None})
    try:
        fatbins = read_fatbins(path)
    except BinaryReadError as exc:
        entry["error"] = str(exc)
        return entry
    except OSError as exc:
        entry["error"] = f"{path}: cannot read: {exc.strerror or exc}"
        return entry
    codes = [code for fatbin in fatbins or () for code in fatbin.entries]
    if not codes:
        entry["note"] = f"no CUDA device code (no {FATBIN_SECTION} section, or an empty one)"
        return entry
    sass = sorted({code.arch for code in codes if code.kind == KIND_SASS})
    ptx = sorted({code.arch for code in codes if code.kind == KIND_PTX})
    verdict, used = judge(sass, ptx, arch)
    per_fatbin = {"total": len(fatbins or ()), "sass": 0, "ptx": 0, "none": 0}
    for fatbin in fatbins or ():
        archs = {kind: [code.arch for code in fatbin.entries if code.kind == kind] for kind in (KIND_SASS, KIND_PTX)}
        per_fatbin[judge(archs[KIND_SASS], archs[KIND_PTX], arch)[0]] += 1
    entry.update(
        has_fatbin=True,
        sass=[f"sm_{a}" for a in sass],
        ptx=[f"compute_{a}" for a in ptx],
        ptx_isa=sorted({f"{c.version[0]}.{c.version[1]}" for c in codes if c.kind == KIND_PTX}),
        fatbins=per_fatbin,
    )
    entry[f"{key}_code"] = used
    entry[key] = verdict
    entry["note"] = _note(entry, verdict, used, arch)
    return entry


def _note(entry: dict[str, Any], verdict: str, used: str | None, arch: int) -> str:
    device = f"{arch // 10}.{arch % 10}"
    if verdict == "none":
        # SASS runs only within its major arch, PTX only on equal or newer archs: neither fits.
        return f"nothing a {device} device can run: SASS {_arch_list(entry['sass'])}; PTX {_arch_list(entry['ptx'])}"
    if verdict == "sass" and used == f"sm_{arch}":
        note = f"sm_{arch} SASS"
    elif verdict == "sass":
        note = f"no sm_{arch} SASS; {used} SASS runs on {device} (same major arch, lower minor)"
        if used in ("sm_70", "sm_72") and arch == 75:
            note += ", save Volta kernels that opt into more than 64 KB of shared memory"
    else:
        note = f"no SASS for {device}; the driver JIT-compiles {used} PTX (ISA {', '.join(entry['ptx_isa'])}) at load"
    fatbins = entry["fatbins"]
    if fatbins["none"]:
        note += f"; {fatbins['none']} of its {fatbins['total']} fatbins have no code for {device} (kernels built only"
        note += " for other archs)"
    return note


def _flags_verdict(flags: Iterable[str], arch: int) -> tuple[str, str | None]:
    sass, ptx = [], []
    for flag in flags:
        match = _ARCH_FLAG.fullmatch(flag)
        # sm_90a / sm_100f code runs only on its own arch (or family), never below it: kept only for that arch.
        if match is None or (match[3] and int(match[2]) != arch):
            continue
        (sass if match[1] == "sm" else ptx).append(int(match[2]))
    return judge(sass, ptx, arch)


# --- finding the row's binaries -----------------------------------------------------------------------------------


def _package_dir(name: str) -> Path | None:
    """The installed package's folder, found without importing it."""
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def _version(distribution: str) -> str | None:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


def _for_another_python(name: str) -> bool:
    """An extension built for another interpreter (vLLM ships DeepGEMM's ``_C`` for cp310 to cp314): never loaded."""
    tagged = tuple(suffix for suffix in importlib.machinery.EXTENSION_SUFFIXES if suffix != ".so")
    return bool(_ABI_TAGGED_EXTENSION.search(name)) and not name.endswith(tagged)


def _shared_libraries(folder: Path) -> list[Path]:
    found = []
    for dirpath, dirnames, filenames in os.walk(folder):
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
        for name in sorted(filenames):
            path = Path(dirpath) / name
            if _SHARED_LIBRARY.search(name) and not path.is_symlink():
                found.append(path)
    return found


def _torch_arch_flags() -> tuple[list[str], str | None]:
    """torch's compiled arch list from the build's flags; unlike ``torch.cuda.get_arch_list()`` it needs no GPU."""
    try:
        import torch

        flags = torch._C._cuda_getArchFlags()
    except Exception as exc:  # a CPU-only torch has no such function; any failure is reported, not raised
        return [], f"torch._C._cuda_getArchFlags(): {type(exc).__name__}: {exc}"
    return (flags or "").split(), None


def inspect_binaries(
    arch: int = 75,
    *,
    vllm_dir: Path | None = None,
    torch_dir: Path | None = None,
    torch_arch_flags: list[str] | None = None,
) -> dict[str, Any]:
    """The ``binaries`` findings part for an ``sm_<arch>`` device (a JSON-able dict).

    By default it reads the installed vllm and torch packages; ``vllm_dir``, ``torch_dir`` and ``torch_arch_flags``
    put others in their place (their versions are then unknown).
    """
    key = f"sm{arch}"
    found_vllm = vllm_dir or _package_dir("vllm")
    found_torch = torch_dir or _package_dir("torch")

    extensions: list[dict[str, Any]] = []
    startup: list[dict[str, Any]] = []
    other_python: list[str] = []
    if found_vllm is not None:
        for path in _shared_libraries(found_vllm):
            if _for_another_python(path.name):
                other_python.append(path.relative_to(found_vllm.parent).as_posix())
                continue
            extensions.append(inspect_binary(path, found_vllm.parent, arch))
            if path.parent == found_vllm and _STARTUP_EXTENSION.match(path.name):
                startup.append(extensions[-1])

    libraries: list[dict[str, Any]] = []
    if found_torch is not None:
        for path in _shared_libraries(found_torch / "lib"):
            entry = inspect_binary(path, found_torch.parent, arch)
            if entry["has_fatbin"] or entry["error"] or path.name in TORCH_CUDA_LIBRARIES:
                libraries.append(entry)

    flags, flags_error = (torch_arch_flags, None) if torch_arch_flags is not None else _torch_arch_flags()
    libtorch_cuda = next((e for e in libraries if Path(e["file"]).name == "libtorch_cuda.so"), None)
    if flags:
        torch_verdict, source = _flags_verdict(flags, arch)[0], "arch_flags"
    elif libtorch_cuda is not None and libtorch_cuda[key] is not None:
        torch_verdict, source = libtorch_cuda[key], "libtorch_cuda.so"
    else:
        torch_verdict, source = "none", None
    torch_doc: dict[str, Any] = {
        "version": _version("torch") if torch_dir is None and found_torch else None,
        "arch_flags": flags,
        key: torch_verdict,
        f"{key}_from": source,
        "libraries": libraries,
    }
    if flags_error:
        torch_doc["arch_flags_error"] = flags_error
    vllm_doc: dict[str, Any] = {
        "version": _version("vllm") if vllm_dir is None and found_vllm else None,
        "extensions": extensions,
        "other_python_extensions": other_python,
    }
    return {
        "arch": f"sm_{arch}",
        "torch": torch_doc,
        "vllm": vllm_doc,
        "summary": _summary(arch, found_vllm, found_torch, torch_doc, extensions, startup, libtorch_cuda),
    }


def _summary(
    arch: int,
    found_vllm: Path | None,
    found_torch: Path | None,
    torch_doc: dict[str, Any],
    extensions: list[dict[str, Any]],
    startup: list[dict[str, Any]],
    libtorch_cuda: dict[str, Any] | None,
) -> dict[str, Any]:
    """Ready when torch's build and every binary a start-up needs have code for the device (see
    ``_STARTUP_EXTENSION``); ``missing`` lists every binary with nothing it can run, needed or not."""
    key = f"sm{arch}"
    problems = []
    core = [e for e in startup if _CORE_EXTENSION.match(Path(e["file"]).name)]
    if found_vllm is None:
        problems.append("vLLM is not installed")
    elif not core:
        problems.append(f"vLLM's _C extension (_C or _C_stable_libtorch) was not found in {found_vllm}")
    elif not any(e["has_fatbin"] for e in core):
        # A CPU build of vLLM has a _C without device code; a CUDA build keeps its kernels there.
        problems.append(f"{', '.join(e['file'] for e in core)}: no CUDA device code at all (a build without CUDA?)")
    if found_torch is None:
        problems.append("torch is not installed")
    elif libtorch_cuda is None:
        problems.append(f"torch's libtorch_cuda.so was not found in {found_torch / 'lib'}")
    elif not libtorch_cuda["has_fatbin"] and not libtorch_cuda["error"]:
        problems.append(f"{libtorch_cuda['file']}: no CUDA device code at all (a build without CUDA?)")
    required = startup + ([libtorch_cuda] if libtorch_cuda else [])
    for entry in required:
        if entry["error"]:
            problems.append(entry["error"])
        elif entry[key] == "none":
            problems.append(f"{entry['file']}: {entry['note']}")
    if torch_doc[key] == "none":
        flags = " ".join(torch_doc["arch_flags"]) or "none"
        problems.append(f"torch was built for no arch that runs on sm_{arch} (arch flags: {flags})")
    everything = torch_doc["libraries"] + extensions
    return {
        "ready": not problems,
        "missing": [e["file"] for e in everything if e[key] == "none"],
        "required": [e["file"] for e in required],
        "unreadable": [e["file"] for e in everything if e["error"]],
        "problems": problems,
    }
