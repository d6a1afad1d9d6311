"""What the README tells a newcomer: the two commands first, an install that works, what the commands cost."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text(encoding="utf-8")
MAIN_JOB = "uvx nox -s matrix compat"
TEST_COMMAND = "uvx nox -s tests"


def _code_blocks(text: str) -> list[str]:
    return re.findall(r"```(?:bash)?\n(.*?)```", text, flags=re.DOTALL)


def _commands(block: str) -> list[str]:
    return [line.split("#")[0].strip() for line in block.splitlines() if line.split("#")[0].strip()]


def test_the_readme_starts_with_the_main_job_and_the_test_command_that_ci_runs():
    assert _commands(_code_blocks(README)[0]) == [MAIN_JOB, TEST_COMMAND]
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert f"exec {TEST_COMMAND}" in ci


def test_no_install_command_names_the_unpublished_package():
    # `pip install caovan-vllm-sm75-turbo3` fails until the package is published: code blocks show installs that work.
    for doc in [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]:
        for block in _code_blocks(doc.read_text(encoding="utf-8")):
            for command in _commands(block):
                if re.search(r"\bpip install\b", command):
                    assert "caovan-vllm-sm75-turbo3" not in command, f"{doc.relative_to(ROOT)}: {command}"
    install = README[README.index("## Install") :]
    install = install[: install.index("\n## ", 1)]
    assert "`pip install .`" in install and "`uv build`" in install


def test_the_readme_says_what_both_commands_take_in_time_and_disk():
    head = README[: README.index("\n## ")]
    main_job = head[head.index("**The main job**") : head.index("**The tests**")]
    tests = head[head.index("**The tests**") :]
    for part in (main_job, tests):
        assert re.search(r"\d+ minutes", part), part
        assert re.search(r"\d+(\.\d+)? GB", part), part
