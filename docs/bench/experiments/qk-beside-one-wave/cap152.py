"""A variant launched with ``maxnreg=152`` (written as ``.exp/variants2/k_c152*.py`` by
``make_balanced_stagger_variants.py``): it loads ``.exp/variants2/k_VARIANT.py`` and adds the cap to every launch
and warm-up of its V/GDN kernel. At 152 registers three one-warp V/GDN programs and one Q/K warp (48 registers)
fit in each of an SM's four register banks, so the whole grid at 27B TP=2 B8 is resident from its start.
"""

import importlib.util

VARIANT = "base3"

_s = importlib.util.spec_from_file_location(f"k_{VARIANT}_capped", f".exp/variants2/k_{VARIANT}.py")
_m = importlib.util.module_from_spec(_s)
_s.loader.exec_module(_m)


class _MaxReg:
    def __init__(self, kernel, n):
        self.kernel, self.n = kernel, n

    def __getitem__(self, grid):
        launch = self.kernel[grid]
        return lambda *a, **kw: launch(*a, maxnreg=self.n, **kw)

    def warmup(self, *a, **kw):
        return self.kernel.warmup(*a, maxnreg=self.n, **kw)


_caovan_sm75_fused_v_gdn_spec_decode_kernel = _MaxReg(_m._caovan_sm75_fused_v_gdn_spec_decode_kernel, 152)
