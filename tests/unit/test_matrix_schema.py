"""Matrix YAML validation: every mistake is one message naming file, line, row and field."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from matrix_fixtures import VALID_ROW

from caovan.matrix import MatrixError
from caovan.matrix.__main__ import main as matrix_cli
from caovan.matrix.schema import OLDEST_PYTHON, load_matrix, matrix_files

REPO = Path(__file__).resolve().parents[2]


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


def errors_of(*paths: Path) -> list[str]:
    with pytest.raises(MatrixError) as caught:
        load_matrix(paths)
    return caught.value.messages


def test_repository_matrix_is_valid_and_has_the_default_rows():
    rows = load_matrix(matrix_files(REPO / "matrix"), base=REPO)
    by_id = {row.id: row for row in rows}
    assert {"vllm-0.20.2", "vllm-0.21.0"} <= set(by_id)
    for row_id, vllm in (("vllm-0.20.2", "0.20.2"), ("vllm-0.21.0", "0.21.0")):
        row = by_id[row_id]
        assert (row.vllm, row.torch, row.python, row.cuda) == (vllm, "2.11.0", "3.11", "cu130")
        assert row.tiers == ("discovery", "numerics", "sm75", "kernel", "serve")
        assert row.runner_labels == ("self-hosted", "linux", "sm75")
        assert row.torch_index is None
        assert row.install_pins() == [f"vllm=={vllm}", "torch==2.11.0"]


def test_optional_fields_are_read(tmp_path):
    extra = VALID_ROW + (
        "    torch_index: https://download.pytorch.org/whl/cu130\n"
        '    extra_requirements: ["flashinfer-python==0.5.2"]\n'
    )
    (row,) = load_matrix([write(tmp_path, "m.yaml", "rows:\n" + extra)])
    assert row.torch_index == "https://download.pytorch.org/whl/cu130"
    assert row.install_pins()[-1] == "flashinfer-python==0.5.2"
    assert row.origin.endswith("m.yaml:2")


def test_malformed_yaml_is_one_message_with_file_line_and_column(tmp_path):
    path = write(tmp_path, "broken.yaml", "rows:\n  - id: x\n   vllm: [\n")
    (message,) = errors_of(path)
    assert message.startswith(f"{path}:3:")
    assert "malformed YAML" in message


def test_unknown_field_names_file_row_and_field(tmp_path):
    path = write(tmp_path, "m.yaml", "rows:\n" + VALID_ROW + "    colour: blue\n")
    (message,) = errors_of(path)
    assert message.startswith(f"{path}:9: row 1 (id 'vllm-0.21.0'): field 'colour': unknown field")


def test_missing_field_names_the_field(tmp_path):
    text = "rows:\n" + VALID_ROW.replace('    torch: "2.11.0"\n', "")
    (message,) = errors_of(write(tmp_path, "m.yaml", text))
    assert "row 1 (id 'vllm-0.21.0'): missing field 'torch'" in message


@pytest.mark.parametrize(
    ("replace", "by", "expected"),
    [
        ('vllm: "0.21.0"', "vllm: 0.21", "field 'vllm': expected a string, got number 0.21"),
        ('python: "3.11"', "python: 3.11", "field 'python': expected a string, got number 3.11"),
        ("tiers: [discovery, kernel, serve]", "tiers: discovery", "field 'tiers': expected a list"),
        ("cuda: cu130", "cuda: 130", "field 'cuda': expected a string, got integer 130"),
        (
            "tiers: [discovery, kernel, serve]",
            "tiers: [discovery, kernal]",
            "unknown tier 'kernal'",
        ),
        ('vllm: "0.21.0"', 'vllm: ">=0.21"', "field 'vllm': '>=0.21' is not an exact version"),
        ("id: vllm-0.21.0", "id: Vllm 0.21", "field 'id': 'Vllm 0.21' is not a row id"),
        # A regex "$" also matches before a final newline: such an id would name a session and a file.
        ("id: vllm-0.21.0", 'id: "vllm-0.21.0\\n"', "field 'id': 'vllm-0.21.0\\n' is not a row id"),
        ("cuda: cu130", 'cuda: "cu130\\n"', "field 'cuda': 'cu130\\n' is not a CUDA/torch build tag"),
        ('python: "3.11"', 'python: "3.11\\n"', "field 'python': '3.11\\n' is not a Python version"),
        ("runner_labels: [self-hosted", 'runner_labels: ["self-hosted\\n"', "'self-hosted\\n' is not a runner label"),
    ],
)
def test_wrong_type_or_value_names_the_field(tmp_path, replace, by, expected):
    text = "rows:\n" + VALID_ROW.replace(replace, by)
    (message,) = errors_of(write(tmp_path, "m.yaml", text))
    assert expected in message
    assert message.startswith(f"{tmp_path / 'm.yaml'}:")


def test_float_version_error_says_to_quote_it(tmp_path):
    text = "rows:\n" + VALID_ROW.replace('torch: "2.11.0"', "torch: 2.11")
    (message,) = errors_of(write(tmp_path, "m.yaml", text))
    assert 'quote versions in YAML: torch: "2.11"' in message


def test_duplicate_row_id_across_files_names_both_places(tmp_path):
    first = write(tmp_path, "a.yaml", "rows:\n" + VALID_ROW)
    second = write(tmp_path, "b.yaml", "rows:\n" + VALID_ROW)
    (message,) = errors_of(first, second)
    assert message == (f"{second}:2: row id 'vllm-0.21.0' is defined twice (first at {first}:2)")


def test_duplicate_key_inside_a_row_is_reported(tmp_path):
    path = write(tmp_path, "m.yaml", "rows:\n" + VALID_ROW + '    vllm: "0.20.2"\n')
    (message,) = errors_of(path)
    assert "field 'vllm' is given twice (first at line 3)" in message


def test_top_level_must_be_a_mapping_with_rows_only(tmp_path):
    (message,) = errors_of(write(tmp_path, "list.yaml", "- id: x\n"))
    assert "expected a mapping with a 'rows' list" in message
    path = write(tmp_path, "extra.yaml", "rows:\n" + VALID_ROW + "defaults: {}\n")
    (message,) = errors_of(path)
    assert message == f"{path}:9: unknown top-level field 'defaults' (only 'rows')"


def test_every_problem_is_reported_not_just_the_first(tmp_path):
    text = "rows:\n" + VALID_ROW.replace("cuda: cu130", "cuda: 130") + "    colour: blue\n"
    messages = errors_of(write(tmp_path, "m.yaml", text))
    assert len(messages) == 2


def test_validate_cli_exits_2_with_one_line_per_problem(tmp_path, capsys):
    path = write(tmp_path, "m.yaml", "rows:\n" + VALID_ROW + "    colour: blue\n")
    assert matrix_cli(["validate", str(path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("matrix: error: ") and "'colour'" in err[0]


def test_validate_cli_accepts_the_repository_matrix(capsys, monkeypatch):
    monkeypatch.chdir(REPO)
    assert matrix_cli(["validate"]) == 0
    assert "are valid" in capsys.readouterr().out


def test_empty_matrix_folder_is_an_error(tmp_path):
    with pytest.raises(MatrixError, match="no matrix files"):
        matrix_files(tmp_path)


def test_duplicate_rows_key_is_one_error_not_a_crash(tmp_path, capsys):
    path = write(
        tmp_path, "m.yaml", "rows:\n" + VALID_ROW + "rows:\n" + VALID_ROW + VALID_ROW.replace("0.21.0", "0.20.2")
    )
    messages = errors_of(path)
    assert messages == [f"{path}:9: field 'rows' is given twice (first at line 1)"]
    assert matrix_cli(["validate", str(path)]) == 2
    assert "is given twice" in capsys.readouterr().err


def test_matrix_file_that_is_not_utf8_is_one_error(tmp_path):
    path = tmp_path / "extra.yaml"
    path.write_bytes(b"\xff\xfe")
    assert errors_of(path) == [f"{path}: not UTF-8 text (bad byte at offset 0)"]


def make_checkout(root: Path) -> None:
    """What run-here looks for in its repository root, beside matrix/."""
    (root / "pyproject.toml").write_text("[project]\nname = 'x'\n")
    (root / "src" / "caovan").mkdir(parents=True)
    (root / "src" / "caovan" / "__init__.py").write_text('__version__ = "0.1.0"\n')


def test_run_here_refuses_a_row_without_any_selected_tier_and_writes_nothing(tmp_path, monkeypatch, capsys):
    make_checkout(tmp_path)
    (tmp_path / "matrix").mkdir()
    write(tmp_path / "matrix", "m.yaml", "rows:\n" + VALID_ROW.replace("[discovery, kernel, serve]", "[discovery]"))
    monkeypatch.chdir(tmp_path)
    assert matrix_cli(["run-here", "vllm-0.21.0", "--runner", "cpu", "--tiers", "kernel"]) == 2
    err = capsys.readouterr().err
    assert "row vllm-0.21.0 has none of the selected tiers (kernel;" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["matrix", "pyproject.toml", "src"]
    assert sorted(p.name for p in (tmp_path / "matrix").iterdir()) == ["m.yaml"]


def test_options_may_come_before_the_positionals(tmp_path, monkeypatch, capsys):
    make_checkout(tmp_path)
    (tmp_path / "matrix").mkdir()
    path = write(tmp_path / "matrix", "m.yaml", "rows:\n" + VALID_ROW.replace("[discovery, kernel, serve]", "[serve]"))
    monkeypatch.chdir(tmp_path)
    assert matrix_cli(["validate", "--matrix-dir", "matrix", str(path)]) == 0
    assert matrix_cli(["--matrix-dir", "matrix", "validate"]) == 0
    assert "1 rows in 1 file(s) are valid" in capsys.readouterr().out
    # The row has no kernel tier: refused after the row id and the options were all read.
    assert matrix_cli(["run-here", "--redo", "--tiers", "kernel", "vllm-0.21.0", "--runner", "cpu"]) == 2
    assert "row vllm-0.21.0 has none of the selected tiers (kernel;" in capsys.readouterr().err


def test_run_here_has_no_wheelhouse_and_ignores_caovan_wheelhouse(tmp_path, monkeypatch, capsys):
    # run-here installs nothing: a wheelhouse option would be a promise it does not keep.
    make_checkout(tmp_path)
    (tmp_path / "matrix").mkdir()
    write(tmp_path / "matrix", "m.yaml", "rows:\n" + VALID_ROW.replace("[discovery, kernel, serve]", "[discovery]"))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("CAOVAN_WHEELHOUSE", str(tmp_path / "nope"))
    # Reaches the tier check (not a "wheelhouse ... does not exist" error over a variable run-here never uses).
    assert matrix_cli(["run-here", "vllm-0.21.0", "--runner", "cpu", "--tiers", "kernel"]) == 2
    assert "has none of the selected tiers" in capsys.readouterr().err
    with pytest.raises(SystemExit) as caught:
        matrix_cli(["run-here", "vllm-0.21.0", "--wheelhouse", str(tmp_path)])
    assert caught.value.code == 2
    assert "unrecognized arguments: --wheelhouse" in capsys.readouterr().err


def test_run_here_options_are_refused_by_validate(capsys):
    with pytest.raises(SystemExit) as caught:
        matrix_cli(["validate", "--redo"])
    assert caught.value.code == 2
    assert "--redo is an option of run-here, not of validate" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("replace", "by", "expected"),
    [
        ('python: "3.11"', "python: 3.10", 'quote it in YAML: python: "3.10"'),
        ('torch: "2.11.0"', "torch: 2.10", 'quote versions in YAML: torch: "2.10"'),
    ],
)
def test_quote_hint_shows_the_number_as_written(tmp_path, replace, by, expected):
    (message,) = errors_of(write(tmp_path, "m.yaml", "rows:\n" + VALID_ROW.replace(replace, by)))
    assert message.endswith(expected + ")")


@pytest.mark.parametrize(
    ("replace", "by", "expected"),
    [
        ('python: "3.11"', 'python: "3.9"', "field 'python': '3.9' is not a Python caovan supports (3.10 to 3.15)"),
        ('python: "3.11"', 'python: "3.99"', "field 'python': '3.99' is not a Python caovan supports"),
        ('vllm: "0.21.0"', 'vllm: "v0.21"', "field 'vllm': 'v0.21' is not written as PEP 440 writes it: '0.21'"),
        ('vllm: "0.21.0"', 'vllm: "0.21.0 "', "field 'vllm': '0.21.0 ' is not written as PEP 440 writes it: '0.21.0'"),
        ('vllm: "0.21.0"', 'vllm: "0.21"', "field 'vllm': '0.21' is not an exact version: write every part, as pip"),
        ('vllm: "0.21.0"', 'vllm: "0.21"', 'as pip reports it ("0.21.0")'),
        (
            'torch: "2.11.0"',
            'torch: "2"',
            "field 'torch': '2' is not an exact version: write every part, as pip reports it (\"2.0.0\")",
        ),
    ],
)
def test_python_range_and_pep440_versions(tmp_path, replace, by, expected):
    (message,) = errors_of(write(tmp_path, "m.yaml", "rows:\n" + VALID_ROW.replace(replace, by)))
    assert expected in message


def test_python_range_follows_pyproject_requires_python():
    pyproject = (REPO / "pyproject.toml").read_text(encoding="utf-8")
    assert f'requires-python = ">={".".join(map(str, OLDEST_PYTHON))}"' in pyproject


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("rows: []\n", "m.yaml:1: field 'rows': no rows (a matrix file lists at least one)"),
        ("rows:\n", "m.yaml:1: field 'rows': expected a list of rows, got null"),
    ],
)
def test_a_matrix_file_without_rows_is_an_error(tmp_path, text, expected):
    (message,) = errors_of(write(tmp_path, "m.yaml", text))
    assert message == f"{tmp_path}/{expected}"


def test_extra_requirements_may_not_pin_vllm_or_torch_again(tmp_path):
    # The row's vllm/torch fields are what the table shows; a second pin would contradict or silently repeat them.
    path = write(
        tmp_path, "m.yaml", "rows:\n" + VALID_ROW + '    extra_requirements: ["vllm==0.20.2", "Torch>=2", "numpy<3"]\n'
    )
    messages = errors_of(path)
    assert len(messages) == 2
    assert "field 'extra_requirements': 'vllm==0.20.2': vllm is pinned by the row's own field" in messages[0]
    assert "'Torch>=2': torch is pinned by the row's own field" in messages[1]


OVERRIDE = """\
    overrides:
      - requirement: "flashinfer-python==0.7.4"
        reason: "the release pins 0.7.3, which the index does not serve"
