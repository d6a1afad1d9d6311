"""``caovan warmup`` against a fake vLLM OpenAI server: READY/FAIL lines, exit codes, what is sent."""

from __future__ import annotations

import argparse
import socket
import time

import pytest

from caovan.cli import warmup
from caovan.serving import client as sc


def _run(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="caovan warmup")
    warmup.add_arguments(parser)
    return warmup.run(parser.parse_args(argv))


pytestmark = pytest.mark.usefixtures("no_api_key_env")


def _lines(capsys) -> tuple[list[str], list[str]]:
    captured = capsys.readouterr()
    return captured.out.splitlines(), captured.err.splitlines()


def test_module_contract():
    assert (warmup.NAME, warmup.ALIAS) == ("warmup", "caovan-sm75-warmup")
    assert "Exit status: 0" in warmup.EPILOG and "warmup=FAIL" in warmup.EPILOG
    assert "except for a command line that cannot be parsed" in warmup.EPILOG  # argparse's own exit 2
    parser = argparse.ArgumentParser()
    warmup.add_arguments(parser)
    args = parser.parse_args([])
    assert (args.api_base, args.model, args.wait_s, args.batches, args.max_tokens, args.request_timeout_s) == (
        "http://127.0.0.1:8000", None, 600.0, "1,2,4,8", 32, 900.0,
    )  # fmt: skip
    args = parser.parse_args(["--max-tokens", "8", "--wait-s", "1.5"])
    assert (args.max_tokens, args.wait_s) == ("8", "1.5")  # text: converted by run(), see the usage errors


def test_every_request_answered_is_ready(fake_openai, capsys):
    rc = _run(["--api-base", fake_openai.url + "/v1", "--batches", "1,3", "--max-tokens", "4"])
    out, err = _lines(capsys)
    assert rc == 0 and err == []
    assert out[1].startswith("[Caovan] warmup: server ready after ") and out[1].endswith(" s (model fake-model)")
    assert out[2].startswith("[Caovan] warmup: batch 1: 1/1 ok, 4 tokens each, ")
    assert out[3].startswith("[Caovan] warmup: batch 3: 3/3 ok, 4 tokens each, ")
    assert out[-1].startswith("[Caovan] warmup=READY model=fake-model requests=4 seconds=")
    bodies = fake_openai.completion_bodies()
    assert len(bodies) == 4
    assert all(b["max_tokens"] == 4 and b["ignore_eos"] is True and b["stream"] is False for b in bodies)
    assert all(b["temperature"] == 0 and b["model"] == "fake-model" for b in bodies)
    assert len({b["prompt"] for b in bodies[1:]}) == 3  # a batch's requests are not the same text


def test_a_server_that_ignores_ignore_eos_is_noted(fake_openai, capsys):
    fake_openai.tokens_cap = 2
    assert _run(["--api-base", fake_openai.url, "--batches", "2", "--max-tokens", "5"]) == 0
    out, _ = _lines(capsys)
    assert "batch 2: 2/2 ok, 2 tokens each (asked for 5: does the server ignore ignore_eos?)" in out[2]


def test_a_failing_request_is_fail_and_exit_1(fake_openai, capsys):
    fake_openai.fail_requests = {2}  # the second request of the batch of 2
    rc = _run(["--api-base", fake_openai.url, "--batches", "1,2,4", "--max-tokens", "2"])
    out, err = _lines(capsys)
    assert rc == 1
    assert out[3].startswith("[Caovan] warmup: batch 2: 1/2 ok, 2 tokens each, ")
    reason = "batch 2: 1/2 request(s) failed; first: POST " + fake_openai.url + "/v1/completions: HTTP 500: "
    assert out[-1].startswith("[Caovan] warmup=FAIL reason=" + reason + "fake failure of request ")
    assert err == ["caovan warmup: error: " + out[-1].removeprefix("[Caovan] warmup=FAIL reason=")]
    assert len(fake_openai.completion_bodies()) == 3  # it stopped at the failing batch


def test_a_malformed_answer_fails(fake_openai, capsys):
    fake_openai.malformed_requests = {0}
    assert _run(["--api-base", fake_openai.url, "--batches", "1"]) == 1
    out, _ = _lines(capsys)
    assert out[-1].endswith("the answer is not JSON ('<html>not json</html>')")


def test_model_choice(fake_openai, capsys):
    fake_openai.models = ["a", "b"]
    assert _run(["--api-base", fake_openai.url]) == 2
    out, err = _lines(capsys)
    assert err == [f"caovan warmup: error: {fake_openai.url} serves 2 models (a, b): choose one with --model"]
    assert out[-1] == f"[Caovan] warmup=FAIL reason={fake_openai.url} serves 2 models (a, b): choose one with --model"

    assert _run(["--api-base", fake_openai.url, "--model", "c"]) == 1
    out, err = _lines(capsys)
    assert err == [f"caovan warmup: error: model 'c' is not served by {fake_openai.url}; it serves: a, b"]
    assert out[-1].startswith("[Caovan] warmup=FAIL reason=model 'c' is not served")

    assert _run(["--api-base", fake_openai.url, "--model", "b", "--batches", "1", "--max-tokens", "1"]) == 0
    assert fake_openai.completion_bodies()[-1]["model"] == "b"
    assert capsys.readouterr().out.splitlines()[-1].startswith("[Caovan] warmup=READY model=b requests=1 ")


