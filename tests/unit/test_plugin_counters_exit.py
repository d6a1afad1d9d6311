"""What the counters' exit hook does with CAOVAN_LOG_COUNTERS and CAOVAN_COUNTERS_FILE: never a traceback."""

import json
import logging

import pytest

from caovan.plugin import counters


@pytest.fixture
def exit_env(monkeypatch):
    monkeypatch.delenv("CAOVAN_LOG_COUNTERS", raising=False)
    monkeypatch.delenv("CAOVAN_COUNTERS_FILE", raising=False)
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
    assert set(json.loads(written.read_text())) == {"pid", "activation_logged", "dispatched", "fallbacks"}
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
