"""The noxfile's lint tools are pinned (read from its source: the tests' venv has no nox)."""

from __future__ import annotations

import ast
from pathlib import Path

from packaging.requirements import Requirement

NOXFILE = Path(__file__).resolve().parents[2] / "noxfile.py"


def _assigned(name: str) -> object:
    for node in ast.parse(NOXFILE.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
            return ast.literal_eval(node.value)
    raise AssertionError(f"noxfile.py assigns no {name}")


def test_every_lint_tool_is_pinned_to_one_version():
    tools = {Requirement(text).name: Requirement(text) for text in _assigned("LINT_TOOLS")}
    assert set(tools) == {"ruff", "check-jsonschema"}
    for requirement in tools.values():
        (spec,) = requirement.specifier
        assert spec.operator == "==", f"{requirement}: pin it with =="


def test_the_lint_session_installs_its_tools_from_the_pins():
    lint = next(
        node
        for node in ast.parse(NOXFILE.read_text(encoding="utf-8")).body
        if isinstance(node, ast.FunctionDef) and node.name == "lint"
    )
    installs = [
        call
        for call in ast.walk(lint)
        if isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) and call.func.attr == "install"
    ]
    named = {arg.value for call in installs for arg in call.args if isinstance(arg, ast.Constant)}
    assert not named & {"ruff", "check-jsonschema"}, "an unpinned lint tool is installed by name"
    assert any(
        isinstance(arg, ast.Starred) and isinstance(arg.value, ast.Name) and arg.value.id == "LINT_TOOLS"
        for call in installs
        for arg in call.args
    )