def test_a_server_that_never_comes_up_is_exit_2_naming_the_last_error(capsys):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    assert _run(["--api-base", f"http://127.0.0.1:{port}", "--wait-s", "0.05"]) == 2
    out, err = _lines(capsys)
    assert out[0] == f"[Caovan] warmup: waiting up to 0.05 s for http://127.0.0.1:{port} ({sc.READY_PROBES})"
    assert out[-1].startswith(f"[Caovan] warmup=FAIL reason=server at http://127.0.0.1:{port} not ready after ")
    assert err[0].endswith(f"last error: GET http://127.0.0.1:{port}/health: connection refused")


def test_a_wrong_api_base_is_exit_2_at_once_not_after_wait_s(fake_openai, capsys):
    url = fake_openai.url
    started = time.monotonic()
    assert _run(["--api-base", url + "/v1/completions"]) == 2  # --wait-s 600 by default
    assert time.monotonic() - started < 30
    out, err = _lines(capsys)
    assert len(err) == 1 and err[0].startswith(f"caovan warmup: error: GET {url}/v1/completions/v1/models: HTTP 404")
    assert err[0].endswith(f"--api-base should be the server's root (e.g. {url}, or {url}/v1), not a route")
    assert out[-1].startswith("[Caovan] warmup=FAIL reason=GET ") and fake_openai.completion_bodies() == []


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--api-base", "localhost:8000"], "--api-base 'localhost:8000': expected an http:// or https:// URL"),
        (["--batches", "1,0"], "--batches '1,0': 0 is not 1 or more"),
        (["--max-tokens", "0"], "--max-tokens 0: must be 1 or more"),
        (["--wait-s", "-2"], "--wait-s -2: must be a number of seconds, 0 or more"),
        # taken as text and converted by warmup itself, so these too end with the FAIL line the --help promises
        (["--max-tokens", "abc"], "--max-tokens 'abc': not a whole number"),
        (["--max-tokens", "2.5"], "--max-tokens '2.5': not a whole number"),
        (["--wait-s", "soon"], "--wait-s 'soon': not a number of seconds"),
        (["--request-timeout-s", "x"], "--request-timeout-s 'x': not a number of seconds"),
    ],
)
def test_usage_errors_are_exit_2_before_any_request(fake_openai, capsys, argv, message):
    argv = argv if argv[0] == "--api-base" else ["--api-base", fake_openai.url, *argv]
    assert _run(argv) == 2
    out, err = _lines(capsys)
    assert len(err) == 1 and err[0].startswith(f"caovan warmup: error: {message}")
    assert out[-1].startswith(f"[Caovan] warmup=FAIL reason={message}")
    assert fake_openai.requests == []


def test_ctrl_c_is_130_with_a_fail_line(fake_openai, capsys, monkeypatch):
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(warmup, "run_concurrently", interrupted)
    assert _run(["--api-base", fake_openai.url]) == 130
    out, err = _lines(capsys)
    assert out[-1] == "[Caovan] warmup=FAIL reason=interrupted (Ctrl-C)"
    assert err == ["caovan warmup: error: interrupted (Ctrl-C)"]


def test_the_api_key_from_the_environment_is_sent(fake_openai, capsys, monkeypatch):
    fake_openai.api_key = "k1"
    monkeypatch.setenv("OPENAI_API_KEY", "k1")
    assert _run(["--api-base", fake_openai.url, "--batches", "1", "--max-tokens", "1"]) == 0
    assert fake_openai.headers[-1]["Authorization"] == "Bearer k1"
    monkeypatch.delenv("OPENAI_API_KEY")
    assert _run(["--api-base", fake_openai.url, "--wait-s", "5"]) == 2  # 401 fails at once, no 5 s wait
    assert "the server wants an API key" in capsys.readouterr().err


def test_a_refused_api_key_names_where_it_came_from(fake_openai, capsys, monkeypatch):
    fake_openai.api_key = "right"
    monkeypatch.setenv("OPENAI_API_KEY", "right")
    monkeypatch.setenv("VLLM_API_KEY", "wrong")  # VLLM_API_KEY wins, as vllm serve reads it
    assert _run(["--api-base", fake_openai.url]) == 2
    out, err = _lines(capsys)
    assert err[0].endswith("HTTP 401: Unauthorized: the server refused the API key (taken from $VLLM_API_KEY)")
    assert out[-1].startswith("[Caovan] warmup=FAIL reason=") and "refused the API key" in out[-1]
    assert _run(["--api-base", fake_openai.url, "--api-key", "wrong2"]) == 2
    assert capsys.readouterr().err.rstrip().endswith("the server refused the API key (taken from --api-key)")
    assert _run(["--api-base", fake_openai.url, "--api-key", "right"]) == 0
