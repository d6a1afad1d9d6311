"""A variant launched with ``maxnreg=168``, for ``../qk-programmatic-launch/variants.py``.

Copied to ``.exp/variants2/k_bfly168.py`` (and, with ``VARIANT = "noreduce"``, to ``k_noreduce168.py``): it
loads ``.exp/variants2/k_VARIANT.py`` and adds ``maxnreg=168`` to every launch and warm-up, so that at
BV 16 one-warp programs fit 12 per SM on sm_90 (one wave at Qwen3.6-27B TP=2 with 8 sequences).
"""

import importlib.util

VARIANT = "bfly"

_s = importlib.util.spec_from_file_location(f"k_{VARIANT}_inner", f".exp/variants2/k_{VARIANT}.py")
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


_caovan_sm75_fused_v_gdn_spec_decode_kernel = _MaxReg(_m._caovan_sm75_fused_v_gdn_spec_decode_kernel, 168)
