"""The prefill's fused launches past Triton's dispatch (caovan.kernels.gdn_prefill.direct), with stand-in kernels:
which calls take the direct path, and that it passes what Triton's launcher would get, in signature order."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch", reason="the launches take torch tensors")

from caovan.kernels.gdn_prefill import direct  # noqa: E402
from caovan.kernels.gdn_prefill.launch_configs import KernelLaunch  # noqa: E402

OPTS = KernelLaunch(num_warps=4, num_stages=2)


class _Compiled:
    """What ``kernel[grid](...)`` returns: its ``run`` is the launcher ``direct_launch`` falls back to."""

    def __init__(self, name, log):
        self.function, self.packed_metadata = f"{name}-function", f"{name}-metadata"
        self.run = lambda *args: log.append(("direct", name, args))


class _Kernel:
    def __init__(self, name, arg_names, log):
        self.__name__, self.arg_names, self.log = name, arg_names, log

    def __getitem__(self, grid):
        def launch(*args, **kwargs):
            self.log.append(("triton", self.__name__, grid, args, kwargs))
            return _Compiled(self.__name__, self.log)

        return launch


@pytest.fixture
def rig(monkeypatch):
    log = []
    monkeypatch.setattr(direct, "current_stream", lambda index: 77)
    monkeypatch.setattr(direct, "_launches", {})
    kernels = (_Kernel("wy", ["a_ptr", "n", "C"], log), _Kernel("state", ["a_ptr", "b_ptr", "s", "D", "E"], log))
    return kernels, log


def test_the_second_call_of_a_key_launches_directly_with_triton_s_arguments(rig):
    kernels, log = rig
    a, b = torch.zeros(64, dtype=torch.float16), torch.zeros(64)
    calls = (((a, 3), 1, {"C": 8}, OPTS), ((a, b, 0.5), 2, {"E": True, "D": 16}, OPTS))
    direct.launch_fused(kernels, ((5, 2), (4, 2, 3)), calls, 0, False)
    assert [entry[0] for entry in log] == ["triton", "triton"]
    assert log[0][2:] == ((5, 2), (a, 3), {"C": 8, "num_warps": 4, "num_stages": 2})
    log.clear()
    direct.launch_fused(kernels, ((9, 2), (4, 2, 1)), calls, 0, False)  # more tokens: other grids, same key
    assert log == [
        ("direct", "wy", (9, 2, 1, 77, "wy-function", "wy-metadata", None, None, None, a.data_ptr(), 3, 8)),
        ("direct", "state", (4, 2, 1, 77, "state-function", "state-metadata", None, None, None,
                             a.data_ptr(), b.data_ptr(), 0.5, 16, True)),
    ]  # fmt: skip


@pytest.mark.parametrize(
    "change",
    [
        lambda a, b: ((a, 4), (a, b, 0.5)),  # another number of sequences
        lambda a, b: ((a, 3), (a, b, 0.25)),  # another scale
        lambda a, b: ((a.to(torch.bfloat16), 3), (a.to(torch.bfloat16), b, 0.5)),  # another dtype
    ],
)
def test_anything_but_the_grid_that_differs_goes_through_triton(rig, change):
    kernels, log = rig
    a, b = torch.zeros(64, dtype=torch.float16), torch.zeros(64)
    wy, state = ((a, 3), 1, {"C": 8}, OPTS), ((a, b, 0.5), 2, {"E": True, "D": 16}, OPTS)
    direct.launch_fused(kernels, ((5, 2), (4, 2, 3)), (wy, state), 0, False)
    log.clear()
    wy_args, state_args = change(a, b)
    direct.launch_fused(kernels, ((5, 2), (4, 2, 3)), ((wy_args, *wy[1:]), (state_args, *state[1:])), 0, False)
    assert [entry[0] for entry in log] == ["triton", "triton"]


def test_a_misaligned_pointer_or_the_interpreter_never_takes_the_direct_path(rig):
    kernels, log = rig
    a, b = torch.zeros(64, dtype=torch.float16), torch.zeros(64)
    calls = (((a, 3), 1, {"C": 8}, OPTS), ((a, b, 0.5), 2, {"E": True, "D": 16}, OPTS))
    direct.launch_fused(kernels, ((5, 2), (4, 2, 3)), calls, 0, False)
    shifted = a[1:]  # 2 bytes past an aligned start
    moved = (((shifted, 3), 1, {"C": 8}, OPTS), ((shifted, b, 0.5), 2, {"E": True, "D": 16}, OPTS))
    log.clear()
    direct.launch_fused(kernels, ((5, 2), (4, 2, 3)), moved, 0, False)
    assert [entry[0] for entry in log] == ["triton", "triton"]
    direct._launches.clear()
    for _ in range(2):
        direct.launch_fused(kernels, ((5, 2), (4, 2, 3)), calls, 0, True)
    assert [entry[0] for entry in log] == ["triton"] * 6 and direct._launches == {}
