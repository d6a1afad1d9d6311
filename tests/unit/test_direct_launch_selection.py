"""How the cached direct launch calls a compiled kernel: Triton's C launch function or its launcher object.

The GPU tier (tests/kernels_gpu/test_direct_launch.py) checks the direct path bit for bit against Triton's own
dispatch; these tests check the choice itself on fakes, and that the installed Triton still calls its C
launch function with the argument layout the shortcut assumes.
"""

from __future__ import annotations

import inspect
import re

import pytest

from caovan.kernels.gdn_spec_decode import launcher, plans, scratch, triton_kernels


class _Launcher:
    """Stands in for triton.backends.nvidia.driver.CudaLauncher (attributes only)."""

    def __init__(self, **overrides):
        self.launch = lambda *args: ("c-launch", args)
        self.global_scratch_size = 0
        self.profile_scratch_size = 0
        self.num_ctas = 1
        self.launch_cooperative_grid = False
        self.launch_pdl = True
        self.__dict__.update(overrides)

    def __call__(self, *args):
        return ("launcher-object", args)


class _Compiled:
    def __init__(self, run):
        self.run = run
        self.function = 1234
        self.packed_metadata = (4, 1, 0)


def _launch(fake, monkeypatch, version="3.6.0"):
    monkeypatch.setattr(launcher.triton, "__version__", version)
    launch, grid, head = launcher.direct_launch(_Compiled(fake), [8, 24, 1])
    return launch(*grid, "stream", *head, "arg0", "arg1")


def test_c_launch_with_triton_launcher_layout(monkeypatch):
    via, args = _launch(_Launcher(), monkeypatch)
    assert via == "c-launch"
    # gridX, gridY, gridZ, stream, function, cooperative, pdl, global/profile scratch, metadata, launch
    # metadata, enter/exit hooks, kernel arguments
    assert args == (8, 24, 1, "stream", 1234, False, True, None, None, (4, 1, 0), None, None, None, "arg0", "arg1")


@pytest.mark.parametrize(
    "overrides",
    [
        {"global_scratch_size": 256},
        {"profile_scratch_size": 64},
        {"num_ctas": 2},
        {"launch_pdl": None},
        {"launch": None},
    ],
    ids=["global-scratch", "profile-scratch", "clusters", "no-pdl-flag", "no-c-launch"],
)
def test_launcher_object_when_the_shortcut_would_skip_work(overrides, monkeypatch):
    via, args = _launch(_Launcher(**overrides), monkeypatch)
    assert via == "launcher-object"
    assert args == (8, 24, 1, "stream", 1234, (4, 1, 0), None, None, None, "arg0", "arg1")


def test_launcher_object_on_a_triton_whose_launcher_was_not_read(monkeypatch):
    via, _ = _launch(_Launcher(), monkeypatch, version="3.7.0")
    assert via == "launcher-object"


def test_installed_triton_launcher_matches_the_layout_read():
    """Fails when a Triton release in LAUNCHER_LAYOUT_READ calls its C launch function differently."""
    import triton

    if not triton.__version__.startswith(launcher.LAUNCHER_LAYOUT_READ):
        pytest.skip(
            f"Triton {triton.__version__} is not in LAUNCHER_LAYOUT_READ {launcher.LAUNCHER_LAYOUT_READ}: the direct "
            "path uses its launcher object; read its CudaLauncher.__call__ before adding it"
        )
    from triton.backends.nvidia.driver import CudaLauncher

    body = re.sub(r"\s+", " ", inspect.getsource(CudaLauncher.__call__))
    assert (
        "self.launch(gridX, gridY, gridZ, stream, function, self.launch_cooperative_grid, self.launch_pdl, "
        "global_scratch, profile_scratch, *args)" in body
    )
    assert "def __call__(self, gridX, gridY, gridZ, stream, function, *args):" in body


def test_pointers_are_passed_as_ints_when_all_aligned():
    torch = pytest.importorskip("torch")
    base = torch.empty(64, dtype=torch.float16)
    assert launcher.aligned_pointers((base, None, base[8:])) == (base.data_ptr(), None, base.data_ptr() + 16)
    assert launcher.aligned_pointers((base, None, base[1:])) is None


def test_qk_kernel_tensor_positions_follow_both_signatures():
    """QK_TENSORS picks the Q/K kernel's pointer arguments out of the V/GDN kernel's, by name."""
    qk = [p.name for p in triton_kernels._caovan_sm75_prepare_qk_conv_spec_decode_kernel.params]
    v = [p.name for p in triton_kernels._caovan_sm75_fused_v_gdn_spec_decode_kernel.params]
    picked = [v[i] for i in launcher.QK_TENSORS]
    assert picked == qk[: len(launcher.QK_TENSORS)]


def test_interpreted_calls_take_a_fresh_scratch():
    torch = pytest.importorskip("torch")
    plan = plans.LaunchPlan(
        N=1, num_spec_tokens=2, scratch_shape=(2, 2, 1, 4), qk_grid=(1, 1, 2), v_grid=(1, 1, 1), v_block=4,
        qk_tail=(), v_tail=(), qk_warps=1, qk_stages=1, v_warps=1, v_stages=1, v_maxnreg=None, row_lanes=32,
        row_butterfly=False, pdl=False, stagger=False, write_through_last=False,
    )  # fmt: skip
    a = scratch.qk_scratch(plan, torch.device("cpu"), None)
    b = scratch.qk_scratch(plan, torch.device("cpu"), None)
    assert a.shape == (2, 2, 1, 4) and a.dtype == torch.float32
    assert a.data_ptr() != b.data_ptr() and plan.scratch_by_stream == {}
