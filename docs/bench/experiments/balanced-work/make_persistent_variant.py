"""Writes .exp/variants2/k_persist{8,9,12,16}.py: the V/GDN kernel as persistent programs taking items at run time.

Experiment (repository root). The kernel on main runs one program per (value block, sequence, value head), all in
one wave, so an SM that falls behind (``../issue-profile/``: the slowest SM is 10-12 % over the mean) sets the
end of the call. Here ``PROGRAMS_PER_SM`` x SMs programs each take the next item from a counter (relaxed atomic
add) until none is left, so faster SMs take more items; the last program to finish resets the counters (the
call stays CUDA-graph safe). Each item runs the body of the kernel on main unchanged (a @triton.jit helper);
the staggered start is dropped (the items start whenever a program is free). The module exposes the kernel
under main's name as a launcher object, for ``../cold-l2/variants_cold.py``, which must run with the direct
launch path off (the object launches a different grid with two more arguments).
"""

import re

src = open("src/caovan/kernels/gdn_spec_decode/triton_kernels.py").read()
start = src.index("@triton.jit\ndef _caovan_sm75_fused_v_gdn_spec_decode_kernel(")
kernel = src[start:]
params_text = kernel[kernel.index("(") + 1 : kernel.index("\n):\n")]
params = [p.strip().rstrip(",") for p in params_text.strip().splitlines()]
names = [p.split(":")[0].strip() for p in params]
assert names[-1] == "STAGGER" and "USE_PDL" in names

ids = "    i_vb = tl.program_id(0)\n    i_nhv = tl.program_id(1)\n"
assert kernel.count(ids) == 1
item = kernel.replace(
    "def _caovan_sm75_fused_v_gdn_spec_decode_kernel(\n", "def _v_gdn_item(\n    i_vb,\n    i_nhv,\n", 1
)
item = item.replace(ids, "")

persistent = f'''

@triton.jit
def _persistent_v_gdn_kernel(
{params_text}
    counters_ptr,
    num_items,
    NUM_V_BLOCKS: tl.constexpr,
):
    item = tl.atomic_add(counters_ptr, 1, sem="relaxed")
    while item < num_items:
        _v_gdn_item(item % NUM_V_BLOCKS, item // NUM_V_BLOCKS, {", ".join(names)})
        item = tl.atomic_add(counters_ptr, 1, sem="relaxed")
    if USE_PDL:
        gdc_wait()
    # Every program has taken its last item before it counts itself done: the last one resets both counters.
    done = tl.atomic_add(counters_ptr + 1, 1, sem="acq_rel")
    if done == tl.num_programs(0) - 1:
        tl.atomic_xchg(counters_ptr, 0, sem="relaxed")
        tl.atomic_xchg(counters_ptr + 1, 0, sem="relaxed")


NO_DIRECT_LAUNCH = True  # for variants_cold.py: this launch is not main's grid and arguments
PROGRAMS_PER_SM = {{programs_per_sm}}
_counters = {{}}


class _Persistent:
    """``kernel[grid](*args, ...)`` as for main's kernel: launches the persistent grid over grid[0] x grid[1] items."""

    def __getitem__(self, grid):
        import torch

        def launch(*args, **kw):
            device = args[0].device
            if device not in _counters:
                _counters[device] = torch.zeros(2, dtype=torch.int32, device=device)
            sms = torch.cuda.get_device_properties(device).multi_processor_count if device.type == "cuda" else 2
            items = grid[0] * grid[1]
            programs = min(items, PROGRAMS_PER_SM * sms)
            return _persistent_v_gdn_kernel[(programs,)](
                *args, _counters[device], items, NUM_V_BLOCKS=grid[0], **kw
            )

        return launch

    def warmup(self, *args, grid, **kw):
        import torch

        counters = torch.zeros(2, dtype=torch.int32, device=args[0].device)
        items = grid[0] * grid[1]
        return _persistent_v_gdn_kernel.warmup(*args, counters, items, NUM_V_BLOCKS=grid[0], grid=(1,), **kw)


_caovan_sm75_fused_v_gdn_spec_decode_kernel = _Persistent()
'''
assert not re.search(r"tl\.program_id", item)
# One module per number of programs per SM (the grid is PROGRAMS_PER_SM x SMs programs, at most one per item).
for programs_per_sm in (8, 9, 12, 16):
    text = src[:start] + item + persistent.replace("{programs_per_sm}", str(programs_per_sm))
    open(f".exp/variants2/k_persist{programs_per_sm}.py", "w").write(text)
