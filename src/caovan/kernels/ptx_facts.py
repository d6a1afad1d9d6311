"""What a compiled Triton kernel's PTX says about it on a given GPU: bf16 use, registers and spills.

Shared by caovan's own sm_75 gate (``kernels/gdn_spec_decode/aot.py``) and the ``sm75`` tier's compiles of the row's
vLLM kernels (``caovan.sm75.kernel_compile``), so both judge a kernel by the same rules.
"""

from __future__ import annotations

import os
import re
import subprocess
import tempfile

#: Shared memory one block may use on Turing (sm_75), the opt-in maximum (cudaDevAttrMaxSharedMemoryPerBlockOptin).
SM75_MAX_SHARED_MEMORY_BYTES = 65536


def compiled_ptx(compiled) -> str:
    """The PTX text of a compiled Triton kernel (``asm["ptx"]`` is bytes in some releases, str in others)."""
    ptx = compiled.asm.get("ptx", "")
    return ptx.decode() if isinstance(ptx, bytes) else ptx


def ptx_has_bf16(ptx: str) -> bool:
    """True if the PTX uses a bf16 type (cvt.*.bf16*, *.bf16x2 ...); names and paths don't count."""
    return re.search(r"\.bf16", ptx) is not None


def ptxas_arch(arch: int) -> str:
    # Triton emits PTX for the architecture-specific target from sm_90 on ("sm_90a"), as its own compiler does.
    return f"sm_{arch}a" if arch >= 90 else f"sm_{arch}"


def ptxas_resource_usage(ptx: str, capability: tuple[int, int]) -> tuple[int | None, int | None]:
    """(registers per thread, spill store+load bytes) from Triton's bundled ``ptxas -v``.

    Best effort, informational: (None, None) when ptxas cannot be found or run (its lookup is a
    Triton internal that changes between releases)."""
    arch = capability[0] * 10 + capability[1]
    try:
        from triton.backends.nvidia.compiler import get_ptxas

        try:
            ptxas = get_ptxas(arch).path
        except TypeError:  # triton < 3.5: get_ptxas() takes no arch
            ptxas = get_ptxas().path
        with tempfile.TemporaryDirectory() as tmp:
            src = os.path.join(tmp, "kernel.ptx")
            with open(src, "w") as f:
                f.write(ptx)
            run = subprocess.run(
                [ptxas, "-v", f"--gpu-name={ptxas_arch(arch)}", src, "-o", os.path.join(tmp, "k.cubin")],
                capture_output=True,
                text=True,
                timeout=120,
                check=True,
            )
    except Exception:
        return None, None
    return ptxas_log_usage(run.stderr)


def ptxas_log_usage(log: str) -> tuple[int | None, int | None]:
    """(registers per thread, spill store+load bytes) read from a ``ptxas -v`` log; None for what it does not say."""
    regs = re.search(r"Used (\d+) registers", log)
    spills = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", log)
    return (
        int(regs.group(1)) if regs else None,
        int(spills.group(1)) + int(spills.group(2)) if spills else None,
    )


def sm75_rule_problems(
    where: str, shared_bytes: int, ptx_bf16: bool, bf16_inputs: bool, spill_bytes: int | None
) -> list[str]:
    """The sm_75 rules both gates apply to one compiled kernel: shared memory within Turing's 64 KiB, no bf16 in the
    PTX unless an input is bf16, no register spills (``spill_bytes`` None: no ptxas to ask)."""
    problems = []
    if shared_bytes > SM75_MAX_SHARED_MEMORY_BYTES:
        problems.append(f"{where}: shared memory {shared_bytes} B > {SM75_MAX_SHARED_MEMORY_BYTES} B")
    if ptx_bf16 and not bf16_inputs:
        problems.append(f"{where}: bf16 in the PTX although no input is bf16")
    if spill_bytes:
        problems.append(f"{where}: {spill_bytes} B of register spills")
    return problems
