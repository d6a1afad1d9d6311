"""What the counters' exit hook does with CAOVAN_LOG_COUNTERS and CAOVAN_COUNTERS_FILE: never a traceback."""

import json
import logging
import multiprocessing

import pytest

from caovan.plugin import counters


@pytest.fixture
def exit_env(monkeypatch):
    monkeypatch.delenv("CAOVAN_LOG_COUNTERS", raising=False)
    monkeypatch.delenv("CAOVAN_COUNTERS_FILE", raising=False)
    monkeypatch.setattr(counters, "_written_pid", None)  # each test is a fresh exit of this process
    return monkeypatch


@pytest.mark.parametrize("value", ["false", "0", "no", "off", ""])
def test_log_counters_false_spellings_log_nothing(exit_env, caovan_records, value):
    exit_env.setenv("CAOVAN_LOG_COUNTERS", value)
    counters._at_exit()
    assert caovan_records == []


@pytest.mark.parametrize("value", ["1", "true", "YES", "on"])
def test_log_counters_true_spellings_log_the_counters(exit_env, caovan_records, value):
    exit_env.setenv("CAOVAN_LOG_COUNTERS", value)
    counters._at_exit()
    assert [r.levelno for r in caovan_records] == [logging.INFO]
    assert caovan_records[0].getMessage().startswith("caovan dispatch counters: {")


def test_log_counters_bad_value_is_one_warning(exit_env, caovan_records):
    exit_env.setenv("CAOVAN_LOG_COUNTERS", "maybe")
    counters._at_exit()
    assert [r.levelno for r in caovan_records] == [logging.WARNING]
    assert "CAOVAN_LOG_COUNTERS='maybe' is not understood" in caovan_records[0].getMessage()


def test_counters_file_in_a_missing_folder_is_one_warning(exit_env, caovan_records, tmp_path):
    target = tmp_path / "missing" / "counters-{pid}.json"
    exit_env.setenv("CAOVAN_COUNTERS_FILE", str(target))
    counters._at_exit()  # must not raise
    assert [r.levelno for r in caovan_records] == [logging.WARNING]
    message = caovan_records[0].getMessage()
    assert message.startswith(f"caovan dispatch counters not written: CAOVAN_COUNTERS_FILE={target}: ")
    assert "FileNotFoundError" in message


def test_counters_file_is_written(exit_env, caovan_records, tmp_path):
    exit_env.setenv("CAOVAN_COUNTERS_FILE", str(tmp_path / "counters-{pid}.json"))
    counters._at_exit()
    (written,) = tmp_path.glob("counters-*.json")
    assert set(json.loads(written.read_text())) == {
        "pid",
        "activation_logged",
        "prefill_logged",
        "dispatched",
        "fallbacks",
    }
    assert caovan_records == []


@pytest.mark.parametrize("value", [".", "/"])
def test_counters_file_naming_no_file_is_one_warning(exit_env, caovan_records, value):
    # A path with an empty name made Path.with_name raise ValueError: a traceback at exit instead of one line.
    exit_env.setenv("CAOVAN_COUNTERS_FILE", value)
    counters._at_exit()  # must not raise
    assert [r.levelno for r in caovan_records] == [logging.WARNING]
    assert (
        caovan_records[0]
        .getMessage()
        .startswith(f"caovan dispatch counters not written: CAOVAN_COUNTERS_FILE={value}: ")
    )


def test_the_hook_writes_once_per_process(exit_env, caovan_records, tmp_path):
    exit_env.setenv("CAOVAN_LOG_COUNTERS", "1")
    counters._at_exit()
    counters._at_exit()  # atexit after the multiprocessing finalizer: nothing more
    assert len(caovan_records) == 1


def _forked_worker(target: str) -> None:
    """What a vLLM worker does: take a layer over (hook installed), dispatch, return (os._exit follows)."""
    counters.reset()
    counters.install_exit_hook()
    counters.record_dispatch("spec", "test-family", ("k",), "layers.0")


def test_a_forked_worker_writes_its_counters(exit_env, tmp_path):
    # vLLM forks its engine core and TP workers; a forked multiprocessing child skips atexit.
    exit_env.setenv("CAOVAN_COUNTERS_FILE", str(tmp_path / "counters-{pid}.json"))
    counters.install_exit_hook()  # the parent's hook, inherited by the fork, must not stand in for the child's
    child = multiprocessing.get_context("fork").Process(target=_forked_worker, args=(str(tmp_path),))
    child.start()
    child.join(60)
    assert child.exitcode == 0
    written = json.loads((tmp_path / f"counters-{child.pid}.json").read_text())
    assert written["pid"] == child.pid and written["dispatched"] == {"spec": 1}
