"""The sm75 tier's kernel verdicts on planted Triton kernels: recorded on CPU, compiled for sm_75 with this Triton.

Each planted kernel is launched from plain Python under the launch recorder (nothing runs), then judged config by
config as the tier judges vLLM's kernels. Compiles are real (Triton and ptxas for sm_75, no GPU) and cached in a
temporary folder, so every test compiles what it judges.
"""

from __future__ import annotations

import pytest

triton = pytest.importorskip("triton", reason="triton is not installed: nothing to compile")
torch = pytest.importorskip("torch", reason="torch is not installed: no tensors to launch with")

import triton.language as tl  # noqa: E402

from caovan.sm75.device_view import DeviceFacts  # noqa: E402
from caovan.sm75.kernel_compile import CACHE_DIR_ENV, compile_launch  # noqa: E402
from caovan.sm75.kernel_verdicts import KernelCall, judge_call  # noqa: E402
from caovan.sm75.launch_recorder import recording  # noqa: E402


@triton.jit
def _planted_dot_kernel(a_ptr, b_ptr, c_ptr, BLOCK_M: tl.constexpr, BLOCK_K: tl.constexpr, TO_BF16: tl.constexpr):
    # One tile product: the operand tiles go through shared memory, (BLOCK_M x BLOCK_K) twice, in 16-bit types.
    tl.static_assert(BLOCK_K != 48, "planted compile error: BLOCK_K=48 is refused")
    rm = tl.arange(0, BLOCK_M)
    rk = tl.arange(0, BLOCK_K)
    a = tl.load(a_ptr + rm[:, None] * BLOCK_K + rk[None, :])
    b = tl.load(b_ptr + rk[:, None] * BLOCK_M + rm[None, :])
    if TO_BF16:
        a = a.to(tl.bfloat16)
        b = b.to(tl.bfloat16)
    c = tl.dot(a, b)
    tl.store(c_ptr + rm[:, None] * BLOCK_M + rm[None, :], c)


def _autotuned(configs):
    return triton.autotune(configs=configs, key=[])(_planted_dot_kernel)


def _config(block_m: int, block_k: int, num_warps: int = 4) -> triton.Config:
    return triton.Config({"BLOCK_M": block_m, "BLOCK_K": block_k, "TO_BF16": False}, num_warps=num_warps, num_stages=1)


#: 32 x 1024 fp16 operand tiles: 131072 B of shared memory (32 warps keep its compile to seconds); 64 x 32: 8192 B.
TOO_BIG = (32, 1024, 32)
FITS = (64, 32)


def _record(kernel, **constexprs) -> KernelCall:
    """One call of ``kernel`` on fp16 CPU tensors, recorded; returned as the verdict code's call."""
    a = torch.zeros(1 << 16, dtype=torch.float16)
    b = torch.zeros(1 << 16, dtype=torch.float16)
    c = torch.zeros(1 << 16, dtype=torch.float32)
    with recording() as record:
        record.step = "planted"
        kernel[(1,)](a, b, c, **constexprs)
    assert record.launches, "the recorder saw no launch"
    first = record.launches[0]
    configs = first.autotuned.launches if first.autotuned else [first]
    return KernelCall(configs, len(configs), {"planted"})


@pytest.fixture(autouse=True)
def _fresh_compile_cache(tmp_path, monkeypatch):
    monkeypatch.setenv(CACHE_DIR_ENV, str(tmp_path / "compile-cache"))


def test_a_kernel_whose_only_config_needs_more_than_64_kib_cannot_run():
    call = _record(_autotuned([_config(*TOO_BIG)]))
    verdict = judge_call(call, deep=False)
    assert verdict["verdict"] == "cannot", verdict
    assert "more shared memory than 65536 B" in verdict["reason"], verdict["reason"]
    print(verdict["reason"])


def test_a_fitting_config_among_failing_ones_runs_and_is_named():
    # vLLM's order: too big, then one the compiler refuses, then one that fits: the third is the verdict's.
    configs = [_config(*TOO_BIG), _config(64, 48), _config(*FITS)]
    verdict = judge_call(_record(_autotuned(configs)), deep=False)
    assert verdict["verdict"] == "runs", verdict
    assert verdict["config_index"] == 2 and verdict["config"]["BLOCK_M"] == 64 and verdict["config"]["BLOCK_K"] == 32
    assert verdict["shared_bytes"] <= 65536 and verdict["configs_compiled"] == 3
    assert verdict["registers"] is not None, "ptxas gave no register count"


