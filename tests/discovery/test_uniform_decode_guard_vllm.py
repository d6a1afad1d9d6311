"""The uniform-decode guard (plugin/uniform_decode_guard.py) against the real vLLM of the row (tier `discovery`):
what it wraps and what it reads exist, and vLLM still needs it."""

from __future__ import annotations

import inspect
from types import SimpleNamespace

import pytest

from caovan.adapters.registry import installed_family, installed_full_graph_safety
from caovan.plugin import uniform_decode_guard as guard

pytestmark = [pytest.mark.discovery, pytest.mark.usefixtures("served_release")]


RUNNER_GONE = (
    f"{guard.RUNNER_MODULE}.{guard.RUNNER_CLASS}.{guard.METHOD}(force_uniform_decode) is gone: the guard stays "
    "inert (test_where_the_runner_is_gone_the_guard_stays_inert_and_says_why checks how)"
)


@pytest.fixture
def runner():
    cls = guard.runner_class()
    if cls is None:
        pytest.skip(RUNNER_GONE)
    yield cls
    guard.uninstall()


def test_where_the_runner_is_gone_the_guard_stays_inert_and_says_why():
    """vLLM 0.34 runs the model with vllm/v1/worker/gpu/model_runner.py only: nothing to wrap, so FULL graphs are
    not judged safe, the start-up line and doctor say why, and serve advises PIECEWISE."""
    if guard.runner_class() is not None:
        pytest.skip(f"this vLLM has {guard.RUNNER_MODULE}: the tests below check the guard on it")
    safety = installed_full_graph_safety()
    assert (safety.with_caovan, safety.without_caovan) == (False, False), safety
    assert "force_uniform_decode" in safety.reason and "PIECEWISE" in safety.verdict(caovan_on=True)
    config = SimpleNamespace(parallel_config=SimpleNamespace(pipeline_parallel_size=1))
    assert guard.install(config, installed_family()) is False
    from caovan.cli import doctor

    line = doctor.full_graph_facts(True)["line"]
    assert line.startswith("with MTP: NOT safe with caovan on") and guard.RUNNER_MODULE in line, line


def test_vllm_still_tells_uniform_decode_by_shape_alone(runner):
    # Fails once vLLM asks whether each request is decoding (vLLM issue 49918): then the guard can go.
    by_shape = guard.tells_uniform_decode_by_shape(runner)
    assert by_shape is not None, f"the shape test ({guard.SHAPE_TEST!r}) moved: read vLLM's new classification"
    assert by_shape, f"vLLM's classification now reads one of {guard.PHASE_WORDS}: check whether the guard can go"


def test_full_graphs_are_safe_with_caovan_on_and_not_without(runner):
    safety = installed_full_graph_safety()
    assert (safety.with_caovan, safety.without_caovan) == (True, False), safety
    assert "PIECEWISE" in safety.verdict(caovan_on=False) and "PIECEWISE" not in safety.verdict(caovan_on=True)


def test_the_guard_wraps_the_real_runner_and_reads_what_its_input_batch_has(runner):
    from vllm.v1.worker.gpu_input_batch import InputBatch

    original = runner.__dict__[guard.METHOD]
    config = SimpleNamespace(parallel_config=SimpleNamespace(pipeline_parallel_size=1))
    assert guard.install(config, installed_family()) is True
    assert runner.__dict__[guard.METHOD]._caovan_wrapped is original
    # The decision reads these per-request arrays of the runner's input batch, as vLLM's __init__ creates them.
    assigned = InputBatch.__init__.__code__.co_names
    for field in guard.BATCH_FIELDS:
        assert field in assigned, f"InputBatch no longer has {field}"
    # execute_model hands num_reqs over by keyword or second, where the wrapper looks for it.
    parameters = list(inspect.signature(original).parameters)
    assert parameters[1:3] == ["num_tokens", "num_reqs"], parameters
    assert guard.uninstall() is True and runner.__dict__[guard.METHOD] is original
