"""Main's kernels with register caps so that a Q/K program fits beside 12 V/GDN programs on one SM (sm_90).

Copied to ``.exp/variants2/k_fit12.py`` for ``../cold-l2/variants_cold.py`` (``VARIANT_QK_KERNEL``: its Q/K
kernel is launched too). ``../launch-chain/timeline-h200.json`` shows the block scheduler placing the programs of
a dependent grid around the Q/K kernel's programs still resident. Main's V/GDN kernel takes 168 registers at BV 16
(12 one-warp programs = 64,512 of the SM's 65,536 registers) and the Q/K kernel 48 at 4 warps (6,144): on the
128 SMs that hold a Q/K program only 11 V/GDN programs fit, so 80 of the 1,536 programs at 27B TP=2 B8 start only
when Q/K programs end. Here the V/GDN kernel is capped at 160 registers (no spills: 12 x 5,120 = 61,440) and the
Q/K kernel at 64 registers with 2 warps (4,096) or 128 with 1 warp (115 used, 3,840): together one SM's registers
or less. With 4 Q/K warps no cap is applied (a control: the V/GDN cap alone). Correction, same session: counted by
the SM's four register banks (a warp's registers come from one bank of 16,384), these caps do not make room for
12 V/GDN programs beside a Q/K program either (see README.md); this variant measures the caps, not full residency.
"""

from caovan.kernels.gdn_spec_decode import triton_kernels as _main

V_GDN_MAXNREG = 160
QK_MAXNREG = {1: 128, 2: 64}  # by num_warps; 4 warps would need 32 (160 bytes of spills): not capped
VARIANT_QK_KERNEL = True


class _Capped:
    def __init__(self, kernel, cap):
        self.kernel, self.cap = kernel, cap

    def _options(self, kw):
        n = self.cap(kw.get("num_warps", 4))
        return {} if n is None else {"maxnreg": n}

    def __getitem__(self, grid):
        launch = self.kernel[grid]
        return lambda *a, **kw: launch(*a, **self._options(kw), **kw)

    def warmup(self, *a, **kw):
        return self.kernel.warmup(*a, **self._options(kw), **kw)


_caovan_sm75_fused_v_gdn_spec_decode_kernel = _Capped(
    _main._caovan_sm75_fused_v_gdn_spec_decode_kernel, lambda warps: V_GDN_MAXNREG
)
_caovan_sm75_prepare_qk_conv_spec_decode_kernel = _Capped(
    _main._caovan_sm75_prepare_qk_conv_spec_decode_kernel, QK_MAXNREG.get
)
