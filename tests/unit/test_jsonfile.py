"""caovan.jsonfile: read_json's one error naming the file for each way a JSON file can be wrong; where a record
can be written (output_path_problem)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from caovan import jsonfile
from caovan.jsonfile import output_path_problem, read_json


class Bad(ValueError):
    pass


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "cannot read"),
        (b"\x7b\xff", "not UTF-8 text (bad byte at offset 1)"),
        (b'{"a": 1,\n  }', ":2:3: malformed JSON: "),
    ],
    ids=["missing", "not-utf8", "malformed"],
)
def test_errors_name_the_file(tmp_path, content, message):
    path = tmp_path / "x.json"
    if content is not None:
        path.write_bytes(content)
    with pytest.raises(Bad) as info:
        read_json(path, Bad)
    assert str(info.value).startswith(str(path)) and message in str(info.value)
    with pytest.raises(Bad, match=r"^shown\.json"):
        read_json(path, Bad, shown="shown.json")


def test_reads_json(tmp_path):
    path = tmp_path / "x.json"
    path.write_text('{"a": [1, 2]}', encoding="utf-8")
    assert read_json(path, Bad) == {"a": [1, 2]}


def test_malformed_json_message_ends_with_the_place_not_mid_phrase(tmp_path):
    path = tmp_path / "x.json"
    path.write_bytes(b'{"a": "x\ty"}')
    with pytest.raises(Bad) as info:
        read_json(path, Bad)
    assert str(info.value) == f"{path}:1:9: malformed JSON: Invalid control character at line 1 column 9"


def test_output_path_problem_accepts_a_writable_folder_and_leaves_nothing_there(tmp_path):
    assert output_path_problem("--output", None) is None
    assert output_path_problem("--output", str(tmp_path / "r.json")) is None
    read_only = tmp_path / "old.json"
    read_only.write_text("{}")
    read_only.chmod(0o444)  # replaced by the atomic write all the same: the folder is what matters
    assert output_path_problem("--output", str(read_only)) is None
    assert sorted(p.name for p in tmp_path.iterdir()) == ["old.json"]  # the write probe is gone


def test_output_path_problem_refuses_a_folder_it_cannot_write_into(tmp_path, monkeypatch):
    monkeypatch.setattr(jsonfile.os, "access", lambda path, mode: Path(path) != tmp_path)
    assert output_path_problem("--json", str(tmp_path / "r.json")) == (
        f"--json {tmp_path / 'r.json'}: cannot write into directory {tmp_path} (permission denied)"
    )


@pytest.mark.skipif(hasattr(os, "geteuid") and os.geteuid() == 0, reason="root writes into a 0o555 folder")
def test_output_path_problem_refuses_a_read_only_folder(tmp_path):
    folder = tmp_path / "ro"
    folder.mkdir()
    folder.chmod(0o555)
    try:
        assert "cannot write into directory" in output_path_problem("--output", str(folder / "r.json"))
    finally:
        folder.chmod(0o755)


@pytest.mark.skipif(not os.path.isdir("/sys"), reason="no /sys")
def test_output_path_problem_refuses_a_folder_that_takes_no_new_file_even_as_root():
    # /sys takes no new file, whoever asks; os.access says yes to root there, the write probe finds out
    problem = output_path_problem("--output", "/sys/caovan-record.json")
    assert problem is not None and problem.startswith("--output /sys/caovan-record.json: cannot write into directory")


def test_output_path_problem_checks_the_folder_of_a_symlinks_target(tmp_path, monkeypatch):
    target_folder = tmp_path / "elsewhere"
    target_folder.mkdir()
    (tmp_path / "link.json").symlink_to(target_folder / "r.json")
    monkeypatch.setattr(jsonfile.os, "access", lambda path, mode: Path(path) != target_folder)
    problem = output_path_problem("--output", str(tmp_path / "link.json"))
    assert f"cannot write into directory {target_folder}" in problem


def test_output_path_problem_says_what_is_wrong_with_the_folder(tmp_path):
    (tmp_path / "file").write_text("")
    assert output_path_problem("--json", str(tmp_path / "file" / "r.json")) == (
        f"--json {tmp_path / 'file' / 'r.json'}: {tmp_path / 'file'} is not a directory"
    )
    # a symlink whose target's folder is missing: nothing to do with permissions
    (tmp_path / "link.json").symlink_to(tmp_path / "gone" / "r.json")
    assert output_path_problem("--json", str(tmp_path / "link.json")) == (
        f"--json {tmp_path / 'link.json'}: directory {tmp_path / 'gone'} does not exist"
    )


def test_json_nested_too_deeply_is_one_error_not_a_recursion_traceback(tmp_path):
    path = tmp_path / "deep.json"
    path.write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(ValueError, match="nested deeper") as info:
        read_json(path, ValueError)
    assert str(info.value).startswith(f"{path}: ")


def test_json_integer_too_long_for_python_is_one_error(tmp_path):
    path = tmp_path / "big.json"
    path.write_text('{"cases": [' + "9" * 5000 + "]}")
    with pytest.raises(ValueError, match="malformed JSON: Exceeds the limit") as info:
        read_json(path, ValueError)
    assert str(info.value).startswith(f"{path}: ")


def test_a_symlink_loop_is_refused_before_the_run(tmp_path):
    loop = tmp_path / "record.json"
    loop.symlink_to(tmp_path / "other.json")
    (tmp_path / "other.json").symlink_to(loop)
    problem = output_path_problem("--json", str(loop))
    assert problem == f"--json {loop}: a loop of symbolic links (replace it with a file name or a working link)"
