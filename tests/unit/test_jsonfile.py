"""caovan.jsonfile.read_json: one error naming the file for each way a JSON file can be wrong."""

from __future__ import annotations

import pytest

from caovan.jsonfile import read_json


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
