"""The Turbo3 alias commands (``caovan-sm75-doctor`` …): their own name in usage and --version, the same arguments."""

from __future__ import annotations

import pytest

from caovan import __version__, cli

ALIASES = [
    (cli.doctor_alias, "caovan-sm75-doctor"),
    (cli.verify_alias, "caovan-sm75-verify"),
    (cli.check_model_alias, "caovan-sm75-check-model"),
    (cli.serve_alias, "caovan-vllm-serve"),
    (cli.warmup_alias, "caovan-sm75-warmup"),
    (cli.benchmark_alias, "caovan-sm75-benchmark"),
]


@pytest.mark.parametrize(("entry", "name"), ALIASES)
def test_alias_version_is_its_own(entry, name, capsys):
    with pytest.raises(SystemExit) as info:
        entry(["--version"])
    assert info.value.code == 0
    assert capsys.readouterr().out == f"{name} (caovan {__version__})\n"


@pytest.mark.parametrize("command", ["doctor", "verify", "check-model", "serve", "warmup", "benchmark", "bench"])
def test_each_command_takes_version(command, capsys):
    # `caovan serve --version` was an argparse error while `caovan-vllm-serve --version` answered.
    with pytest.raises(SystemExit) as info:
        cli.main([command, "--version"])
    assert info.value.code == 0
    assert capsys.readouterr().out == f"caovan {__version__}\n"


@pytest.mark.parametrize(("entry", "name"), ALIASES)
def test_alias_help_names_the_alias(entry, name, capsys):
    with pytest.raises(SystemExit) as info:
        entry(["--help"])
    assert info.value.code == 0
    assert capsys.readouterr().out.startswith(f"usage: {name} [-h] [--version]")


def test_alias_usage_error_names_the_alias(capsys):
    with pytest.raises(SystemExit) as info:
        cli.check_model_alias([])
    assert info.value.code == 2
    assert "usage: caovan-sm75-check-model" in capsys.readouterr().err


def test_alias_runs_the_command_under_its_own_name(tmp_path, capsys):
    assert cli.check_model_alias([str(tmp_path)]) == 2  # no config.json: check-model's own usage error
    assert capsys.readouterr().err.startswith("caovan-sm75-check-model: error: ")
    assert cli.main(["check-model", str(tmp_path)]) == 2
    assert capsys.readouterr().err.startswith("caovan check-model: error: ")


def test_alias_entry_points_match_pyproject():
    from pathlib import Path

    import tomllib

    scripts = tomllib.loads((Path(__file__).resolve().parents[2] / "pyproject.toml").read_text())["project"]["scripts"]
    for entry, name in ALIASES:
        assert scripts[name] == f"caovan.cli:{entry.__name__}"
