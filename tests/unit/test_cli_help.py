"""``--help`` of every caovan command: one style of HELP line, the exit codes, the right names."""

from __future__ import annotations

import argparse

import pytest

from caovan import cli
from caovan.cli import bench as bench_cli

COMMANDS = cli._commands()


def _help(capsys, *argv: str) -> str:
    with pytest.raises(SystemExit) as info:
        cli.main([*argv, "--help"])
    assert info.value.code == 0
    return " ".join(capsys.readouterr().out.split())  # argparse wraps lines: compare words


def test_every_command_is_here():
    assert [m.NAME for m in COMMANDS] == ["doctor", "verify", "check-model", "bench", "serve", "warmup", "benchmark"]


@pytest.mark.parametrize("module", COMMANDS, ids=lambda m: m.NAME)
def test_help_line_style_is_shared(module):
    # `caovan --help` lists them together: lower case, no full stop, as argparse's own lines are
    assert module.HELP[0].islower() and not module.HELP.endswith(".")


@pytest.mark.parametrize(
    ("argv", "codes"),
    [
        (["doctor"], ["0 PASS", "1 FAIL", "2 a command line that cannot be parsed"]),
        (
            ["verify"],
            ["0 every case PASS", "1 a case FAILs", "2 verify cannot run", "130 interrupted", "except for a command"],
        ),
        (["check-model"], ["0 candidate", "1 not a candidate", "2 the folder"]),
        (["bench"], ["0 done", "1 kernels:", "2 the bench cannot run"]),
        (["bench", "kernels"], ["0 done", "1 kernels:", "2 the bench cannot run", "130 interrupted"]),
        (["bench", "summary"], ["0 done", "2 the bench cannot run"]),
        (["serve"], ["vLLM's own once it runs", "0 after --caovan-dry-run", "2 the arguments cannot be handed"]),
    ],
)
def test_help_gives_the_exit_codes(capsys, argv, codes):
    text = _help(capsys, *argv)
    assert "Exit status:" in text
    for code in codes:
        assert code in text


def test_top_level_help_points_at_the_commands_exit_codes(capsys):
    assert "Each command's --help gives its exit status" in _help(capsys)


def test_tune_help_names_the_json_file_of_entries(capsys):
    text = _help(capsys, "bench", "tune")
    assert "launch_configs.json" in text and "launch_configs.py" not in text


@pytest.mark.parametrize("target", ["kernels", "tune", "layer"])
def test_bench_without_gpu_names_the_target(monkeypatch, capsys, target):
    torch = pytest.importorskip("torch")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    parser = argparse.ArgumentParser(prog="caovan bench")
    bench_cli.add_arguments(parser)
    assert bench_cli.run(parser.parse_args([target])) == 2
    assert capsys.readouterr().err.strip().endswith(f"; bench {target} runs on a GPU")


@pytest.mark.parametrize(
    ("argv", "command", "unknown"),
    [
        (["bench", "kernels", "--bogus"], "caovan bench kernels", "--bogus"),
        (["bench", "summary", "a.json", "b.json"], "caovan bench summary", "b.json"),
        (["verify", "--bogus"], "caovan verify", "--bogus"),
        (["doctor", "--jsn"], "caovan doctor", "--jsn"),
    ],
)
def test_an_unknown_argument_is_reported_by_the_command_it_was_given_to(capsys, argv, command, unknown):
    with pytest.raises(SystemExit) as info:
        cli.main(argv)
    err = capsys.readouterr().err
    assert info.value.code == 2
    assert err.startswith(f"usage: {command} ")  # its own usage, where the options it does take are listed
    assert err.splitlines()[-1] == f"{command}: error: unrecognized arguments: {unknown}"
