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
    assert time_eager_us(call, settings) == pytest.approx(40.0)
    assert calls[0] == 2 + 100
    # The old single-loop mean would have reported 70 us here.
    single = BenchSettings(warmup=2, eager_iters=100, eager_blocks=1)
    calls[0] = 0
    assert time_eager_us(call, single) == pytest.approx(70.0)


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
