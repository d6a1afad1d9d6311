"""The uniform-decode guard (plugin/uniform_decode_guard.py) against the real vLLM of the row (tier `discovery`):
what it wraps and what it reads exist, and vLLM still needs it."""

from __future__ import annotations

import inspect
from types import SimpleNamespace

import pytest

from caovan.plugin import uniform_decode_guard as guard

pytestmark = [pytest.mark.discovery, pytest.mark.usefixtures("served_release")]


@pytest.fixture
def runner():
    cls = guard.runner_class()
    assert cls is not None, f"{guard.RUNNER_MODULE}.{guard.RUNNER_CLASS}.{guard.METHOD}(force_uniform_decode) is gone"
    yield cls
    guard.uninstall()


def test_vllm_still_tells_uniform_decode_by_shape_alone(runner):
    # Fails once vLLM asks whether each request is decoding (vLLM issue 49918): then the guard can go.
    methods = [getattr(runner, guard.METHOD), getattr(runner, "_is_uniform_decode", None)]
    source = "".join(inspect.getsource(m) for m in methods if m is not None)
    assert "max_num_scheduled_tokens == " in source, "the shape test moved: read vLLM's new classification"
    for word in ("num_computed_tokens", "num_prompt_tokens", "is_prefill"):
        assert word not in source, f"vLLM's classification now reads {word}: check whether the guard can go"


def test_the_guard_wraps_the_real_runner_and_reads_what_its_input_batch_has(runner):
    from vllm.v1.worker.gpu_input_batch import InputBatch

    original = runner.__dict__[guard.METHOD]
    assert guard.install(SimpleNamespace(parallel_config=SimpleNamespace(pipeline_parallel_size=1))) is True
    assert runner.__dict__[guard.METHOD]._caovan_wrapped is original
    # The decision reads these per-request arrays of the runner's input batch, as vLLM's __init__ creates them.
    assigned = InputBatch.__init__.__code__.co_names
    for field in guard.BATCH_FIELDS:
        assert field in assigned, f"InputBatch no longer has {field}"
    # execute_model hands num_reqs over by keyword or second, where the wrapper looks for it.
    parameters = list(inspect.signature(original).parameters)
    assert parameters[1:3] == ["num_tokens", "num_reqs"], parameters
    assert guard.uninstall() is True and runner.__dict__[guard.METHOD] is original
