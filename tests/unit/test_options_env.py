"""CAOVAN_* environment variables caovan does not read, and caovan keys in the wrong letter case, are never
ignored silently."""

import re
from pathlib import Path

import pytest

from caovan.plugin.options import (
    KNOWN_ENV,
    RETIRED_ENV,
    CaovanConfigError,
    EnvFinding,
    check_environment,
    parse_options,
    unknown_env,
)

ROOT = Path(__file__).resolve().parents[2]


def test_unknown_env_names_each_unknown_variable():
    env = {
        "CAOVAN_GDN_LEGACY_DISABLE": "1",
        "CAOVAN_REQUIRE": "1",
        "caovan_require_turbo3": "1",
        "CAOVAN_QK_PDL": "0",
        "CAOVAN_CACHE_DIR": "/c",
        "CAOVAN_REQUIRE_TURBO3": "0",
        "VLLM_PLUGINS": "caovan_sm75_turbo3",
    }
    assert unknown_env(env) == [
        "CAOVAN_GDN_LEGACY_DISABLE (it has no effect, caovan has no legacy bridge)",
        "CAOVAN_QK_PDL (not read by caovan)",
        "CAOVAN_REQUIRE (not read by caovan; did you mean CAOVAN_REQUIRE_TURBO3?)",
        "caovan_require_turbo3 (not read by caovan; did you mean CAOVAN_REQUIRE_TURBO3?)",
    ]
    assert unknown_env({"CAOVAN_COUNTERS_FILE": "x", "CAOVAN_SERVE_JOBS": "2", "HOME": "/"}) == []


def test_every_caovan_variable_the_project_reads_is_known():
    # Every CAOVAN_ name in the code, the tools and the tests, except the examples of unknown ones in these tests.
    names: set[str] = set()
    for path in [ROOT / "noxfile.py", *(ROOT / "src").rglob("*.py"), *(ROOT / "tools").rglob("*")]:
        if path.is_file():
            names |= set(re.findall(r"CAOVAN_[A-Z0-9_]*[A-Z0-9]", path.read_text(errors="replace")))
    for path in (ROOT / "tests").rglob("*.py"):
        if path.name not in {"test_options_env.py", "test_plugin_register.py"}:
            names |= set(re.findall(r"CAOVAN_[A-Z0-9_]*[A-Z0-9]", path.read_text(errors="replace")))
    assert names - set(RETIRED_ENV) <= set(KNOWN_ENV), sorted(names - set(RETIRED_ENV) - set(KNOWN_ENV))


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({"CAOVAN": True}, "unknown key 'CAOVAN' (did you mean 'caovan'?)"),
        ({"Caovan_mode": "on"}, "unknown key 'Caovan_mode' (did you mean 'caovan_mode'?)"),
        ({"CAOVAN_REQUIRE": True}, "unknown key 'CAOVAN_REQUIRE'; caovan accepts"),
    ],
)
def test_caovan_keys_in_another_letter_case_are_unknown_keys(config, message):
    with pytest.raises(CaovanConfigError, match=re.escape(message)):
        parse_options(config, {})


def test_check_environment_fails_what_start_up_refuses_and_warns_the_rest():
    env = {"CAOVAN_REQUIRE_TURBO3": "maybe", "CAOVAN_LOG_COUNTERS": "2", "CAOVAN_REQUIRE": "1", "HOME": "/"}
    assert check_environment(env) == [
        EnvFinding(
            "FAIL",
            "CAOVAN_REQUIRE_TURBO3",
            "environment variable CAOVAN_REQUIRE_TURBO3='maybe' is not understood: use 1 (require) or 0 (do not)",
        ),
        EnvFinding(
            "WARN",
            "CAOVAN_LOG_COUNTERS",
            "environment variable CAOVAN_LOG_COUNTERS='2' is not understood: use 1 (log the counters) or 0 (do not); "
            "the dispatch counters are not logged",
        ),
        EnvFinding(
            "WARN",
            "CAOVAN_*",
            "environment variables caovan ignores: CAOVAN_REQUIRE (not read by caovan; did you mean "
            "CAOVAN_REQUIRE_TURBO3?)",
        ),
    ]
    assert check_environment({"CAOVAN_REQUIRE_TURBO3": "yes", "CAOVAN_LOG_COUNTERS": "off", "CAOVAN_RUNNER": "x"}) == []
