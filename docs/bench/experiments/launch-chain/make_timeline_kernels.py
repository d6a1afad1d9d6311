"""Writes .exp/variants2/k_timeline.py: main's kernels plus timer writes, for ``timeline.py`` (repository root).

Every program of the Q/K kernel records the GPU's global timer at its start and end and its SM id into a
``times_ptr`` argument added at the end of its signature, and so does every V/GDN program that runs its token loop
(``v_times_ptr``); two more kernels come with them: the fan-out (``_fanout_body`` of ``../memory-floor/fanout.py``:
load the slab, store it to every token slot; never waits) and the empty front kernel (waits for its predecessor,
releases its dependent), both with the same timer writes.

Usage: make_timeline_kernels.py [SOURCE [NAME]]: the kernels of SOURCE (default: main's triton_kernels.py; a
variant such as ``.exp/variants2/k_stf23.py`` works the same) to ``.exp/variants2/k_NAME.py`` (default: timeline).
"""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from source_edits import sub  # noqa: E402

source = sys.argv[1] if len(sys.argv) > 1 else "src/caovan/kernels/gdn_spec_decode/triton_kernels.py"
name = sys.argv[2] if len(sys.argv) > 2 else "timeline"
src = open(source).read()


src = sub(
    src,
    "    USE_PDL: tl.constexpr,\n):\n    if USE_PDL:\n        # This launch is itself",
    "    USE_PDL: tl.constexpr,\n    times_ptr,\n):\n    start = _now()\n"
    "    if USE_PDL:\n        # This launch is itself",
)
src = sub(
    src,
    "    tl.store(scratch_ptrs, y, mask=store_mask)\n",
    "    tl.store(scratch_ptrs, y, mask=store_mask)\n"
    "    _record(times_ptr, (i_n * tl.num_programs(1) + i_h) * 2 + half, start)\n",
)
# the V/GDN kernel too, on its main path (the bench's model cases take none of its early exits)
src = sub(
    src,
    "    STAGGER: tl.constexpr,\n):\n    i_vb = tl.program_id(0)\n",
    "    STAGGER: tl.constexpr,\n    v_times_ptr,\n):\n    v_start = _now()\n    i_vb = tl.program_id(0)\n",
)
assert src.endswith('                cache_modifier=".cs",\n            )\n')
src += "    _record(v_times_ptr, i_nhv * tl.num_programs(0) + i_vb, v_start)\n"
src += """

from fanout import _fanout_body  # ../memory-floor/fanout.py, on sys.path in timeline.py

@triton.jit
def _now():
    return tl.inline_asm_elementwise("mov.u64 $0, %globaltimer;", "=l", [], dtype=tl.int64, is_pure=False, pack=1)


@triton.jit
def _smid():
    return tl.inline_asm_elementwise("mov.u32 $0, %smid;", "=r", [], dtype=tl.int32, is_pure=False, pack=1)


@triton.jit
def _record(times_ptr, program, start):
    tl.store(times_ptr + program * 3, start)
    tl.store(times_ptr + program * 3 + 1, _now())
    tl.store(times_ptr + program * 3 + 2, _smid().to(tl.int64))


@triton.jit
def _timed_fanout_kernel(ssm_ptr, qsl_ptr, si_ptr, na_ptr, times_ptr, s_block, s_head, s_v, s_si, HV,
                         K: tl.constexpr, BV: tl.constexpr):  # fmt: skip
    start = _now()
    _fanout_body(ssm_ptr, qsl_ptr, si_ptr, na_ptr, s_block, s_head, s_v, s_si, tl.program_id(0), tl.program_id(1),
                 HV, K, BV, 0, False)  # fmt: skip
    _record(times_ptr, tl.program_id(1) * tl.num_programs(0) + tl.program_id(0), start)


@triton.jit
def _timed_empty_front_kernel(times_ptr):
    start = _now()
    gdc_wait()
    gdc_launch_dependents()
    program = (tl.program_id(0) * tl.num_programs(1) + tl.program_id(1)) * tl.num_programs(2) + tl.program_id(2)
    _record(times_ptr, program, start)
"""
open(f".exp/variants2/k_{name}.py", "w").write(src)