def test_deep_mode_compiles_every_config_and_keeps_the_table():
    configs = [_config(*FITS), _config(*TOO_BIG)]
    verdict = judge_call(_record(_autotuned(configs)), deep=True)
    assert verdict["verdict"] == "runs" and verdict["config_index"] == 0
    assert [row["fits"] for row in verdict["table"]] == [True, False]
    assert "shared memory" in verdict["table"][1]["why_not"]


def test_a_bf16_dot_in_an_fp16_build_is_caught():
    # Triton emits bf16 instructions for this dot where the target has them (sm_80): the rule must catch them in a
    # build whose inputs are all fp16. (For sm_75 a Triton either refuses it or lowers it without bf16: below.)
    call = _record(_planted_dot_kernel, BLOCK_M=64, BLOCK_K=32, TO_BF16=True, num_warps=4)
    verdict = judge_call(call, deep=False, facts=DeviceFacts(name="planted sm_80", capability=(8, 0)))
    assert verdict["verdict"] == "cannot", verdict
    assert "put bf16 instructions into an fp16 build" in verdict["reason"], verdict["reason"]


def test_a_bf16_dot_for_sm75_is_refused_or_lowered_without_bf16():
    call = _record(_planted_dot_kernel, BLOCK_M=64, BLOCK_K=32, TO_BF16=True, num_warps=4)
    outcome = compile_launch(call.configs[0])
    verdict = judge_call(call, deep=False)
    print(f"bf16 dot for sm_75 with Triton {triton.__version__}: {verdict['verdict']} ({verdict['reason']})")
    if outcome.compiled:
        assert verdict["verdict"] == ("cannot" if outcome.bf16_in_ptx else "runs"), verdict
    else:
        assert verdict["verdict"] == "cannot" and "does not compile" in verdict["reason"], verdict


def test_a_kernel_that_compiles_for_no_target_is_unchecked_not_cannot():
    verdict = judge_call(_record(_planted_dot_kernel, BLOCK_M=64, BLOCK_K=48, TO_BF16=False), deep=False)
    assert verdict["verdict"] == "unchecked", verdict
    assert "sm_80 either" in verdict["reason"] and "BLOCK_K=48" in verdict["reason"]


def test_outcomes_are_cached_by_kernel_source_specialisation_and_target():
    call = _record(_planted_dot_kernel, BLOCK_M=64, BLOCK_K=32, TO_BF16=False, num_warps=4)
    first = compile_launch(call.configs[0])
    again = compile_launch(call.configs[0])
    assert not first.cached and again.cached
    assert (again.shared_bytes, again.registers) == (first.shared_bytes, first.registers)
    other = _record(_planted_dot_kernel, BLOCK_M=32, BLOCK_K=32, TO_BF16=False, num_warps=4)
    assert not compile_launch(other.configs[0]).cached  # another constexpr is another entry


def test_the_device_view_answers_as_a_2080_ti_and_puts_everything_back():
    from triton.runtime import driver
    from vllm.platforms import current_platform

    from caovan.sm75.device_view import sm75_device_view

    state, count, capability = dict(vars(driver)), torch.cuda.device_count, torch.cuda.get_device_capability
    with sm75_device_view():
        # What vLLM's FLA utils read to size its autotune lists at import (check_shared_mem, is_nvidia_hopper).
        assert driver.active.utils.get_device_properties(0)["max_shared_mem"] == 65536
        assert driver.active.get_current_target().arch == 75
        assert torch.cuda.get_device_capability() == (7, 5) and torch.cuda.device_count() == 1
        assert "2080 Ti" in torch.cuda.get_device_name(0)
        # vLLM 0.34's FLA utils ask vLLM's platform instead (the CPU platform here raises NotImplementedError).
        assert "2080 Ti" in current_platform.get_device_name(0)
        assert tuple(current_platform.get_device_capability(0)) == (7, 5)
    assert vars(driver) == state
    assert (torch.cuda.device_count, torch.cuda.get_device_capability) == (count, capability)
    assert {"get_device_name", "get_device_capability"}.isdisjoint(vars(current_platform))
