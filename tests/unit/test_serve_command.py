"""``caovan serve``: the vllm serve command it builds from the user's arguments (no vLLM started here).

The model check is faked where a test is about argument handling; the tests that read a model folder use the tiny
model configs of the serve tier.  That vLLM's own parser reads the result as intended is the discovery tier's
``test_serve_command_vllm_parser.py``.
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

import pytest

from caovan import cli
from caovan.bench.model_folders import write_tiny_qwen3_dense, write_tiny_qwen3_next
from caovan.cli import serve as serve_cli
from caovan.model_check import check_model_dir
from caovan.plugin import guards
from caovan.plugin.uniform_decode_guard import FullGraphSafety
from caovan.serving.serve_command import COLD_START_TIMEOUTS, plan_serve
from caovan.serving.serve_flags import ServeArgsError, find_flag, split_model

ALL_TIMEOUTS = set(COLD_START_TIMEOUTS)


@pytest.fixture(scope="module")
def candidate(tmp_path_factory) -> Path:
    return write_tiny_qwen3_next(tmp_path_factory.mktemp("models") / "next")


@pytest.fixture(scope="module")
def dense(tmp_path_factory) -> Path:
    return write_tiny_qwen3_dense(tmp_path_factory.mktemp("models") / "dense")


#: Stands in for the probe of vLLM's runner (the discovery tier runs the real one): this vLLM's answer, as
#: vLLM 0.12 - 0.33 give it.
STAND_IN_SAFETY = FullGraphSafety(with_caovan=True, without_caovan=False, reason="why")


def plan(model, args, environ=None, **kwargs):
    kwargs.setdefault("vllm_env_names", ALL_TIMEOUTS)
    kwargs.setdefault("judge_full_graphs", lambda pp: STAND_IN_SAFETY)
    return plan_serve(str(model), args, {} if environ is None else environ, **kwargs)


def value_after(args: list[str], flag: str) -> str:
    positions = [i for i, token in enumerate(args) if token == flag]
    assert len(positions) == 1, f"{flag} appears {len(positions)} times in {args}"
    return args[positions[0] + 1]


def test_enables_caovan_and_adds_mtp_for_a_candidate(candidate):
    result = plan(candidate, ["--port", "8001", "-tp", "2"])
    assert result.vllm_args[:4] == ["--port", "8001", "-tp", "2"]
    assert json.loads(value_after(result.vllm_args, "--additional-config")) == {"caovan": True, "caovan_mode": "auto"}
    assert json.loads(value_after(result.vllm_args, "--speculative-config")) == {
        "method": "mtp",
        "num_speculative_tokens": 3,
    }
    assert result.env_added["CAOVAN_SERVE_AUTOSPEC"] == "3"
    assert result.argv[1:5] == ["-m", "vllm.entrypoints.cli.main", "serve", str(candidate)]


def test_user_additional_config_keys_are_kept_in_one_merged_flag(candidate):
    last = '--additional_config={"gdn_prefill_backend": "triton"}'
    args = ["--additional-config", '{"a": 1}', "--port", "1", last]
    result = plan(candidate, args)
    # argparse keeps the last plain value: that one is merged, the earlier one (ignored by vLLM too) is dropped.
    assert json.loads(value_after(result.vllm_args, "--additional-config")) == {
        "gdn_prefill_backend": "triton",
        "caovan": True,
        "caovan_mode": "auto",
    }
    assert result.vllm_args[:3] == ["--port", "1", "--additional-config"]


@pytest.mark.parametrize(
    "config",
    [{"caovan": False}, {"caovan_sm75_turbo3": True}, {"caovan_mode": "off"}],
    ids=["caovan-false", "legacy-key", "mode-off"],
)
def test_a_switch_the_user_set_is_left_as_written(candidate, config):
    result = plan(candidate, ["--additional-config", json.dumps(config)])
    assert json.loads(value_after(result.vllm_args, "--additional-config")) == config


def test_caovan_off_still_gets_autospec_for_a_fair_baseline(candidate):
    result = plan(candidate, ["--additional-config", '{"caovan": false}'])
    assert "--speculative-config" in result.vllm_args
    assert any("caovan: off (caovan=false)" in note for note in result.notes)


def test_dotted_additional_config_gets_dotted_caovan_keys(candidate):
    # vLLM gathers dotted keys into one object that replaces a plain --additional-config: caovan's keys join them.
    result = plan(candidate, ["--additional-config.gdn_prefill_backend", "triton"])
    assert result.vllm_args[:2] == ["--additional-config.gdn_prefill_backend", "triton"]
    assert result.vllm_args[2:6] == ["--additional-config.caovan", "true", "--additional-config.caovan_mode", '"auto"']


def test_dotted_caovan_switch_of_the_user_is_respected(candidate):
    result = plan(candidate, ["--additional-config.caovan=false"])
    assert [t for t in result.vllm_args if t.startswith("--additional-config")] == ["--additional-config.caovan=false"]


def test_additional_config_from_a_config_file_is_carried_over(candidate, tmp_path):
    config = tmp_path / "serve.yaml"
    config.write_text("port: 8123\nadditional_config:\n  gdn_prefill_backend: triton\n")
    result = plan(candidate, ["--config", str(config)])
    assert json.loads(value_after(result.vllm_args, "--additional-config")) == {
        "gdn_prefill_backend": "triton",
        "caovan": True,
        "caovan_mode": "auto",
    }


@pytest.mark.parametrize(
    "args",
    [
        ["--speculative-config", '{"method": "mtp", "num_speculative_tokens": 1}'],
        ['--speculative_config={"method": "mtp"}'],
        ["-sc", '{"method": "mtp"}'],
        ["--speculative-config.method", "mtp"],
    ],
    ids=["plain", "underscore-equals", "short", "dotted"],
)
def test_users_speculative_config_turns_autospec_off(candidate, args):
    result = plan(candidate, args)
    assert result.vllm_args.count("--speculative-config") == (1 if args[0] == "--speculative-config" else 0)
    assert "CAOVAN_SERVE_AUTOSPEC" not in result.env_added
    assert "AutoSpec: not needed, you gave a speculative config" in result.notes


def test_speculative_config_in_the_config_file_turns_autospec_off(candidate, tmp_path):
    config = tmp_path / "serve.yaml"
    config.write_text("speculative-config:\n  method: mtp\n  num_speculative_tokens: 2\n")
    assert "--speculative-config" not in plan(candidate, ["--config", str(config)]).vllm_args


def test_caovan_mtp_sets_the_depth_and_conflicts_with_a_users_config(candidate):
    assert (
        json.loads(value_after(plan(candidate, [], mtp=2).vllm_args, "--speculative-config"))["num_speculative_tokens"]
        == 2
    )
    with pytest.raises(ServeArgsError, match="--caovan-mtp sets AutoSpec's depth"):
        plan(candidate, ["-sc", "{}"], mtp=2)
    with pytest.raises(ServeArgsError, match="at least 1"):
        plan(candidate, [], mtp=0)


def test_no_autospec_for_a_model_that_is_not_a_candidate(dense):
    result = plan(dense, [])
    assert "--speculative-config" not in result.vllm_args
    note = next(n for n in result.notes if n.startswith("AutoSpec"))
    assert "is not a caovan candidate: " in note
    assert "no GDN" in note or "GatedDeltaNet" in note, note


def test_no_autospec_when_the_config_is_not_local():
    result = plan("org/not-downloaded", [], locate=lambda model, revision: None)
    assert "--speculative-config" not in result.vllm_args
    assert any("not in the Hugging Face cache" in note for note in result.notes)


def test_no_autospec_option(candidate):
    result = plan(candidate, [], autospec=False)
    assert "--speculative-config" not in result.vllm_args


def test_timeouts_are_raised_only_where_unset_and_read_by_vllm(candidate):
    environ = {"VLLM_RPC_TIMEOUT": "5"}
    names = {"VLLM_RPC_TIMEOUT", "VLLM_ENGINE_ITERATION_TIMEOUT_S"}
    result = plan(candidate, [], environ, vllm_env_names=names)
    assert result.env_added.get("VLLM_ENGINE_ITERATION_TIMEOUT_S") == "1800"
    assert "VLLM_RPC_TIMEOUT" not in result.env_added
    assert "VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS" not in result.env_added
    assert any("VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS not set (this vLLM does not read it)" in n for n in result.notes)


def test_stale_autospec_mark_is_dropped_from_the_environment(candidate):
    result = plan(candidate, ["-sc", '{"method": "mtp", "num_speculative_tokens": 3}'])
    env = result.environment({"CAOVAN_SERVE_AUTOSPEC": "3", "HOME": "/h"})
    assert "CAOVAN_SERVE_AUTOSPEC" not in env and env["HOME"] == "/h"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--additional-config", "{not json"], "--additional-config: not valid JSON"),
        (["--additional-config", "[1]"], "--additional-config: must be a JSON object, got list"),
        (["--additional-config", '{"caovan": "yes"}'], "key 'caovan' must be true or false"),
        (["--additional-config", '{"Caovan": true}'], "unknown key 'Caovan'"),
        (["--additional-config"], "--additional-config needs a value"),
        (["--config", "/nonexistent/serve.yaml"], "--config /nonexistent/serve.yaml: cannot read"),
    ],
)
def test_bad_arguments_are_one_error_naming_the_argument(candidate, args, message):
    with pytest.raises(ServeArgsError, match=message.replace("[", r"\[").replace("{", r"\{")):
        plan(candidate, args)


def test_malformed_config_file_is_named(candidate, tmp_path):
    config = tmp_path / "serve.yaml"
    config.write_text("- a list\n")
    with pytest.raises(ServeArgsError, match="must be a YAML mapping"):
        plan(candidate, ["--config", str(config)])


def test_arguments_after_double_dash_are_not_read_as_flags():
    assert find_flag(["--", "--additional-config", "{}"], "--additional-config") == []


def test_model_check_of_the_candidate_agrees(candidate):
    # The fixture is what the serve tier serves: AutoSpec must take it.
    assert check_model_dir(candidate).is_candidate


def _cli_args(argv):
    parser = argparse.ArgumentParser()
    serve_cli.add_arguments(parser)
    return parser.parse_args(argv)


def test_cli_dry_run_prints_the_command_and_runs_nothing(candidate, monkeypatch, capsys):
    monkeypatch.setattr(serve_cli, "_vllm_env_names", lambda: ALL_TIMEOUTS)
    monkeypatch.setattr(serve_cli.os, "execve", lambda *a: pytest.fail("dry run must not exec"))
    for name in ALL_TIMEOUTS:
        monkeypatch.delenv(name, raising=False)
    assert serve_cli.run(_cli_args([str(candidate), "--port", "8001", "--caovan-mtp", "2", "--caovan-dry-run"])) == 0
    out, err = capsys.readouterr()
    assert out.startswith("CAOVAN_SERVE_AUTOSPEC=2 ")
    assert f"vllm serve {candidate} --port 8001 --additional-config " in out
    assert "[Caovan] serve: AutoSpec: MTP speculative decoding, 2 token(s) per step" in err


def test_cli_execs_vllm_with_the_plan(candidate, monkeypatch, capsys):
    monkeypatch.setattr(serve_cli, "_vllm_env_names", lambda: ALL_TIMEOUTS)
    monkeypatch.setattr(guards, "cuda_gpu_missing", lambda environ=None: None)  # a GPU, wherever this runs
    called = {}

    def fake_execve(path, argv, env):
        called.update(path=path, argv=argv, env=env)
        raise SystemExit(0)

    monkeypatch.setattr(serve_cli.os, "execve", fake_execve)
    monkeypatch.setenv("CAOVAN_SERVE_AUTOSPEC", "9")
    with pytest.raises(SystemExit):
        serve_cli.run(_cli_args(["--caovan-no-autospec", str(candidate)]))
    assert called["argv"][1:5] == ["-m", "vllm.entrypoints.cli.main", "serve", str(candidate)]
    assert "--speculative-config" not in called["argv"]
    assert "CAOVAN_SERVE_AUTOSPEC" not in called["env"]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["M", "--caovan-mpt", "2"], "unknown option --caovan-mpt (did you mean --caovan-mtp?)"),
        (["M", "--caovan-mtp", "two"], "argument --caovan-mtp: invalid int value: 'two'"),
    ],
)
def test_cli_bad_caovan_options(argv, message, monkeypatch, capsys):
    monkeypatch.setattr(serve_cli, "_vllm_env_names", lambda: ALL_TIMEOUTS)
    assert serve_cli.run(_cli_args(argv)) == 2
    assert message in capsys.readouterr().err


def test_cli_without_vllm_is_one_error(candidate, monkeypatch, capsys):
    monkeypatch.setattr(serve_cli, "_vllm_env_names", lambda: "vLLM is not importable here (x)")
    assert serve_cli.run(_cli_args([str(candidate)])) == 2
    assert capsys.readouterr().err == "caovan serve: error: vLLM is not importable here (x)\n"


@pytest.mark.parametrize(
    ("environ", "token"),
    [
        ({"CAOVAN_SERVE_AUTOSPEC": "3"}, "speculative_config=auto MTP=3"),
        ({"CAOVAN_SERVE_AUTOSPEC": "2"}, "speculative_config MTP=3"),  # AutoSpec's depth was overridden
        ({}, "speculative_config MTP=3"),
    ],
)
def test_routing_line_says_auto_only_for_autospecs_depth(environ, token):
    from caovan.adapters.layer_support import speculative_config_token

    assert speculative_config_token(3, environ) == token


@pytest.mark.parametrize(
    ("token", "flag"),
    [
        ("--additional-conf", "--additional-config"),
        ("--additional_conf.caovan=false", "--additional-config"),
        ("--speculative-conf", "--speculative-config"),
        ("--spec", "--speculative-config"),
        ("--conf", "--config"),
    ],
)
def test_abbreviations_of_edited_flags_are_refused(candidate, token, flag):
    # vLLM's argparse would take the abbreviation, and caovan's own flag after it would replace the user's value.
    with pytest.raises(ServeArgsError, match=f"write {flag} in full"):
        plan(candidate, [token, "{}"] if "=" not in token else [token])


def test_abbreviation_check_stops_at_double_dash(candidate):
    assert "--additional-conf" in plan(candidate, ["--", "--additional-conf"]).vllm_args


def test_config_file_with_equals_is_refused_because_vllm_ignores_it(candidate, tmp_path):
    config = tmp_path / "serve.yaml"
    config.write_text("speculative-config:\n  method: mtp\n")
    with pytest.raises(ServeArgsError, match="write --config FILE"):
        plan(candidate, [f"--config={config}"])


def test_additions_go_before_a_double_dash(candidate):
    # After "--" vLLM reads every argument as positional: a flag caovan serve appended there would be lost.
    args = plan(candidate, ["--port", "1", "--", "extra"]).vllm_args
    assert args[-2:] == ["--", "extra"]
    assert args.index("--additional-config") < args.index("--") and args.index("--speculative-config") < args.index(
        "--"
    )


@pytest.mark.parametrize("form", [["--model", "{m}"], ["--model={m}"], ["--port", "1", "--model", "{m}"]])
def test_model_given_as_an_option_stays_where_it_is_and_gets_autospec(candidate, form):
    args = [token.format(m=candidate) for token in form]
    result = plan_serve(None, args, {}, vllm_env_names=ALL_TIMEOUTS)
    assert result.model == str(candidate) and not result.model_positional
    assert result.serve_args[: len(args)] == args  # no positional MODEL added in front
    assert value_after(result.vllm_args, "--speculative-config") == '{"method":"mtp","num_speculative_tokens":3}'


def test_first_model_option_is_the_served_one_as_in_vllm(candidate, dense):
    # vLLM's FlexibleArgumentParser moves the first --model to MODEL's place; AutoSpec checks that model.
    result = plan_serve(None, ["--model", str(candidate), "--model", str(dense)], {}, vllm_env_names=ALL_TIMEOUTS)
    assert result.model == str(candidate) and "--speculative-config" in result.vllm_args


def test_model_and_model_option_together_are_refused_as_vllm_does(candidate, dense):
    with pytest.raises(ServeArgsError, match=f"the model is given twice .*--model {dense}.* keep one"):
        plan(candidate, ["--model", str(dense)])


def test_model_from_the_config_file(candidate, tmp_path):
    config = tmp_path / "serve.yaml"
    config.write_text(f"model: {candidate}\n")
    result = plan_serve(None, ["--config", str(config)], {}, vllm_env_names=ALL_TIMEOUTS)
    assert result.model == str(candidate) and result.serve_args[:2] == ["--config", str(config)]
    assert "--speculative-config" in result.vllm_args


def test_no_model_is_one_error():
    with pytest.raises(ServeArgsError, match=r"no model: write it first .*, give --model MODEL, or set model in"):
        plan_serve(None, ["--port", "8000"], {})


def _dry_run(monkeypatch, capsys, entry, argv):
    monkeypatch.setattr(serve_cli, "_vllm_env_names", lambda: ALL_TIMEOUTS)
    monkeypatch.setattr(serve_cli.os, "execve", lambda *a: pytest.fail("dry run must not exec"))
    status = entry(argv)
    out, err = capsys.readouterr()
    return status, out, err


@pytest.mark.parametrize(
    ("entry", "prefix"),
    [(lambda argv: cli.main(["serve", *argv]), "caovan serve"), (cli.serve_alias, "caovan-vllm-serve")],
)
def test_command_line_takes_vllm_options_anywhere(candidate, monkeypatch, capsys, entry, prefix):
    # argparse would stop at --model or --port ("unrecognized arguments"): the command hands them over unparsed.
    status, out, _ = _dry_run(
        monkeypatch, capsys, entry, ["--caovan-dry-run", "--port", "8001", "--model", str(candidate), "-O3"]
    )
    assert status == 0
    assert f"vllm serve --port 8001 --model {candidate} -O3 --additional-config " in out
    status, _, err = _dry_run(monkeypatch, capsys, entry, ["--port", "8001", str(candidate)])
    assert status == 2 and err.startswith(f"{prefix}: error: no model: write it first")


def test_caovan_options_after_double_dash_are_vllms(candidate, monkeypatch, capsys):
    status, out, _ = _dry_run(
        monkeypatch, capsys, cli.main, ["serve", str(candidate), "--caovan-dry-run", "--", "--caovan-mtp", "2"]
    )
    assert status == 0 and out.rstrip().endswith("-- --caovan-mtp 2")
    assert 'num_speculative_tokens":3' in out  # --caovan-mtp 2 after "--" was not taken as caovan's


@pytest.mark.parametrize("argv", [["--help"], ["--caovan-dry-run", "-h"], ["--caovan-no-autospec", "--help"]])
@pytest.mark.parametrize("entry", [lambda argv: cli.main(["serve", *argv]), cli.serve_alias])
def test_help_before_the_model_comes_from_argparse(entry, argv, capsys):
    with pytest.raises(SystemExit) as stop:
        entry(argv)
    assert stop.value.code == 0
    assert "MODEL [VLLM_ARGS ...]" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("argv", "command"),
    [
        (["--help=all"], "vllm serve --help=all"),
        (["--port", "1", "--help=ModelConfig"], "vllm serve --port 1 --help=ModelConfig"),
        (["MODEL", "--help"], "vllm serve MODEL --help"),
        (["MODEL", "-h", "--caovan-mtp", "2"], "vllm serve MODEL -h"),
        (["--model", "x", "--help"], "vllm serve --model x --help"),
    ],
)
def test_vllm_help_is_run_as_written(monkeypatch, capsys, argv, command):
    # Help starts no server: no model needed, nothing added (vLLM's --help=all works without one).
    status, out, err = _dry_run(monkeypatch, capsys, cli.main, ["serve", "--caovan-dry-run", *argv])
    assert status == 0 and out == command + "\n"
    assert "help asked for: vLLM's own serve help" in err


def test_help_after_double_dash_is_not_a_help_request(candidate, monkeypatch, capsys):
    status, out, _ = _dry_run(monkeypatch, capsys, cli.main, ["serve", "--caovan-dry-run", str(candidate), "--", "-h"])
    assert status == 0 and "--additional-config" in out and out.rstrip().endswith("-- -h")


@pytest.mark.parametrize("entry", [lambda argv: cli.main(["serve", *argv]), cli.serve_alias])
def test_serve_version_is_caovans(entry, capsys):
    with pytest.raises(SystemExit) as stop:
        entry(["--version"])
    assert stop.value.code == 0 and "caovan 0." in capsys.readouterr().out


@pytest.mark.parametrize(
    ("plugins", "message"),
    [
        ("other_plugin", "VLLM_PLUGINS='other_plugin' does not list caovan_sm75_turbo3: vLLM will not load caovan"),
        ("a, caovan_sm75_turbo3", "(vLLM does not strip spaces: ' caovan_sm75_turbo3')"),
        ("", "VLLM_PLUGINS='' does not list caovan_sm75_turbo3"),
    ],
)
def test_vllm_plugins_that_leave_caovan_out_is_an_error(candidate, plugins, message):
    # vLLM would start without caovan and ignore its keys: an unaccelerated server that says nothing.
    with pytest.raises(ServeArgsError, match=re.escape(message)):
        plan(candidate, [], {"VLLM_PLUGINS": plugins})


def test_vllm_plugins_matters_only_while_caovan_is_on(candidate):
    assert plan(candidate, [], {"VLLM_PLUGINS": "a,caovan_sm75_turbo3"}).model == str(candidate)
    off = plan(candidate, ["--additional-config", '{"caovan": false}'], {"VLLM_PLUGINS": "a"})
    assert any(note.startswith("caovan: off") for note in off.notes)


# --- what a QA pass found (session 18) ------------------------------------------------------------------------


@pytest.mark.parametrize("token", ["-s", "-s.method", "-s=x"])
def test_single_dash_abbreviation_of_sc_is_refused(candidate, token):
    # argparse abbreviates single-dash options too: vLLM reads -s as -sc, and AutoSpec's flag would replace it.
    with pytest.raises(ServeArgsError, match="write -sc in full"):
        plan(candidate, [token, "{}"] if "=" not in token else [token])


@pytest.mark.parametrize(
    ("name", "text", "message"),
    [
        ("c.json", "{}", "vLLM reads only .yaml or .yml config files"),
        ("c.yaml", "", "the file is empty"),
        ("c.yaml", "additional-config.foo: 1\n", "additional-config.foo: write the file's additional-config as one"),
        ("c.yaml", "additional_config.caovan: false\n", "additional_config.caovan: write the file's"),
        ("c.yaml", "additional-config:\n  when: 2024-01-01\n", "additional-config: a value JSON cannot hold"),
    ],
)
def test_config_files_vllm_or_caovan_cannot_read_are_one_error(candidate, tmp_path, name, text, message):
    config = tmp_path / name
    config.write_text(text)
    with pytest.raises(ServeArgsError, match=message):
        plan(candidate, ["--config", str(config)])


def test_config_file_that_is_not_utf8_is_one_error(candidate, tmp_path):
    config = tmp_path / "c.yaml"
    config.write_bytes(b"served-model-name: caf\xe9\n")
    with pytest.raises(ServeArgsError, match="not UTF-8 text"):
        plan(candidate, ["--config", str(config)])


def test_dotted_speculative_config_in_a_config_file_is_the_users(candidate, tmp_path):
    config = tmp_path / "c.yaml"
    config.write_text("speculative-config.method: mtp\nspeculative-config.num_speculative_tokens: 1\n")
    result = plan(candidate, ["--config", str(config)])
    assert "--speculative-config" not in result.vllm_args and "CAOVAN_SERVE_AUTOSPEC" not in result.env_added


@pytest.mark.parametrize("args", [[""], ["--model="], ["--model", " "]])
def test_an_empty_model_name_is_one_error(args):
    with pytest.raises(ServeArgsError, match="the model name is empty"):
        plan_serve(*split_model(args), {})


def test_the_model_path_is_checked_as_vllm_reads_it(candidate, monkeypatch):
    # vLLM does not expand "~": a quoted ~/model is no folder vLLM can load, even when $HOME/model is this one.
    monkeypatch.setenv("HOME", str(candidate.parent))
    with pytest.raises(ServeArgsError, match=f"model folder not found: ~/{candidate.name} .vLLM does not expand ~"):
        plan(f"~/{candidate.name}", [])


@pytest.mark.parametrize(
    "args", [["--speculative-config", ""], ["--speculative-config", "None"], ["-sc=null"], ["-sc", " None "]]
)
def test_a_speculative_config_that_turns_it_off_is_said_to(candidate, args):
    # vLLM reads "" and "None" as no speculative config (optional_type), and JSON null too.
    result = plan(candidate, args)
    assert "--speculative-config" not in result.vllm_args[len(args) :]
    assert any("speculative decoding is off" in note for note in result.notes), result.notes


@pytest.mark.parametrize("value", ["false", "null", "''"])
def test_a_config_files_speculative_config_that_turns_it_off_is_said_to(candidate, tmp_path, value):
    config = tmp_path / "c.yaml"
    config.write_text(f"speculative-config: {value}\n")
    result = plan(candidate, ["--config", str(config)])
    assert "--speculative-config" not in result.vllm_args
    assert any("speculative decoding is off: the --config file's" in note for note in result.notes), result.notes


def test_caovan_mode_auto_alone_still_gets_caovan_switched_on(candidate):
    # "auto" with no switch is off (options.parse_options): caovan serve's job is to switch it on.
    result = plan(candidate, ["--additional-config", '{"caovan_mode": "auto", "x": 1}'])
    assert json.loads(value_after(result.vllm_args, "--additional-config")) == {
        "caovan_mode": "auto",
        "x": 1,
        "caovan": True,
    }
    off = plan(candidate, ["--additional-config", '{"caovan_mode": "off"}'])
    assert json.loads(value_after(off.vllm_args, "--additional-config")) == {"caovan_mode": "off"}


def test_caovan_mtp_that_cannot_be_honoured_is_an_error(candidate, dense):
    with pytest.raises(ServeArgsError, match="--caovan-no-autospec turns AutoSpec off"):
        plan(candidate, [], mtp=2, autospec=False)
    with pytest.raises(ServeArgsError, match="--caovan-mtp 2: not added, .* is not a caovan candidate"):
        plan(dense, [], mtp=2)
    with pytest.raises(ServeArgsError, match="--caovan-mtp sets AutoSpec.s depth, but you gave --speculative-config"):
        plan(candidate, ["--speculative-config", "None"], mtp=2)


def test_autospec_looks_up_the_revision_vllm_will_load(candidate):
    asked = []
    result = plan("org/model", ["--revision", "abc123"], locate=lambda model, revision: asked.append(revision))
    assert asked == ["abc123"]
    assert any("config.json at revision abc123 is not in the Hugging Face cache" in n for n in result.notes)


def test_non_ascii_values_are_passed_as_written(candidate):
    result = plan(candidate, ["--additional-config", '{"label": "café"}'])
    assert '"label":"café"' in value_after(result.vllm_args, "--additional-config")


# --- defect 5: a bad model folder is refused as check-model refuses it ------------------------------------------


def _bad_folders(tmp_path: Path) -> dict[str, Path]:
    no_config = tmp_path / "no-config"
    no_config.mkdir()
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "config.json").write_text('{"architectures": [')
    return {"missing": tmp_path / "no" / "such" / "folder", "no_config": no_config, "broken": broken}


@pytest.mark.parametrize("kind", ["missing", "no_config", "broken"])
@pytest.mark.parametrize("dry_run", [True, False])
def test_serve_refuses_a_bad_model_folder_as_check_model_does(tmp_path, monkeypatch, capsys, kind, dry_run):
    folder = _bad_folders(tmp_path)[kind]
    check_status = cli.main(["check-model", str(folder)])
    _, check_err = capsys.readouterr()
    flags = ["--caovan-dry-run"] if dry_run else []
    status, out, err = _dry_run(monkeypatch, capsys, cli.main, ["serve", str(folder), *flags])
    assert (status, check_status) == (2, 2)
    assert out == "" and err.count("\n") == 1, err
    assert err.startswith("caovan serve: error: ") and str(folder) in err
    # One shared judgement: the same words after each command's own prefix.
    assert err.removeprefix("caovan serve: ") == check_err.removeprefix("caovan check-model: ")


@pytest.mark.parametrize("spec", [[], ["--speculative-config", '{"method": "mtp"}'], ["--caovan-no-autospec"]])
def test_a_bad_model_folder_is_refused_whatever_autospec_does(tmp_path, spec):
    # vLLM could not load it either: refusing it does not depend on AutoSpec looking at it.
    folder = _bad_folders(tmp_path)["missing"]
    autospec = "--caovan-no-autospec" not in spec
    args = [arg for arg in spec if arg != "--caovan-no-autospec"]
    with pytest.raises(ServeArgsError, match=f"model folder not found: {re.escape(str(folder))}"):
        plan(folder, args, autospec=autospec)
    with pytest.raises(ServeArgsError, match=f"model folder not found: {re.escape(str(folder))}"):
        plan_serve(None, ["--model", str(folder), *args], {}, autospec=autospec)


@pytest.mark.parametrize("model", ["./no-such-model", "../no-such-model", "~/no-such-model", "no-such-dir/../x"])
def test_a_relative_or_home_path_is_a_folder_never_a_hugging_face_name(tmp_path, monkeypatch, model):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    if model.startswith(("./", "../", "~/")):
        with pytest.raises(ServeArgsError, match=f"model folder not found: {re.escape(model)}"):
            plan(model, [])
    else:  # org/name-like: a Hugging Face name that is not cached keeps AutoSpec's note
        result = plan(model, [])
        assert any("is not a local folder" in note for note in result.notes)


def test_an_uncached_hugging_face_name_is_still_one_autospec_note():
    result = plan("no-such-org/no-such-model", [])
    assert "--speculative-config" not in result.vllm_args
    notes = [note for note in result.notes if note.startswith("AutoSpec")]
    assert len(notes) == 1 and "is not in the Hugging Face cache" in notes[0]


# --- what serve says about vLLM's default FULL CUDA graphs ------------------------------------------------------


def graph_notes(result) -> list[str]:
    return [note for note in result.notes if note.startswith("cudagraphs:")]


def test_full_graphs_are_said_safe_with_caovan_on_and_no_piecewise_is_recommended(candidate):
    (note,) = graph_notes(plan(candidate, []))
    assert (
        note == "cudagraphs: vLLM's default FULL_AND_PIECEWISE; FULL CUDA graphs with MTP are safe with caovan on: why"
    )


def test_piecewise_is_recommended_where_full_graphs_are_not_safe(candidate):
    (note,) = graph_notes(plan(candidate, ["--additional-config", '{"caovan": false}']))
    assert 'NOT safe with caovan off: why; use --compilation-config \'{"cudagraph_mode": "PIECEWISE"}\'' in note
    unsafe = FullGraphSafety(False, False, "no guard here")
    (note,) = graph_notes(plan(candidate, [], judge_full_graphs=lambda pp: unsafe))
    assert "NOT safe with caovan on: no guard here; use --compilation-config" in note


@pytest.mark.parametrize(
    "args",
    [
        ["--compilation-config", '{"cudagraph_mode": "PIECEWISE"}'],
        ["-O", '{"cudagraph_mode": "FULL_AND_PIECEWISE"}'],
        ["--compilation-config.cudagraph_mode=PIECEWISE"],
        ["-cc.cudagraph_mode", "NONE"],
        ["--enforce-eager"],
        ["--enforce_eager"],
    ],
)
def test_a_user_who_chose_the_graph_mode_hears_nothing(candidate, args):
    def judge(pp):
        raise AssertionError("not asked: the user chose")

    assert graph_notes(plan(candidate, args, judge_full_graphs=judge)) == []


@pytest.mark.parametrize("text", ["compilation-config:\n  cudagraph_mode: PIECEWISE\n", "enforce_eager: true\n"])
def test_a_config_file_that_chose_the_graph_mode_hears_nothing(candidate, tmp_path, text):
    config = tmp_path / "serve.yaml"
    config.write_text(text)
    assert graph_notes(plan(candidate, ["--config", str(config)])) == []


def test_without_speculative_decoding_nothing_is_said(candidate, dense):
    def judge(pp):
        raise AssertionError("not asked: no spec-decode step")

    assert graph_notes(plan(candidate, [], autospec=False, judge_full_graphs=judge)) == []
    assert graph_notes(plan(dense, [], judge_full_graphs=judge)) == []


@pytest.mark.parametrize(("args", "size"), [(["-pp", "2"], 2), (["--pipeline-parallel-size=4"], 4), ([], 1)])
def test_the_pipeline_parallel_size_reaches_the_judge(candidate, args, size):
    asked = []
    plan(candidate, args, judge_full_graphs=lambda pp: asked.append(pp) or STAND_IN_SAFETY)
    assert asked == [size]


def test_a_judge_that_fails_leaves_one_note_and_serve_goes_on(candidate):
    def judge(pp):
        raise ImportError("no runner")

    (note,) = graph_notes(plan(candidate, [], judge_full_graphs=judge))
    assert note == "cudagraphs: FULL CUDA graphs with MTP not judged (ImportError: no runner)"
