"""The state fan-out shared by the experiments that time it: its body (a Triton function) and its check.

The fan-out loads each (sequence, value head, value block) state slab once and stores it to the state slot of
every token of the sequence: the state part of a spec-decode call and nothing else. ``../memory-floor/floor.py``
times its own kernel of this shape (with its store options); ``../launch-chain/chain.py`` and the timeline
kernels of ``../launch-chain/make_timeline_kernels.py`` call ``_fanout_body``; all of them check a fan-out with
``fanout_is_right``. The experiment scripts find this file through ``sys.path`` (folder names with hyphens are
no packages).
"""

import torch
import triton
import triton.language as tl
from triton.language.extra.cuda import gdc_wait


@triton.jit
def _fanout_body(ssm_ptr, qsl_ptr, si_ptr, na_ptr, s_block, s_head, s_v, s_si, i_v, i_nh, HV, K: tl.constexpr,
                 BV: tl.constexpr, NULL_SLOT_MAX: tl.constexpr, USE_PDL: tl.constexpr):  # fmt: skip
    i_n = i_nh // HV
    i_hv = i_nh % HV
    bos = tl.load(qsl_ptr + i_n)
    seq_len = tl.load(qsl_ptr + i_n + 1) - bos
    si_row = si_ptr + i_n.to(tl.int64) * s_si
    initial = tl.load(si_row + tl.load(na_ptr + i_n) - 1, mask=seq_len > 0, other=0).to(tl.int64)
    if (seq_len > 0) & (initial > NULL_SLOT_MAX):
        offs = (i_v * BV + tl.arange(0, BV)).to(tl.int64)[:, None] * s_v + tl.arange(0, K)[None, :]
        head = ssm_ptr + i_hv.to(tl.int64) * s_head
        slab = tl.load(head + initial * s_block + offs)
        if USE_PDL:
            gdc_wait()
        for t in range(0, seq_len):
            slot = tl.load(si_row + t).to(tl.int64)
            if slot > NULL_SLOT_MAX:
                tl.store(head + slot * s_block + offs, slab, cache_modifier=".cs")
    elif USE_PDL:
        gdc_wait()


def fanout_is_right(fn, inputs):
    """Every valid token slot of every sequence holds its initial slab after one call (a wrong floor is no floor)."""
    inp = inputs.clone()
    before = inp.ssm_state.clone()
    args, kwargs = inp.kernel_args()
    fn(*args, **kwargs)
    after = inp.ssm_state
    qsl, si, na = inp.query_start_loc.tolist(), inp.state_indices.tolist(), inp.num_accepted_tokens.tolist()
    for n in range(len(qsl) - 1):
        initial = si[n][na[n] - 1]
        if qsl[n + 1] - qsl[n] <= 0 or initial <= 0:
            continue
        for t in range(qsl[n + 1] - qsl[n]):
            if si[n][t] > 0 and not torch.equal(after[si[n][t]], before[initial]):
                return False
    return True
