"""``caovan serve``'s checks before it hands over to vLLM (issue 32): the CAOVAN_* environment judged as the
plugin's start-up judges it (defect 3)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from caovan import cli
from caovan.cli import serve as serve_cli
from caovan.serve_command import COLD_START_TIMEOUTS
from caovan.testing.tiny_models import write_tiny_qwen3_next


@pytest.fixture(scope="module")
def candidate(tmp_path_factory) -> Path:
    return write_tiny_qwen3_next(tmp_path_factory.mktemp("models") / "next")


@pytest.fixture
def serve(monkeypatch, capsys):
    """``caovan serve ARGS`` without starting vLLM: (exit status, stdout, stderr, the argv it would exec or None)."""
    monkeypatch.setattr(serve_cli, "_vllm_env_names", lambda: set(COLD_START_TIMEOUTS))
    for name in [n for n in os.environ if n.upper().startswith("CAOVAN_")]:
        monkeypatch.delenv(name)
    execed = []

    def fake_execve(path, argv, env):
        execed.append(argv)
        return 0

    monkeypatch.setattr(serve_cli.os, "execve", fake_execve)

    def run(*argv: str) -> tuple[int, str, str, list[str] | None]:
        status = cli.main(["serve", *argv])
        out, err = capsys.readouterr()
        return status, out, err, execed[-1] if execed else None

    return run


def test_a_require_value_start_up_refuses_is_refused_before_vllm(serve, candidate, monkeypatch):
    monkeypatch.setenv("CAOVAN_REQUIRE_TURBO3", "maybe")
    status, out, err, execed = serve(str(candidate), "--caovan-dry-run")
    assert status == 2 and out == "" and execed is None
    assert err == (
        "caovan serve: error: environment variable CAOVAN_REQUIRE_TURBO3='maybe' is not understood: use 1 (require) "
        "or 0 (do not)\n"
    )


def test_a_setting_start_up_warns_about_is_said_before_vllm_starts(serve, candidate, monkeypatch):
    monkeypatch.setenv("CAOVAN_GDN_LEGACY_DISABLE", "1")
    status, out, err, _ = serve(str(candidate), "--caovan-dry-run")
    assert status == 0 and out.startswith("CAOVAN_SERVE_AUTOSPEC=3 ")
    assert err.splitlines()[0] == (
        "[Caovan] serve: warning: environment variables caovan ignores: CAOVAN_GDN_LEGACY_DISABLE (it has no effect, "
        "caovan has no legacy bridge)"
    )


def test_help_is_given_whatever_the_environment(serve, monkeypatch):
    monkeypatch.setenv("CAOVAN_REQUIRE_TURBO3", "maybe")  # help starts no server: nothing to refuse
    status, out, _, _ = serve("--caovan-dry-run", "--help=all")
    assert status == 0 and out == "vllm serve --help=all\n"
