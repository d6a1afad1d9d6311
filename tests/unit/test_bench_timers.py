"""The timers of ``caovan bench kernels`` and ``caovan bench tune``: medians, so one hiccup does not move them."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch", reason="the bench timers synchronise through torch.cuda")

from caovan.bench import kernels  # noqa: E402
from caovan.bench.kernels import BenchSettings, median_graph_us, time_eager_us  # noqa: E402


def test_one_slow_call_lands_in_one_block_and_the_median_ignores_it(monkeypatch):
    clock = [0.0]
    calls = [0]

    def call():
        calls[0] += 1
        # 40 us per call, and one 3 ms hiccup in the middle of the run.
        clock[0] += 40e-6 + (3e-3 if calls[0] == 60 else 0.0)

    monkeypatch.setattr(kernels.time, "perf_counter", lambda: clock[0])
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a, **k: None)
    settings = BenchSettings(warmup=2, eager_iters=100, eager_blocks=5)
    assert time_eager_us([call], settings) == [pytest.approx(40.0)]
    assert calls[0] == 2 + 100
    # The old single-loop mean would have reported 70 us here.
    single = BenchSettings(warmup=2, eager_iters=100, eager_blocks=1)
    calls[0] = 0
    assert time_eager_us([call], single) == [pytest.approx(70.0)]


def test_a_slow_host_stretch_slows_both_implementations_alike(monkeypatch):
    # ours costs 40 us a call and vLLM's path 200 us; the host runs 1.75x slower while the 3rd to 6th timed
    # blocks run. Timed one after the other (ours' 5 blocks, then vLLM's), ours would get three slow blocks
    # and vLLM's one: 70 vs 200 us, a 2.9x speedup that is the host's doing. Alternating blocks, each gets
    # two slow blocks of five, and the medians keep the true 5x.
    clock = [0.0]
    syncs = [0]

    def slow():
        return 1.75 if 3 <= syncs[0] <= 6 else 1.0  # sync 1 ends the warm-up; block k ends with sync k + 2

    def ours():
        clock[0] += 40e-6 * slow()

    def vllm():
        clock[0] += 200e-6 * slow()

    def synchronize(*a, **k):
        syncs[0] += 1

    monkeypatch.setattr(kernels.time, "perf_counter", lambda: clock[0])
    monkeypatch.setattr(torch.cuda, "synchronize", synchronize)
    settings = BenchSettings(warmup=2, eager_iters=100, eager_blocks=5)
    t_ours, t_vllm = time_eager_us([ours, vllm], settings)
    assert t_ours == pytest.approx(40.0) and t_vllm == pytest.approx(200.0)
    assert syncs[0] == 1 + 10


def test_graph_time_is_the_median_of_its_repeats():
    timings = iter([5.0, 100.0, 6.0])
    seen = []

    def timer(fn, settings):
        seen.append(settings)
        return next(timings)

    settings = BenchSettings(graph_repeats=3)
    assert median_graph_us(lambda: None, settings, timer) == 6.0
    assert len(seen) == 3
    # graph_repeats 0 still times once.
    assert median_graph_us(lambda: None, BenchSettings(graph_repeats=0), lambda fn, s: 7.0) == 7.0
