"""caovan.serving.args: the options warmup and benchmark share, checked into the client's settings; and
caovan.serving.redaction: no API key or URL password in what is recorded or printed."""

from __future__ import annotations

import argparse

import pytest

from caovan.serving import args as sa
from caovan.serving import errors as se
from caovan.serving import redaction


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ("http://127.0.0.1:8000", "http://127.0.0.1:8000"),
        ("http://127.0.0.1:8000/", "http://127.0.0.1:8000"),
        ("http://127.0.0.1:8000/v1", "http://127.0.0.1:8000"),
        ("http://127.0.0.1:8000/v1/", "http://127.0.0.1:8000"),
        ("  https://gpu-box/v1  ", "https://gpu-box"),
        ("http://proxy:80/vllm/v1", "http://proxy:80/vllm"),
        ("http://proxy/vllm/", "http://proxy/vllm"),
    ],
)
def test_api_base_forms(given, expected):
    assert sa.normalize_api_base(given) == expected


@pytest.mark.parametrize(
    ("given", "problem"),
    [
        ("127.0.0.1:8000", "http:// or https://"),
        ("ftp://host/v1", "http:// or https://"),
        ("http://", "http:// or https://"),
        ("", "http:// or https://"),
        ("http://host:notaport", "not a URL"),
        ("http://host:8000/v1?x=1", "no ?query"),
    ],
)
def test_api_base_rejects_what_is_not_an_http_url(given, problem):
    with pytest.raises(se.UsageError, match="--api-base") as info:
        sa.normalize_api_base(given)
    assert problem in str(info.value) and info.value.exit_code == 2


def _args(**overrides) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    sa.add_server_arguments(parser, wait_s=7.0, request_timeout_s=900.0)
    args = parser.parse_args([])
    for key, value in overrides.items():
        setattr(args, key, value)
    return args


def test_server_settings_defaults_and_api_key_from_the_environment():
    args = _args()
    assert (args.api_base, args.model, args.api_key, args.wait_s, args.request_timeout_s) == (
        "http://127.0.0.1:8000", None, None, 7.0, 900.0,
    )  # fmt: skip
    assert sa.server_settings(args, environ={}).api_key is None
    assert sa.server_settings(args, environ={"OPENAI_API_KEY": "o"}).api_key == "o"
    assert sa.server_settings(args, environ={"OPENAI_API_KEY": "o", "VLLM_API_KEY": "v"}).api_key == "v"
    assert sa.server_settings(args, environ={"VLLM_API_KEY": "", "OPENAI_API_KEY": "o"}).api_key == "o"
    assert sa.server_settings(_args(api_key="k"), environ={"VLLM_API_KEY": "v"}).api_key == "k"
    sources = [
        sa.server_settings(args, environ={}).api_key_source,
        sa.server_settings(args, environ={"OPENAI_API_KEY": "o"}).api_key_source,
        sa.server_settings(args, environ={"OPENAI_API_KEY": "o", "VLLM_API_KEY": "v"}).api_key_source,
        sa.server_settings(_args(api_key="k"), environ={"VLLM_API_KEY": "v"}).api_key_source,
    ]
    assert sources == [None, "$OPENAI_API_KEY", "$VLLM_API_KEY", "--api-key"]


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"wait_s": -1.0}, "--wait-s -1"),
        ({"wait_s": float("nan")}, "--wait-s nan"),
        ({"wait_s": "nan"}, "--wait-s nan: must be a number of seconds, 0 or more"),
        ({"wait_s": "a while"}, "--wait-s 'a while': not a number of seconds"),
        ({"request_timeout_s": "-3"}, "--request-timeout-s -3: must be a number of seconds above 0"),
        ({"request_timeout_s": 0.0}, "--request-timeout-s 0"),
        ({"model": " "}, "--model ''"),
        ({"api_base": "localhost:8000"}, "--api-base 'localhost:8000'"),
    ],
)
def test_server_settings_refuses_bad_values(overrides, message):
    with pytest.raises(se.UsageError) as info:
        sa.server_settings(_args(**overrides), environ={})
    assert str(info.value).startswith(message)


def test_positive_int_list():
    assert sa.positive_int_list("1, 2,4,8", "--batches") == [1, 2, 4, 8]
    with pytest.raises(se.UsageError, match=r"--batches '1,x': 'x' is not a whole number"):
        sa.positive_int_list("1,x", "--batches")
    with pytest.raises(se.UsageError, match=r"--batches '0': 0 is not 1 or more"):
        sa.positive_int_list("0", "--batches")


# --- redaction -------------------------------------------------------------------------------------------------------


def test_redacted_argv_hides_the_api_key_and_url_userinfo():
    argv = ["caovan", "benchmark", "--api-key", "k1", "--api-key=k2", "--api-ke", "k3", "--api-base=http://u:p@h:1/v1"]
    assert redaction.redacted_argv([*argv, "--api-base", "https://tok@h", "--model", "m"]) == [
        "caovan", "benchmark", "--api-key", "<redacted>", "--api-key=<redacted>", "--api-ke", "<redacted>",
        "--api-base=http://h:1/v1", "--api-base", "https://h", "--model", "m",
    ]  # fmt: skip
    assert redaction.without_userinfo("http://a:b@c@host:8000/p@q") == "http://host:8000/p@q"
    assert redaction.without_userinfo("http://host:8000") == "http://host:8000"
