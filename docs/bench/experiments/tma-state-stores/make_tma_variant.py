"""Writes .exp/variants2/k_tma.py, k_tma2.py, k_tma2r168.py: V/GDN kernels whose state stores are TMA stores.

Experiment (repository root; timed on an H200: see README.md). ``../issue-profile/`` shows the token loop
spending its stall samples on dependency chains, the 16 state stores per token (store back-pressure and the
register reuse behind them) and the 64-bit address arithmetic of those stores. Here the state slab of each token
goes to shared memory and one thread hands it to the tensor memory accelerator (``cp.async.bulk.tensor``), which
writes it to the cache block while the warp goes on with the next token. The descriptor covers the whole SSM cache
``(blocks, HV, V, K)``, so the store's coordinates are just (slot, value head, first value row, 0). Differences
from main, besides the store: no streaming (evict-first) hint, which Triton's descriptor store does not take; only
the ``vk`` state layout (K innermost, as TMA needs), the wrapper sends other layouts to main's kernel.
The module exposes the kernel under main's name as a launcher object, for ``../cold-l2/variants_cold.py``
(``NO_DIRECT_LAUNCH``: its launch takes one argument more than main's).
"""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from source_edits import sub  # noqa: E402

src = open("src/caovan/kernels/gdn_spec_decode/triton_kernels.py").read()
start = src.index("@triton.jit\ndef _caovan_sm75_fused_v_gdn_spec_decode_kernel(")
kernel = src[start:]


kernel = sub(kernel, "def _caovan_sm75_fused_v_gdn_spec_decode_kernel(", "def _tma_v_gdn_kernel(")
kernel = sub(kernel, "    STAGGER: tl.constexpr,\n):\n", "    STAGGER: tl.constexpr,\n    ssm_desc,\n):\n")
kernel = sub(
    kernel,
    """            tl.store(
                head_base + block_t * stride_ssm_block + slab_offs,
                state.to(ssm_state_ptr.dtype.element_ty),
                mask=slab_mask,
                cache_modifier=".cs",
            )
""",
    """            ssm_desc.store(
                [block_t.to(tl.int32), i_hv, i_vb * BV, 0],
                state.to(ssm_state_ptr.dtype.element_ty).reshape(1, 1, BV, BK),
            )
""",
)

wrapper = '''

NO_DIRECT_LAUNCH = True  # for variants_cold.py: this launch takes one argument more than main's
MAXNREG = None  # k_tma2r168: 168, so that BV 16 keeps 12 programs per SM (no spills on sm_90)
_MAIN = _caovan_sm75_fused_v_gdn_spec_decode_kernel
_NAMES = _tma_v_gdn_kernel.arg_names
_SSM, _BV, _BK = _NAMES.index("ssm_state_ptr"), _NAMES.index("BV"), _NAMES.index("BK")
_SV, _SK = _NAMES.index("stride_ssm_v"), _NAMES.index("stride_ssm_k")


def _vk(args):
    """The state as (blocks, HV, V, K), K innermost: the layout TMA can take (``kv`` comes as (.., K, V))."""
    ssm = args[_SSM]
    return args[_SK] == 1 and ssm.stride(-1) == 1 and ssm.stride(-2) == args[_SV]


def _descriptor(args):
    from triton.tools.tensor_descriptor import TensorDescriptor

    ssm = args[_SSM]
    return TensorDescriptor(ssm, list(ssm.shape), list(ssm.stride()), [1, 1, args[_BV], args[_BK]])


def _cap(kw):
    return kw if MAXNREG is None else {**kw, "maxnreg": MAXNREG}


class _TmaStores:
    """``kernel[grid](*args, ...)`` as for main's kernel; ``vk`` states through the TMA variant, others main's."""

    def __getitem__(self, grid):
        def launch(*args, **kw):
            if not _vk(args):
                return _MAIN[grid](*args, **kw)
            return _tma_v_gdn_kernel[grid](*args, _descriptor(args), **_cap(kw))

        return launch

    def warmup(self, *args, **kw):
        if not _vk(args):
            return _MAIN.warmup(*args, **kw)
        return _tma_v_gdn_kernel.warmup(*args, _descriptor(args), **_cap(kw))


_caovan_sm75_fused_v_gdn_spec_decode_kernel = _TmaStores()
'''
open(".exp/variants2/k_tma.py", "w").write(src + "\n\n" + kernel + wrapper)

# k_tma2: the initial state slab loaded through the same descriptor too (one bulk load instead of 16 vector loads
# and their 64-bit addresses, in the prologue that holds ~13 % of the stall samples).
load = (
    "    state = tl.load(head_base + initial_block * stride_ssm_block + slab_offs, mask=slab_mask, other=0.0)"
    ".to(tl.float32)\n"
)
tma_load = (
    "    state = ssm_desc.load([initial_block.to(tl.int32), i_hv, i_vb * BV, 0]).reshape(BV, BK).to(tl.float32)\n"
)
open(".exp/variants2/k_tma2.py", "w").write(src + "\n\n" + sub(kernel, load, tma_load) + wrapper)
# k_tma2r168: k_tma2 needs 189 registers at BV 16 (10 programs per SM); capped at 168 it keeps main's 12.
capped = sub(wrapper, "MAXNREG = None", "MAXNREG = 168")
open(".exp/variants2/k_tma2r168.py", "w").write(src + "\n\n" + sub(kernel, load, tma_load) + capped)
