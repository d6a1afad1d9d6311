"""``caovan bench e2e``: its commands, its summary, and the whole procedure against fake servers.

The servers are ``fake_openai_server.py`` processes standing in for ``caovan serve`` (what the procedure would have
started is still what the record says); the benchmarks are the real ``caovan benchmark``, run as the procedure runs
them.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from caovan.bench import e2e
from caovan.cli import bench as bench_cli
from caovan.serving.server_process import free_port

FAKE_SERVER = Path(__file__).resolve().with_name("fake_openai_server.py")


def _args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    bench_cli.add_arguments(parser)
    return parser.parse_args(["e2e", *argv])


def test_settings_take_serve_arguments_as_one_string(tmp_path):
    settings = bench_cli.e2e_settings(
        _args("/m", "--out", str(tmp_path), "--concurrency", "1,4", "--serve-args", "--load-format dummy --dtype half")
    )
    assert settings.serve_args == ("--load-format", "dummy", "--dtype", "half")
    assert settings.concurrency == (1, 4) and settings.cudagraph_mode == "PIECEWISE"
    assert settings.mode_dir == tmp_path / "piecewise"


def test_a_tensor_parallel_run_gets_a_folder_of_its_own(tmp_path):
    for serve_args, folder in [
        ((), "piecewise"),
        (("-tp", "2"), "piecewise-tp2"),
        (("--tensor-parallel-size=2",), "piecewise-tp2"),
    ]:
        assert e2e.E2ESettings("/m", tmp_path, serve_args=serve_args).mode_dir == tmp_path / folder


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--concurrency", "1,x"], "--concurrency '1,x': expected numbers separated by commas"),
        (["--concurrency", "1,1"], "expected distinct numbers >= 1"),
        (["--concurrency", "0"], "expected distinct numbers >= 1"),
        (["--repeats", "1"], "--repeats 1: at least 2"),
        (["--requests-per-slot", "0"], "--requests-per-slot 0: at least 1"),
        (["--additional-config", "{x"], "--additional-config: not valid JSON"),
        (["--additional-config", '{"caovan": true}'], "without caovan's keys"),
        (["--additional-config", "[1]"], "a JSON object"),
        (["--serve-args", "--x 'open"], "--serve-args: No closing quotation"),
    ],
)
def test_bad_settings_are_one_message(tmp_path, argv, message):
    problem = bench_cli.e2e_settings(_args("/m", "--out", str(tmp_path), *argv))
    assert isinstance(problem, str) and message in problem


def test_the_two_runs_differ_only_in_caovans_switch(tmp_path):
    settings = e2e.E2ESettings(
        "/m",
        tmp_path,
        "FULL_AND_PIECEWISE",
        additional_config={"gdn_prefill_backend": "triton"},
        serve_args=("-tp", "1"),
    )
    off, on = (e2e.server_command(settings, on, 8123) for on in (False, True))
    assert e2e.shown(off) == (
        'caovan serve /m -tp 1 --port 8123 --compilation-config \'{"cudagraph_mode": "FULL_AND_PIECEWISE"}\' '
        '--additional-config \'{"caovan": false, "gdn_prefill_backend": "triton"}\''
    )
    assert [w for w in off if w not in on] == ['{"caovan": false, "gdn_prefill_backend": "triton"}']


def test_only_the_caovan_run_compares_with_the_baseline_of_its_concurrency(tmp_path):
    settings = e2e.E2ESettings("/m", tmp_path, repeats=3, max_tokens=64, requests_per_slot=2)
    base = e2e.benchmark_command(settings, "baseline", 4, 8123, None)
    ours = e2e.benchmark_command(settings, "caovan", 4, 8123, e2e.record_path(settings, "baseline", 4))
    assert "--compare" not in base
    assert ours[ours.index("--compare") + 1] == str(tmp_path / "piecewise" / "baseline-c4.json")
    for command in (base, ours):
        assert command[command.index("--requests") + 1] == "8"
        assert command[command.index("--load") + 1] == "decode-heavy"


def _record(median, low, high):
    rates = {"median": median, "min": low, "max": high}
    return {"results": {"decode-heavy": {"summary": {"output_tokens_per_s": rates}}}}


def test_the_summary_is_the_ratio_of_the_medians():
    records = {("baseline", 1): _record(100.0, 99.0, 101.0), ("caovan", 1): _record(143.0, 140.0, 144.0)}
    (row,) = e2e.summarise(records, (1,))
    assert row == {
        "concurrency": 1,
        "baseline_tok_s": {"median": 100.0, "min": 99.0, "max": 101.0},
        "caovan_tok_s": {"median": 143.0, "min": 140.0, "max": 144.0},
        "ratio": 1.43,
    }


def _fake_popen(command, **kwargs):
    port = command[command.index("--port") + 1]
    profile_dir = []
    if "--profiler-config" in command:
        profile_dir = [json.loads(command[command.index("--profiler-config") + 1])["torch_profiler_dir"]]
    return subprocess.Popen([sys.executable, str(FAKE_SERVER), port, *profile_dir], **kwargs)


def test_the_procedure_serves_benchmarks_and_writes_its_record(tmp_path):
    settings = e2e.E2ESettings(
        "fake-model", tmp_path, concurrency=(1, 2), repeats=2, max_tokens=4, port=free_port(), ready_timeout_s=60
    )
    record = e2e.run_e2e(settings, popen=_fake_popen)
    assert record == json.loads((tmp_path / "piecewise" / "e2e.json").read_text())
    assert [run["label"] for run in record["runs"]] == ["baseline", "caovan"]
    for run in record["runs"]:
        assert run["server_command"].startswith("caovan serve fake-model --port")
        assert run["server_returncode"] == 0  # stopped with SIGINT, as vLLM is
        assert [b["returncode"] for b in run["benchmarks"]] == [0, 0]
    assert "--compare" in record["runs"][1]["benchmarks"][0]["command"]
    assert [row["concurrency"] for row in record["summary"]] == [1, 2]
    assert all(row["ratio"] > 0 for row in record["summary"])
    assert record["versions"]["vllm"] == "0.21.0"  # what the (fake) server said
    for run in record["runs"]:  # the fake's /metrics: 10 drafts, 30 draft tokens, 3 accepted
        assert run["spec_decode"] == {
            "drafts": 10.0, "draft_tokens": 30.0, "accepted_tokens": 3.0, "mean_acceptance_length": 1.3
        }  # fmt: skip
    for label in ("baseline", "caovan"):
        assert (tmp_path / "piecewise" / f"{label}-c2.json").is_file()


def test_both_servers_share_tritons_autotuning_cache_and_the_record_says_so(tmp_path):
    envs = []

    def capturing(command, **kwargs):
        envs.append(kwargs["env"])
        return _fake_popen(command, **kwargs)

    settings = e2e.E2ESettings("fake-model", tmp_path, concurrency=(1,), max_tokens=4, port=free_port())
    record = e2e.run_e2e(settings, popen=capturing)
    assert [env["TRITON_CACHE_AUTOTUNING"] for env in envs] == ["1", "1"]
    assert all("VLLM_CUSTOM_SCOPES_FOR_PROFILING" not in env for env in envs)  # only with --profile
    assert all(env["PATH"] == os.environ["PATH"] for env in envs)  # the user's environment, plus the cache
    assert record["settings"]["server_env"] == {"TRITON_CACHE_AUTOTUNING": "1"}


def test_resume_keeps_a_finished_run_and_repeats_only_the_other(tmp_path):
    settings = e2e.E2ESettings("fake-model", tmp_path, concurrency=(1,), max_tokens=4, port=free_port())
    first = e2e.run_e2e(settings, popen=_fake_popen)
    (tmp_path / "piecewise" / "caovan-run.json").unlink()
    started = []

    def counting(command, **kwargs):
        started.append(command)
        return _fake_popen(command, **kwargs)

    again = e2e.run_e2e(settings, resume=True, popen=counting)
    assert len(started) == 1 and '"caovan": true' in started[0][-1]
    assert again["runs"][0] == first["runs"][0]  # the baseline run, as the first sitting recorded it


def test_resume_makes_again_a_run_made_on_another_gpu(tmp_path, monkeypatch, capsys):
    settings = e2e.E2ESettings("fake-model", tmp_path, concurrency=(1,), max_tokens=4, port=free_port())
    monkeypatch.setattr(e2e, "gpu_name", lambda: "NVIDIA H100 80GB HBM3")
    e2e.run_e2e(settings, popen=_fake_popen)
    (tmp_path / "piecewise" / "caovan-run.json").unlink()
    started = []

    def counting(command, **kwargs):
        started.append(command)
        return _fake_popen(command, **kwargs)

    monkeypatch.setattr(e2e, "gpu_name", lambda: "NVIDIA H200")
    again = e2e.run_e2e(settings, resume=True, popen=counting)
    assert len(started) == 2 and [run["gpu"] for run in again["runs"]] == ["NVIDIA H200"] * 2
    assert "baseline: made again: " in capsys.readouterr().out and again["gpu"] == "NVIDIA H200"


def test_a_record_names_a_two_gpu_host_as_two_gpus(monkeypatch):
    # A tensor-parallel record's caption in docs/performance.md says how many GPUs served it.
    from caovan.matrix import options

    monkeypatch.setattr(options, "nvidia_smi_gpu_names", lambda: ["NVIDIA H200", "NVIDIA H200"])
    assert e2e.gpu_name() == "2 × NVIDIA H200"


def test_only_makes_one_run_per_call_and_the_record_once_both_are_there(tmp_path, capsys):
    settings = e2e.E2ESettings("fake-model", tmp_path, concurrency=(1,), max_tokens=4, port=free_port())
    with pytest.raises(e2e.E2EError, match=r"--only caovan: no finished baseline run on this GPU in .*--only baseline"):
        e2e.run_e2e(settings, only="caovan", popen=_fake_popen)
    started = []

    def counting(command, **kwargs):
        started.append(json.loads(command[command.index("--additional-config") + 1])["caovan"])
        return _fake_popen(command, **kwargs)

    assert e2e.run_e2e(settings, only="baseline", popen=counting) is None
    assert "caovan: not made yet (--only caovan makes it, then e2e.json)" in capsys.readouterr().out
    assert not (tmp_path / "piecewise" / "e2e.json").exists()
    record = e2e.run_e2e(settings, only="caovan", popen=counting)
    assert started == [False, True] and [run["label"] for run in record["runs"]] == ["baseline", "caovan"]
    assert record == json.loads((tmp_path / "piecewise" / "e2e.json").read_text())


def test_a_server_that_dies_at_start_up_is_one_error_with_its_log(tmp_path):
    def dying(command, **kwargs):
        return subprocess.Popen([sys.executable, "-c", "print('no GPU here'); raise SystemExit(3)"], **kwargs)

    settings = e2e.E2ESettings("m", tmp_path, port=free_port(), ready_timeout_s=60)
    with pytest.raises(e2e.E2EError, match=r"(?s)exited with status 3 before it answered.*no GPU here"):
        e2e.run_e2e(settings, popen=dying)
    assert not (tmp_path / "piecewise" / "e2e.json").exists()


def test_the_command_refuses_bad_settings_with_one_line_and_exit_2(capsys, tmp_path):
    assert bench_cli.run(_args("/m", "--out", str(tmp_path), "--repeats", "1")) == 2
    assert capsys.readouterr().err == "caovan bench: error: --repeats 1: at least 2\n"
    assert not (tmp_path / "piecewise").exists()


def test_the_command_prints_one_line_per_concurrency_and_exit_1_on_a_failed_procedure(monkeypatch, capsys, tmp_path):
    rows = [
        {"concurrency": 1, "baseline_tok_s": {"median": 40.0}, "caovan_tok_s": {"median": 57.2}, "ratio": 1.43},
    ]
    monkeypatch.setattr(e2e, "run_e2e", lambda settings, resume, only: {"summary": rows})
    assert bench_cli.run(_args("/m", "--out", str(tmp_path), "--concurrency", "1")) == 0
    assert capsys.readouterr().out == (
        "concurrency 1: caovan 57.2 tok/s against 40.0 with caovan off (1.430x, medians of 2 repeats)\n"
    )

    def failing(settings, resume, only):
        raise e2e.E2EError("the server exited with status 3 before it answered")

    monkeypatch.setattr(e2e, "run_e2e", failing)
    assert bench_cli.run(_args("/m", "--out", str(tmp_path))) == 1
    assert "caovan bench: error: the server exited with status 3" in capsys.readouterr().err


def test_profiling_leaves_a_summary_per_run_before_and_after(tmp_path):
    settings = e2e.E2ESettings("fake-model", tmp_path, concurrency=(1,), max_tokens=4, port=free_port(), profile=True)
    off, on = (json.loads(e2e.server_command(settings, on, 1)[-1]) for on in (False, True))
    assert off["profiler"] == "torch" and off["ignore_frontend"] is True
    assert (
        off["torch_profiler_dir"].endswith("/piecewise/baseline-trace")
        and Path(off["torch_profiler_dir"]).is_absolute()
    )
    assert on["torch_profiler_dir"].endswith("/piecewise/caovan-trace")
    record = e2e.run_e2e(settings, popen=_fake_popen)
    for run in record["runs"]:
        assert run["profile"]["steps"] == 2
        shares = {row["category"]: row["share"] for row in run["profile"]["categories"]}
        assert shares == {"GDN spec core": 0.15, "GDN other": 0.0, "attention": 0.25, "GEMMs": 0.6, "the rest": 0.0}
        text = (tmp_path / "piecewise" / f"{run['label']}-profile.txt").read_text()
        assert text.startswith(f"PIECEWISE, caovan {'on' if run['caovan'] else 'off'} (fake-worker.")
        assert "2 model steps, 200.0 µs of GPU kernels per step" in text


def test_profile_is_refused_before_any_server_where_vllm_cannot_profile(monkeypatch, capsys, tmp_path):
    monkeypatch.setattr(e2e, "profiler_problem", lambda: "--profile: this vLLM has no --profiler-config (0.19 on)")
    monkeypatch.setattr(e2e, "run_e2e", lambda settings, resume, only: pytest.fail("a server was started"))
    assert bench_cli.run(_args("/m", "--out", str(tmp_path), "--profile")) == 2
    assert capsys.readouterr().err == "caovan bench: error: --profile: this vLLM has no --profiler-config (0.19 on)\n"


def _fake_vllm(root: Path, runner_text: str | None) -> None:
    """A ``vllm`` package with a profiler-config EngineArgs and, where given, a worker module of ``runner_text``."""
    worker = root / "vllm" / "v1" / "worker" / "gpu"
    worker.mkdir(parents=True)
    for folder in (root / "vllm", root / "vllm" / "v1", worker.parent, worker):
        (folder / "__init__.py").touch()
    (root / "vllm" / "engine").mkdir()
    (root / "vllm" / "engine" / "__init__.py").touch()
    (root / "vllm" / "engine" / "arg_utils.py").write_text(
        "import dataclasses\n@dataclasses.dataclass\nclass EngineArgs:\n    profiler_config: object = None\n"
    )
    if runner_text is not None:
        (worker / "model_runner.py").write_text(runner_text)


@pytest.mark.parametrize("opens_the_range", [True, False])
def test_profile_needs_a_runner_that_opens_the_step_range(tmp_path, monkeypatch, opens_the_range):
    from caovan.bench.profile_summary import STEP_EVENT

    text = f'with record_function_or_nullcontext("{STEP_EVENT}"):\n    pass\n' if opens_the_range else "pass\n"
    _fake_vllm(tmp_path, text)
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in [n for n in sys.modules if n == "vllm" or n.startswith("vllm.")]:
        monkeypatch.delitem(sys.modules, name)
    if opens_the_range:
        assert e2e.step_range_sources() == ["vllm/v1/worker/gpu/model_runner.py"]
        assert e2e.profiler_problem() is None
    else:
        assert e2e.step_range_sources() == []
        assert f"opens the {STEP_EVENT!r} range" in e2e.profiler_problem()


def test_spec_decode_counters_say_why_where_metrics_cannot_tell(fake_openai):
    port = int(fake_openai.url.rsplit(":", 1)[1])
    fake_openai.metrics = '# no spec decode here\nvllm:num_requests_running{engine="0"} 0.0\n'
    assert e2e.spec_decode_counters(port)["error"].startswith("/metrics: no spec-decode drafts counted")
    fake_openai.metrics = None
    assert e2e.spec_decode_counters(port)["error"].startswith("/metrics: Client error '404 Not Found'")
