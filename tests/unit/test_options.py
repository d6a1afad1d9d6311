import pytest

from caovan.plugin.options import CaovanConfigError, CaovanOptions, parse_options, require_from_env

NO_ENV: dict[str, str] = {}


@pytest.mark.parametrize(
    ("config", "expected"),
    [
        (None, CaovanOptions(False, "auto", False, "default (off)")),
        ({}, CaovanOptions(False, "auto", False, "default (off)")),
        ({"gdn_prefill_backend": "triton"}, CaovanOptions(False, "auto", False, "default (off)")),
        ({"caovan_sm75_turbo3": True}, CaovanOptions(True, "auto", False, "caovan_sm75_turbo3=true")),
        ({"caovan": True}, CaovanOptions(True, "auto", False, "caovan=true")),
        (
            {"caovan": True, "caovan_mode": "auto", "caovan_require_turbo3": True},
            CaovanOptions(True, "auto", True, "caovan=true"),
        ),
        ({"caovan_mode": "on"}, CaovanOptions(True, "on", False, "caovan_mode=on")),
        ({"caovan": True, "caovan_mode": "off"}, CaovanOptions(False, "off", False, "caovan_mode=off")),
        ({"caovan": False}, CaovanOptions(False, "auto", False, "caovan=false")),
        ('{"caovan": true, "gdn_prefill_backend": "triton"}', CaovanOptions(True, "auto", False, "caovan=true")),
    ],
)
def test_both_enable_styles(config, expected):
    assert parse_options(config, NO_ENV) == expected


def test_env_require_applies():
    opts = parse_options({"caovan": True}, {"CAOVAN_REQUIRE_TURBO3": "1"})
    assert opts.require and opts.enabled


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ('{"caovan": tru}', "--additional-config: not valid JSON"),
        ("[1, 2]", "must be a JSON object, got list"),
        ({"caovan": "yes"}, "key 'caovan' must be true or false, got str 'yes'"),
        ({"caovan_sm75_turbo3": 1}, "key 'caovan_sm75_turbo3' must be true or false, got int 1"),
        ({"caovan_mode": "fast"}, 'key \'caovan_mode\' must be "auto", "on" or "off", got \'fast\''),
        ({"caovan_require": True}, "unknown key 'caovan_require'; caovan accepts: caovan_sm75_turbo3"),
        ({"caovan_sm75_turbo3": True, "caovan": False}, "contradict each other"),
        ({"caovan": False, "caovan_mode": "on"}, "'caovan'=false contradicts 'caovan_mode'=\"on\""),
        ({"caovan_require_turbo3": True}, "caovan is not enabled (default (off))"),
    ],
)
def test_bad_config_is_one_clear_error(config, message):
    with pytest.raises(CaovanConfigError) as info:
        parse_options(config, NO_ENV)
    assert message in str(info.value)
    assert "\n" not in str(info.value)


def test_env_require_without_enable_is_an_error():
    with pytest.raises(CaovanConfigError, match="CAOVAN_REQUIRE_TURBO3=1 asks caovan"):
        parse_options({}, {"CAOVAN_REQUIRE_TURBO3": "1"})


@pytest.mark.parametrize(("raw", "value"), [("1", True), ("true", True), ("0", False), ("", False), (" no ", False)])
def test_require_env_values(raw, value):
    assert require_from_env({"CAOVAN_REQUIRE_TURBO3": raw}) is value


def test_require_env_garbage():
    with pytest.raises(CaovanConfigError, match=r"CAOVAN_REQUIRE_TURBO3='maybe' is not understood"):
        require_from_env({"CAOVAN_REQUIRE_TURBO3": "maybe"})


@pytest.mark.parametrize(
    ("raw", "named"),
    [("1", "CAOVAN_REQUIRE_TURBO3=1"), ("yes", "CAOVAN_REQUIRE_TURBO3=yes"), (" on", "CAOVAN_REQUIRE_TURBO3=' on'")],
)
def test_env_require_without_enable_names_the_value_as_set(raw, named):
    # The user looks for what they wrote: "=1" for a "yes" sends them hunting for a variable they never set so.
    with pytest.raises(CaovanConfigError) as info:
        parse_options({}, {"CAOVAN_REQUIRE_TURBO3": raw})
    assert str(info.value).startswith(f"{named} asks caovan to refuse running unaccelerated")


def test_every_unknown_key_is_named_at_once_with_the_key_it_likely_means():
    # One typo per vLLM restart (minutes each) is too slow: name them all, each with its likely key.
    config = {"caovan": True, "caovan_mdoe": "auto", "caovan_requre_turbo3": True, "caovan_bar_baz_qux": 1}
    with pytest.raises(CaovanConfigError) as info:
        parse_options(config, NO_ENV)
    message = str(info.value)
    assert message.startswith(
        "--additional-config: unknown keys 'caovan_bar_baz_qux', 'caovan_mdoe', 'caovan_requre_turbo3';"
    )
    assert message.endswith(
        "; did you mean 'caovan_mode' for 'caovan_mdoe', 'caovan_require_turbo3' for 'caovan_requre_turbo3'?"
    )


@pytest.mark.parametrize(
    ("config", "suggested"),
    [({"caovan_mdoe": "auto"}, "caovan_mode"), ({"caovan_sm75_turbo": True}, "caovan_sm75_turbo3")],
)
def test_a_misspelt_key_gets_the_key_it_likely_means(config, suggested):
    with pytest.raises(CaovanConfigError, match=f"; did you mean '{suggested}'\\?$"):
        parse_options(config, NO_ENV)


def test_contradicting_switches_are_named_in_json_spelling():
    # The user wrote JSON: Python's True/False would not be found in their command line.
    with pytest.raises(CaovanConfigError, match="'caovan_sm75_turbo3'=true and 'caovan'=false contradict each other"):
        parse_options({"caovan_sm75_turbo3": True, "caovan": False}, NO_ENV)


@pytest.mark.parametrize("mode", ["AUTO", "On", " off "])
def test_a_mode_in_another_letter_case_gets_the_value_it_means(mode):
    expected = mode.strip().lower()
    with pytest.raises(CaovanConfigError) as info:
        parse_options({"caovan": True, "caovan_mode": mode}, NO_ENV)
    assert str(info.value).endswith(f'got {mode!r} (values are lower case: did you mean "{expected}"?)')


def test_mode_auto_without_an_enable_key_says_the_enable_key_is_missing():
    # "default (off)" read as if the caovan_mode key had not been seen at all.
    assert parse_options({"caovan_mode": "auto"}, NO_ENV).source == 'caovan_mode=auto without "caovan": true'
    with pytest.raises(CaovanConfigError, match=r'caovan is not enabled \(caovan_mode=auto without "caovan": true\)'):
        parse_options({"caovan_mode": "auto", "caovan_require_turbo3": True}, NO_ENV)
