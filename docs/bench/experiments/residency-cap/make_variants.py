"""Writes .exp/variants2/k_rc_*.py: main's V/GDN kernel launched with the slab offsets compiled in at any BV and/or
with extra dynamic shared memory per program, which caps how many programs an SM holds (prepared: see README.md).

Experiment (repository root). Each module wraps main's kernel (no source edit):
- FORCE_CONST: launch with CONST_SLAB_OFFSETS on at every BV. At BV 16 that takes 168 -> 128 registers (sm_90).
- SHARED: the launch's dynamic shared memory per program, in bytes. ``gdn_spec_decode``'s direct launch takes
  ``packed_metadata`` (num_warps, num_ctas, shared bytes) from the compiled kernel the wrapper returns, so a proxy
  with a larger shared size changes the residency of every launch after the first (the first, the accuracy check
  of ab.py, launches as compiled). It also sets the function's preferred carveout to the largest shared memory
  (cuFuncSetAttribute, CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT = 9, 100 %).
  - 17024 B: with the 1 KiB each program reserves, 13 programs need 234624 B > 228 KiB, so at most 12 per SM; 12
    leave 16896 B, enough for a Q/K program beside them.
  - 18432 B: at most 12, and no shared memory left for a Q/K program.
"""

import os

TEMPLATE = '''"""Variant written by docs/bench/experiments/residency-cap/make_variants.py (see its docstring)."""

import ctypes
import inspect

import caovan.kernels.gdn_spec_decode.triton_kernels as _main

FORCE_CONST = {force!r}
SHARED = {shared!r}
_KERNEL = _main._caovan_sm75_fused_v_gdn_spec_decode_kernel
_NAMES = list(inspect.signature(_KERNEL.fn).parameters)
_CONST = _NAMES.index("CONST_SLAB_OFFSETS")
_reported = set()


def _args(args):
    if not FORCE_CONST:
        return args
    bound = dict(zip(_NAMES, args))
    return (*args[:_CONST], True, bound["stride_ssm_v"], bound["stride_ssm_k"], *args[_CONST + 3 :])


class _WithShared:
    """The compiled kernel as the entry's direct launch reads it, with SHARED bytes of shared memory per launch."""

    def __init__(self, compiled):
        self._compiled = compiled
        num_warps, num_ctas, shared = compiled.packed_metadata
        self.packed_metadata = (num_warps, num_ctas, max(shared, SHARED))
        if SHARED:
            cuda = ctypes.CDLL("libcuda.so.1")
            rc = cuda.cuFuncSetAttribute(ctypes.c_void_p(compiled.function), 9, 100)
            assert rc == 0, f"cuFuncSetAttribute(carveout) returned {{rc}}"

    def __getattr__(self, name):
        return getattr(self._compiled, name)


class _Wrapped:
    def __getitem__(self, grid):
        def launch(*args, **kw):
            compiled = _KERNEL[grid](*_args(args), **kw)
            key = (compiled.hash, tuple(grid))
            if key not in _reported:  # registers and shared memory of each compiled kernel, once (the run's log)
                _reported.add(key)
                shared = compiled.metadata.shared
                print(f"[rc] grid {{tuple(grid)}} const {{FORCE_CONST}}: {{compiled.n_regs}} registers,"
                      f" {{compiled.n_spills}} spills, shared {{shared}} -> {{max(shared, SHARED)}} B", flush=True)
            return _WithShared(compiled)

        return launch

    def warmup(self, *args, grid, **kw):
        return _KERNEL.warmup(*_args(args), grid=grid, **kw)


_caovan_sm75_fused_v_gdn_spec_decode_kernel = _Wrapped()
'''

os.makedirs(".exp/variants2", exist_ok=True)
for name, force, shared in (
    ("rc_const", True, 0),
    ("rc_const_s17024", True, 17024),
    ("rc_const_s18432", True, 18432),
    ("rc_main_s17024", False, 17024),
):
    open(f".exp/variants2/k_{name}.py", "w").write(TEMPLATE.format(force=force, shared=shared))