"""


def test_an_override_replaces_a_release_pin_and_is_part_of_the_row_spec(tmp_path):
    (row,) = load_matrix([write(tmp_path, "m.yaml", "rows:\n" + VALID_ROW + OVERRIDE)])
    assert row.override_pins() == ["flashinfer-python==0.7.4"]
    assert row.spec()["overrides"] == [
        {"requirement": "flashinfer-python==0.7.4", "reason": "the release pins 0.7.3, which the index does not serve"}
    ]
    (plain,) = load_matrix([write(tmp_path, "p.yaml", "rows:\n" + VALID_ROW)])
    # A row without overrides keeps the spec (and fingerprint) it had before the field existed.
    assert "overrides" not in plain.spec() and plain.fingerprint() != row.fingerprint()


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        (
            '    overrides: ["flashinfer-python==0.7.4"]\n',
            "item 1: expected a mapping with exactly requirement, reason",
        ),
        ("    overrides: []\n", "expected a non-empty list of {requirement, reason} mappings"),
        (OVERRIDE.replace("==0.7.4", ">=0.7.4"), "item 1: 'flashinfer-python>=0.7.4' is not an exact pin"),
        (OVERRIDE.replace("flashinfer-python==0.7.4", "torch==2.14.0"), "torch is pinned by the row's own field"),
        (OVERRIDE.replace('"the release pins 0.7.3, which the index does not serve"', '" "'), "reason: say why"),
        (
            OVERRIDE + '      - {requirement: "FlashInfer_Python==0.7.2", reason: x}\n',
            "flashinfer-python is overridden twice",
        ),
        (
            '    extra_requirements: ["flashinfer-python==0.5.2"]\n' + OVERRIDE,
            "flashinfer-python is also in extra_requirements",
        ),
    ],
)
def test_a_bad_override_is_one_message_naming_the_field_and_item(tmp_path, overrides, expected):
    (message,) = errors_of(write(tmp_path, "m.yaml", "rows:\n" + VALID_ROW + overrides))
    assert "field 'overrides': " in message and expected in message


def test_validate_outside_the_repository_names_the_folder_it_looked_in(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert matrix_cli(["validate"]) == 2
    err = capsys.readouterr().err
    assert err == (
        f"matrix: error: no matrix folder at {tmp_path / 'matrix'}: run from the repository root, or name the "
        "folder (--matrix-dir) or the matrix files\n"
    )
