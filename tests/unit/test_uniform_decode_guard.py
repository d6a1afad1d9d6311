"""The uniform-decode guard's own logic (plugin/uniform_decode_guard.py), on a stand-in runner class; the real
GPUModelRunner goes through the same install in the discovery tier."""

from __future__ import annotations

import logging
import sys
import types
from types import SimpleNamespace

import pytest

np = pytest.importorskip("numpy")

from caovan.plugin import uniform_decode_guard as guard  # noqa: E402


def _batch(computed, prompt):
    return SimpleNamespace(num_computed_tokens_cpu=np.array(computed), num_prompt_tokens=np.array(prompt))


@pytest.mark.parametrize(
    ("computed", "prompt", "num_reqs", "expected"),
    [
        ([0], [4], 1, True),  # a fresh prompt of 1 + num_speculative_tokens tokens: the bug's trigger
        ([12, 40], [9, 30], 2, False),  # every request past its prompt: a real uniform decode
        ([12, 3], [9, 30], 2, True),  # one request in its last prompt chunk
        ([12, 3], [9, 30], 1, False),  # slots past num_reqs are stale: not read
        ([8], [9], 1, True),  # a prefix-cache hit still computes the prompt's last token
    ],
)
def test_a_batch_with_a_request_in_its_prompt_is_told_apart(computed, prompt, num_reqs, expected):
    assert guard.batch_has_prompt_tokens(_batch(computed, prompt), num_reqs) is expected


def test_a_batch_without_the_arrays_leaves_the_decision_to_vllm():
    assert guard.batch_has_prompt_tokens(SimpleNamespace(), 1) is None
    assert guard.batch_has_prompt_tokens(None, 1) is None


class FakeRunner:
    def __init__(self, computed, prompt):
        self.input_batch = _batch(computed, prompt)
        self.calls = []

    def _determine_batch_execution_and_padding(self, num_tokens, num_reqs, *rest, force_uniform_decode=None, **kw):
        self.calls.append(force_uniform_decode)
        return "dispatched"

    @staticmethod
    def _is_uniform_decode(max_num_scheduled_tokens, uniform_decode_query_len):
        # vLLM's shape test (0.12 - 0.33), as the guard's premise reads it.
        return max_num_scheduled_tokens == uniform_decode_query_len


@pytest.fixture
def runner_module(monkeypatch):
    """The stand-in runner class as vLLM's module; its method restored afterwards."""
    original = FakeRunner.__dict__[guard.METHOD]
    module = types.ModuleType(guard.RUNNER_MODULE)
    module.GPUModelRunner = FakeRunner
    monkeypatch.setitem(sys.modules, guard.RUNNER_MODULE, module)
    yield module
    setattr(FakeRunner, guard.METHOD, original)


def _config(pp: int = 1):
    return SimpleNamespace(parallel_config=SimpleNamespace(pipeline_parallel_size=pp))


def test_a_prompt_batch_is_kept_out_of_uniform_decode_and_a_decode_batch_is_not(runner_module):
    assert guard.install(_config(), None) is True
    prompt, decode = FakeRunner([0], [4]), FakeRunner([20], [4])
    assert prompt._determine_batch_execution_and_padding(num_tokens=4, num_reqs=1) == "dispatched"
    decode._determine_batch_execution_and_padding(4, 1)  # num_reqs by position too
    assert prompt.calls == [False] and decode.calls == [None]


def test_a_capture_keeps_the_value_vllm_forces(runner_module):
    guard.install(_config(), None)
    runner = FakeRunner([0], [4])
    runner._determine_batch_execution_and_padding(num_tokens=4, num_reqs=1, force_uniform_decode=True)
    assert runner.calls == [True]


def test_install_is_once_and_uninstall_puts_vllms_method_back(runner_module):
    original = FakeRunner.__dict__[guard.METHOD]
    assert guard.install(_config(), None) and guard.install(_config(), None)
    wrapped = FakeRunner.__dict__[guard.METHOD]
    assert wrapped._caovan_wrapped is original
    assert guard.uninstall() is True and FakeRunner.__dict__[guard.METHOD] is original
    assert guard.uninstall() is False


def test_the_start_up_line_says_full_graphs_are_safe_with_the_guard(runner_module, caovan_records):
    guard.install(_config(), None)
    (record,) = caovan_records
    assert record.levelno == logging.INFO
    assert record.getMessage().startswith(
        "caovan_sm75_turbo3: FULL CUDA graphs with MTP are safe with caovan on: vLLM tells a uniform spec-decode "
        "batch by its shape alone"
    )
    assert "PIECEWISE" not in record.getMessage()


