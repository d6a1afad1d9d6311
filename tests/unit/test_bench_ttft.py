"""``caovan bench ttft``: its settings, its two servers, and the whole procedure against fake servers
(``fake_openai_server.py`` processes standing in for ``caovan serve``)."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import pytest

from caovan.bench import ttft
from caovan.cli import bench as bench_cli
from caovan.cli.bench_ttft import ttft_settings
from caovan.serving.server_process import free_port

FAKE_SERVER = Path(__file__).resolve().with_name("fake_openai_server.py")


def _args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    bench_cli.add_arguments(parser)
    return parser.parse_args(["ttft", *argv])


def test_settings_from_the_command_line(tmp_path):
    settings = ttft_settings(
        _args("/m", "--out", str(tmp_path), "--prompt-tokens", "256,4096", "--serve-args", "--load-format dummy")
    )
    assert settings.prompt_tokens == (256, 4096) and settings.serve_args == ("--load-format", "dummy")
    assert settings.mode_dir == tmp_path / "piecewise" and settings.repeats == 5
    assert ttft_settings(_args("/m", "--out", str(tmp_path))).prompt_tokens == (256, 1024, 4096, 32768)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--prompt-tokens", "1,x"], "--prompt-tokens '1,x': expected numbers separated by commas"),
        (["--prompt-tokens", "8,8"], "expected distinct numbers >= 1"),
        (["--repeats", "0"], "--repeats 0: at least 1"),
        (["--warmup", "-1"], "--warmup -1: at least 0"),
        (["--additional-config", '{"caovan_prefill": true}'], "without caovan's keys"),
        (["--serve-args", "--x 'open"], "--serve-args: No closing quotation"),
    ],
)
def test_bad_settings_are_one_message(tmp_path, argv, message):
    problem = ttft_settings(_args("/m", "--out", str(tmp_path), *argv))
    assert isinstance(problem, str) and message in problem


def test_the_two_runs_differ_only_in_caovans_prefill(tmp_path):
    settings = ttft.TtftSettings("/m", tmp_path, additional_config={"gdn_prefill_backend": "triton"})
    off, on = (ttft.server_command(settings, prefill_on, 8123) for prefill_on in (False, True))
    config = off.index("--additional-config") + 1
    assert off[:config] == on[:config]
    assert json.loads(off[config]) == {"caovan": True, "caovan_prefill": False, "gdn_prefill_backend": "triton"}
    assert json.loads(on[config]) == {"caovan": True, "caovan_prefill": True, "gdn_prefill_backend": "triton"}


def test_prompts_have_the_asked_length_and_share_no_prefix():
    a, b = ttft.prompt_ids(300, 1), ttft.prompt_ids(300, 2)
    assert len(a) == 300 and a[0] != b[0]
    assert all(ttft.TOKEN_ID_RANGE[0] <= i < ttft.TOKEN_ID_RANGE[1] for i in a + b)
    assert ttft.prompt_ids(300, 1) == a  # deterministic


def _fake_popen(command, **kwargs):
    port = command[command.index("--port") + 1]
    return subprocess.Popen([sys.executable, str(FAKE_SERVER), port], **kwargs)


def test_the_procedure_serves_both_runs_and_writes_its_record(tmp_path):
    settings = ttft.TtftSettings("fake-model", tmp_path, prompt_tokens=(8, 32), repeats=2, port=free_port(),
                                 ready_timeout_s=60)  # fmt: skip
    record = ttft.run_ttft(settings, popen=_fake_popen)
    assert record == json.loads((tmp_path / "piecewise" / "ttft.json").read_text())
    assert [run["label"] for run in record["runs"]] == ["prefill-off", "prefill-on"]
    for run in record["runs"]:
        assert run["server_returncode"] == 0 and '"caovan": true' in run["server_command"]
        assert [r["prompt_tokens"] for r in run["results"]] == [8, 32]
        assert all(len(r["ttft_s"]) == 2 and len(r["warmup_ttft_s"]) == 1 for r in run["results"])
    assert [row["prompt_tokens"] for row in record["summary"]] == [8, 32]
    assert all(row["speedup"] > 0 for row in record["summary"])


def test_a_server_that_dies_is_one_error_naming_the_run(tmp_path):
    from caovan.bench.e2e import E2EError

    def dying(command, **kwargs):
        return subprocess.Popen([sys.executable, "-c", "import sys; sys.exit(3)"], **kwargs)

    settings = ttft.TtftSettings("fake-model", tmp_path, prompt_tokens=(8,), port=free_port(), ready_timeout_s=30)
    with pytest.raises(E2EError, match="exited with status 3"):
        ttft.run_ttft(settings, popen=dying)
