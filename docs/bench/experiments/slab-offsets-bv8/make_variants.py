"""Writes .exp/variants2/k_cs80.py, k_cs88.py: at BV 8, the V/GDN kernel with the state slab's offsets as
compile-time constants (``../issue-profile/make_cstride_variant.py``) and a register cap (80 or 88); at any other
BV, main's kernel unchanged. Timed against main with ``../last-token-write-through/ab.py``.

Experiment (repository root). ``../issue-profile/`` found the constant offsets take the kernel from 168 to 128
registers at BV 16 and make it slower there. At BV 8 they take it from 118 to 94 (sm_90, 27B TP=2, MTP 4, fp32
state), and a cap then fits it without spills: 88 registers leave room for five warps per SM sub-partition plus a
Q/K warp beside them, 80 for six (the whole 8-sequence grid at BV 8 in one wave). Like main's entry, the
wrappers pick BV by the one-wave rule (``_fit_value_block`` compiles each candidate with the cap it will run
with); a batch that does not fit at BV 8 runs main's kernel at BV 16.
"""

SRC = open(".exp/variants2/k_cstride.py").read()  # written by ../issue-profile/make_cstride_variant.py
WRAPPER = """

import caovan.kernels.gdn_spec_decode.triton_kernels as _main
import inspect as _inspect

_CSTRIDE = _caovan_sm75_fused_v_gdn_spec_decode_kernel
_NAMES = list(_inspect.signature(_CSTRIDE.fn).parameters)
_reported = set()


def _pick(args, kw):
    bv = dict(zip(_NAMES, args))["BV"]
    if bv != 8:
        return _main._caovan_sm75_fused_v_gdn_spec_decode_kernel
    kw["maxnreg"] = MAXNREG
    return _CSTRIDE


class _ByBlock:
    def __getitem__(self, grid):
        def launch(*args, **kw):
            compiled = _pick(args, kw)[grid](*args, **kw)
            key = (compiled.hash, tuple(grid))
            if key not in _reported:  # registers and spills of each compiled kernel, once (the run's log)
                _reported.add(key)
                print(f"[cs] grid {tuple(grid)} maxnreg {kw.get('maxnreg')}: {compiled.n_regs} registers,"
                      f" {compiled.n_spills} spills", flush=True)
            return compiled

        return launch

    def warmup(self, *args, grid, **kw):
        return _pick(args, kw).warmup(*args, grid=grid, **kw)


NO_DIRECT_LAUNCH = True  # the kernel and its options depend on BV: every launch goes through the wrapper
_caovan_sm75_fused_v_gdn_spec_decode_kernel = _ByBlock()
"""
for cap in (80, 88):
    open(f".exp/variants2/k_cs{cap}.py", "w").write(SRC + f"\nMAXNREG = {cap}\n" + WRAPPER)