def test_pipeline_parallel_is_left_as_vllm_has_it_and_says_so(runner_module, caovan_records):
    original = FakeRunner.__dict__[guard.METHOD]
    assert guard.install(_config(pp=2), None) is False
    assert FakeRunner.__dict__[guard.METHOD] is original
    (record,) = caovan_records
    assert record.levelno == logging.WARNING
    assert "NOT safe" in record.getMessage() and "pipeline parallelism" in record.getMessage()
    assert "PIECEWISE" in record.getMessage()


class FixedRunner:
    """A vLLM that asks whether each request is decoding (what upstream's fix would read)."""

    def _determine_batch_execution_and_padding(self, num_tokens, num_reqs, force_uniform_decode=None):
        computed, prompt = self.input_batch.num_computed_tokens_cpu, self.input_batch.num_prompt_tokens
        return max_num_scheduled_tokens == 3 and (computed >= prompt).all()  # noqa: F821


class MovedRunner:
    """A vLLM whose classification no longer has the shape test the guard's premise reads."""

    def _determine_batch_execution_and_padding(self, num_tokens, num_reqs, force_uniform_decode=None):
        return self.classify(num_tokens)


@pytest.mark.parametrize(
    ("runner", "with_caovan", "without_caovan", "words"),
    [
        (FakeRunner, True, False, "caovan's guard keeps such batches out"),
        (FixedRunner, True, True, "vLLM asks whether each request is decoding"),
        (MovedRunner, False, False, "uniform-decode test moved"),
    ],
)
def test_full_graph_safety_follows_what_the_runner_reads(monkeypatch, runner, with_caovan, without_caovan, words):
    module = types.ModuleType(guard.RUNNER_MODULE)
    module.GPUModelRunner = runner
    monkeypatch.setitem(sys.modules, guard.RUNNER_MODULE, module)
    safety = guard.full_graph_safety(None)
    assert (safety.with_caovan, safety.without_caovan) == (with_caovan, without_caovan)
    assert words in safety.reason
    assert ("PIECEWISE" in safety.verdict(caovan_on=False)) is not without_caovan
    # The guard goes in exactly where vLLM needs it and caovan can fix it.
    needed = with_caovan and not without_caovan
    assert guard.install(_config(), None) is needed
    assert hasattr(runner.__dict__[guard.METHOD], "_caovan_wrapped") is needed
    assert guard.uninstall() is needed


def test_a_runner_without_the_forcing_parameter_is_not_wrapped(monkeypatch):
    class OldRunner:
        def _determine_batch_execution_and_padding(self, num_tokens, num_reqs):
            return None

    module = types.ModuleType(guard.RUNNER_MODULE)
    module.GPUModelRunner = OldRunner
    monkeypatch.setitem(sys.modules, guard.RUNNER_MODULE, module)
    assert guard.install(_config(), None) is False
    assert not hasattr(OldRunner.__dict__[guard.METHOD], "_caovan_wrapped")
    safety = guard.full_graph_safety(None)
    assert not safety.with_caovan and not safety.without_caovan
    assert "force_uniform_decode" in safety.reason


def test_a_vllm_whose_runner_moved_leaves_the_guard_inert_and_advises_piecewise(monkeypatch, caplog):
    # vLLM 0.34: vllm/v1/worker/gpu_model_runner.py is gone, vllm/v1/worker/gpu/model_runner.py runs the model.
    there = {guard.NEW_RUNNER_MODULE}
    monkeypatch.setattr(guard, "_module_exists", lambda name: name in there)
    monkeypatch.setattr(guard, "runner_class", lambda: None)  # nothing of the old runner imports
    with caplog.at_level(logging.WARNING):
        assert guard.install(_config(), None) is False
    safety = guard.full_graph_safety(None)
    assert (safety.with_caovan, safety.without_caovan) == (False, False)
    assert f"{guard.RUNNER_MODULE} is gone; {guard.NEW_RUNNER_MODULE} runs the model" in safety.reason
    assert "PIECEWISE" in safety.verdict(caovan_on=True)
    # The start-up line says it, once, as a warning.
    (line,) = [r.getMessage() for r in caplog.records if "FULL CUDA graphs" in r.getMessage()]
    assert "NOT safe with caovan on" in line and guard.NEW_RUNNER_MODULE in line


def test_uninstall_imports_nothing(monkeypatch):
    monkeypatch.delitem(sys.modules, guard.RUNNER_MODULE, raising=False)
    assert guard.uninstall() is False
    assert guard.RUNNER_MODULE not in sys.modules
