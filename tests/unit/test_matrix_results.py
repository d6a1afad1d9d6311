"""Fingerprints, currency (what a rerun skips), resuming from partial state, result documents."""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

import pytest
from matrix_fixtures import PROVENANCE, ROW

from caovan.matrix import RESULT_SCHEMA_VERSION, MatrixError
from caovan.matrix.fingerprint import plugin_version, source_fingerprint
from caovan.matrix.results import (
    Provenance,
    build_result,
    is_current,
    plan_row,
    validate_result,
    write_json_atomic,
    write_text_atomic,
)

ENV = {
    "python": "3.11.7",
    "gpu": "cpu",
    "gpu_arch": None,
    "vllm": "0.21.0",
    "torch": "2.11.0",
    "triton": "3.6.0",
    "torch_cuda": "13.0",
    "family": None,
    "family_reason": "probe unavailable",
}


def tier(outcome: str, reason: str | None = "why") -> dict:
    return {"outcome": outcome, "reason": reason}


def document(tiers: dict, *, provenance=PROVENANCE, complete=True, selected=None) -> dict:
    return build_result(
        ROW,
        provenance,
        runner="cpu",
        env=ENV,
        tiers=tiers,
        selected=selected if selected is not None else list(tiers),
        started_at="2026-01-01T00:00:00Z",
        finished_at="2026-01-01T00:10:00Z",
        complete=complete,
    )


ALL_DONE = {"discovery": tier("pass"), "kernel": tier("skipped"), "serve": tier("error")}


# --- fingerprints ----------------------------------------------------------------------------


def test_row_fingerprint_follows_what_is_installed_and_run_but_not_runner_labels():
    fingerprint = ROW.fingerprint()
    assert fingerprint == dataclasses.replace(ROW, origin="elsewhere.yaml:9").fingerprint()
    assert fingerprint == dataclasses.replace(ROW, runner_labels=("self-hosted",)).fingerprint()
    for change in (
        {"vllm": "0.21.1"},
        {"torch": "2.11.1"},
        {"python": "3.12"},
        {"cuda": "cu128"},
        {"tiers": ("discovery",)},
        {"torch_index": "https://example.invalid/whl"},
        {"extra_requirements": ("numpy==2.3.5",)},
    ):
        assert dataclasses.replace(ROW, **change).fingerprint() != fingerprint, change


def make_checkout(root: Path) -> Path:
    (root / "src" / "caovan").mkdir(parents=True)
    (root / "src" / "caovan" / "__init__.py").write_text('__version__ = "1.2.3"\n')
    (root / "tests").mkdir()
    (root / "tests" / "test_a.py").write_text("def test_a():\n    pass\n")
    (root / "pyproject.toml").write_text("[project]\nname = 'x'\n")
    return root


def test_source_fingerprint_covers_src_tests_and_pyproject_only(tmp_path):
    root = make_checkout(tmp_path)
    before = source_fingerprint(root)
    assert before == source_fingerprint(root)

    (root / "src" / "caovan" / "__pycache__").mkdir()
    (root / "src" / "caovan" / "__pycache__" / "x.cpython-311.pyc").write_bytes(b"\0")
    (root / "docs").mkdir()
    (root / "docs" / "compat.md").write_text("changed\n")
    (root / "tests" / ".pytest_cache").mkdir()
    (root / "tests" / ".pytest_cache" / "v").write_text("x")
    assert source_fingerprint(root) == before, "caches and files outside the sources count"

    for path, text in (
        ("src/caovan/__init__.py", '__version__ = "1.2.3"\n# edit\n'),
        ("tests/test_a.py", "def test_a():\n    assert True\n"),
        ("pyproject.toml", "[project]\nname = 'y'\n"),
        ("tests/data/new.json", "{}"),
    ):
        target = root / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
        after = source_fingerprint(root)
        assert after != before, path
        before = after


def test_plugin_version_is_read_from_the_package_init(tmp_path):
    root = make_checkout(tmp_path)
    assert plugin_version(root) == "1.2.3"
    (root / "src" / "caovan" / "__init__.py").write_text("VERSION = 1\n")
    with pytest.raises(MatrixError, match="__version__"):
        plugin_version(root)


def test_source_fingerprint_refuses_a_folder_that_is_not_a_checkout(tmp_path):
    with pytest.raises(MatrixError, match="no pyproject.toml"):
        source_fingerprint(tmp_path)


# --- currency ---------------------------------------------------------------------------------


def test_fresh_row_runs_every_tier():
    plan = plan_row(ROW, PROVENANCE, selected_tiers=None, stored=None, partial=None, redo=False)
    assert plan.to_run == ["discovery", "kernel", "serve"] and not plan.up_to_date


def test_current_complete_result_is_skipped():
    stored = document(ALL_DONE)
    assert is_current(stored, PROVENANCE)
    plan = plan_row(ROW, PROVENANCE, selected_tiers=None, stored=stored, partial=None, redo=False)
    assert plan.up_to_date and plan.to_run == []


@pytest.mark.parametrize(
    "changed",
    [
        Provenance("0000000000000000", "0.1.0", "aaaaaaaaaaaaaaaa"),
        Provenance(PROVENANCE.row_fingerprint, "0.2.0", "aaaaaaaaaaaaaaaa"),
        Provenance(PROVENANCE.row_fingerprint, "0.1.0", "bbbbbbbbbbbbbbbb"),
    ],
    ids=["row-changed", "plugin-version-changed", "plugin-source-changed"],
)
def test_any_provenance_change_reruns_everything(changed):
    stored = document(ALL_DONE, provenance=changed)
    assert not is_current(stored, PROVENANCE)
    plan = plan_row(ROW, PROVENANCE, selected_tiers=None, stored=stored, partial=None, redo=False)
    assert plan.to_run == ["discovery", "kernel", "serve"] and plan.reused == {}


def test_other_schema_version_is_not_current():
    stored = document(ALL_DONE)
    stored["schema_version"] = RESULT_SCHEMA_VERSION + 1
    assert not is_current(stored, PROVENANCE)


def test_redo_reruns_a_current_result():
    stored = document(ALL_DONE)
    plan = plan_row(ROW, PROVENANCE, selected_tiers=None, stored=stored, partial=None, redo=True)
    assert plan.to_run == ["discovery", "kernel", "serve"] and plan.reused == {}


def test_redo_of_some_tiers_keeps_the_stored_records_of_the_others():
    stored = document(ALL_DONE)
    plan = plan_row(ROW, PROVENANCE, selected_tiers=["serve"], stored=stored, partial=None, redo=True)
    assert plan.to_run == ["serve"] and not plan.up_to_date
    assert plan.reused == {"discovery": tier("pass"), "kernel": tier("skipped")}
    assert plan.not_kept == {}


def test_redo_of_some_tiers_says_why_the_stored_records_of_other_source_are_not_kept():
    other_source = Provenance(PROVENANCE.row_fingerprint, "0.1.0", "bbbbbbbbbbbbbbbb")
    stored = document(ALL_DONE, provenance=other_source)
    plan = plan_row(ROW, PROVENANCE, selected_tiers=["serve"], stored=stored, partial=None, redo=True)
    assert plan.to_run == ["serve"] and plan.reused == {}
    why = "recorded with other source (source fingerprint bbbbbbbbbbbbbbbb, this checkout's aaaaaaaaaaaaaaaa)"
    assert plan.not_kept == {"discovery": why, "kernel": why}, "serve is rerun on request: nothing to say"


def test_a_plain_run_after_an_interrupted_redo_keeps_the_stored_records_it_did_not_redo():
    stored = document(ALL_DONE)
    # `--tiers discovery,kernel --redo`, interrupted in kernel (a state from before redo kept the others).
    partial = document({"discovery": tier("fail")}, complete=False, selected=["discovery", "kernel"])
    plan = plan_row(ROW, PROVENANCE, selected_tiers=["serve"], stored=stored, partial=partial, redo=False)
    assert plan.to_run == []
    assert plan.reused == {"discovery": tier("fail"), "kernel": tier("skipped"), "serve": tier("error")}
    # Asked for again, the tier the redo did not finish is run, not taken from the older result.
    again = plan_row(ROW, PROVENANCE, selected_tiers=["kernel"], stored=stored, partial=partial, redo=False)
    assert again.to_run == ["kernel"]


HOST = {"mode": "current-environment", "python": "/usr/bin/python3"}


def test_a_run_in_another_install_reuses_and_keeps_no_stored_record():
    stored = document(ALL_DONE)  # a row venv's (no install mode)
    plan = plan_row(ROW, PROVENANCE, selected_tiers=["serve"], stored=stored, partial=None, redo=False, install=HOST)
    assert plan.to_run == ["serve"] and plan.reused == {} and not plan.up_to_date
    why = (
        "they ran in an isolated venv of the row, this run in the host's environment (/usr/bin/python3) "
        "(a result file does not mix installs)"
    )
    assert plan.not_kept == {"discovery": why, "kernel": why, "serve": why}
    partial = document({"discovery": tier("pass")}, complete=False)
    plan = plan_row(ROW, PROVENANCE, selected_tiers=None, stored=None, partial=partial, redo=False, install=HOST)
    assert plan.to_run == ["discovery", "kernel", "serve"] and not plan.resumes_partial


def test_another_interpreter_of_the_host_is_another_install():
    stored = document(ALL_DONE)
    stored["install"] = dict(HOST)
    plan = plan_row(ROW, PROVENANCE, selected_tiers=None, stored=stored, partial=None, redo=False, install=HOST)
    assert plan.up_to_date
    other = {**HOST, "python": "/opt/venv/bin/python"}
    plan = plan_row(ROW, PROVENANCE, selected_tiers=None, stored=stored, partial=None, redo=False, install=other)
    assert plan.to_run == ["discovery", "kernel", "serve"]
    assert (
        "they ran in the host's environment (/usr/bin/python3), this run in the host's environment "
        in (plan.not_kept["discovery"])
    )


def test_interrupted_run_resumes_after_the_finished_tiers():
    partial = document({"discovery": tier("pass")}, complete=False)
    assert "kernel" not in partial["tiers"], "partial state records finished tiers only"
    plan = plan_row(ROW, PROVENANCE, selected_tiers=None, stored=None, partial=partial, redo=False)
    assert plan.to_run == ["kernel", "serve"]
    assert plan.reused == {"discovery": tier("pass")}


def test_interrupted_redo_resumes_instead_of_trusting_the_older_result():
    stored = document(ALL_DONE)
    partial = document({"discovery": tier("fail")}, complete=False, selected=list(ROW.tiers))
    plan = plan_row(ROW, PROVENANCE, selected_tiers=None, stored=stored, partial=partial, redo=False)
    assert not plan.up_to_date
    assert plan.to_run == ["kernel", "serve"] and plan.reused == {"discovery": tier("fail")}


def test_stale_partial_state_is_ignored():
    stale = Provenance(PROVENANCE.row_fingerprint, "0.1.0", "cccccccccccccccc")
    partial = document({"discovery": tier("pass")}, provenance=stale, complete=False)
    plan = plan_row(ROW, PROVENANCE, selected_tiers=None, stored=None, partial=partial, redo=False)
    assert plan.to_run == ["discovery", "kernel", "serve"]


def test_tier_selection_marks_the_rest_not_run_and_a_full_run_fills_them_in():
    plan = plan_row(
        ROW,
        PROVENANCE,
        selected_tiers=["discovery", "bogus"],
        stored=None,
        partial=None,
        redo=False,
    )
    assert plan.to_run == ["discovery"] and plan.ignored == ["bogus"]
    stored = document({"discovery": tier("pass")}, selected=["discovery"])
    assert stored["tiers"]["kernel"]["outcome"] == "not-run"
    assert "not selected" in stored["tiers"]["kernel"]["reason"]

    again = plan_row(ROW, PROVENANCE, selected_tiers=["discovery"], stored=stored, partial=None, redo=False)
    assert again.up_to_date, "the selected tier is current"
    full = plan_row(ROW, PROVENANCE, selected_tiers=None, stored=stored, partial=None, redo=False)
    assert full.to_run == ["kernel", "serve"] and list(full.reused) == ["discovery"]


def test_build_result_refuses_a_runner_name_that_is_not_a_slug():
    with pytest.raises(MatrixError, match="runner name"):
        build_result(
            ROW, PROVENANCE, runner="NVIDIA H200", env=ENV, tiers={}, selected=[],
            started_at="x", finished_at="y", complete=True,
        )  # fmt: skip


# --- documents --------------------------------------------------------------------------------


def test_a_built_result_validates_and_records_provenance():
    doc = document(ALL_DONE)
    assert validate_result(doc, "r.json") == []
    assert doc["row"]["id"] == "vllm-0.21.0" and doc["runner"] == "cpu"
    assert doc["row_fingerprint"] == ROW.fingerprint()
    assert doc["plugin"] == {"version": "0.1.0", "source_fingerprint": "aaaaaaaaaaaaaaaa"}


def test_validation_names_the_file_and_field():
    doc = document(ALL_DONE)
    doc["tiers"]["kernel"]["outcome"] = "passed"
    del doc["env"]["gpu"]
    doc["plugin"]["version"] = 1
    assert validate_result(doc, "r.json") == [
        "r.json: field 'plugin.version': expected str, got int 1",
        "r.json: field 'env.gpu': missing",
        "r.json: field 'tiers.kernel.outcome': 'passed' is not one of pass, fail, skipped, error, not-run",
    ]


def test_atomic_write_replaces_whole_files_and_leaves_no_temp_files(tmp_path):
    target = tmp_path / "cpu" / "row.json"
    write_json_atomic(target, {"a": 1})
    write_json_atomic(target, {"b": 2})
    assert json.loads(target.read_text()) == {"b": 2}
    with pytest.raises(TypeError):
        write_json_atomic(target, {"c": object()})
    assert json.loads(target.read_text()) == {"b": 2}
    assert [p.name for p in target.parent.iterdir()] == ["row.json"]


@pytest.mark.parametrize("install", ["venv", ["venv"], {"mode": 1}])
def test_install_must_be_an_object_with_a_string_mode(install):
    doc = document(ALL_DONE)
    doc["install"] = install
    (message,) = validate_result(doc, "r.json")
    assert message.startswith("r.json: field 'install")


@pytest.mark.parametrize("item", [{"a": 1}, 3, "kernal"])
def test_row_tiers_items_must_be_known_tier_names(item):
    doc = document(ALL_DONE)
    doc["row"]["tiers"] = ["discovery", item]
    (message,) = validate_result(doc, "r.json")
    assert message.startswith("r.json: field 'row.tiers': item 2: ") and "is not a tier" in message


def test_atomic_write_keeps_the_mode_of_an_existing_file_and_gives_a_new_one_the_umask_mode(tmp_path):
    existing = tmp_path / "existing.json"
    existing.write_text("{}")
    existing.chmod(0o640)
    write_json_atomic(existing, {"a": 1})
    assert existing.stat().st_mode & 0o777 == 0o640
    old_umask = os.umask(0o027)
    try:
        write_json_atomic(tmp_path / "new.json", {"a": 1})
    finally:
        os.umask(old_umask)
    assert (tmp_path / "new.json").stat().st_mode & 0o777 == 0o640


def test_atomic_write_through_a_symlink_writes_its_target(tmp_path):
    target = tmp_path / "real" / "doc.md"
    target.parent.mkdir()
    target.write_text("old\n")
    link = tmp_path / "doc.md"
    link.symlink_to(target)
    write_text_atomic(link, "new\n")
    assert link.is_symlink() and target.read_text() == "new\n"
    assert sorted(p.name for p in target.parent.iterdir()) == ["doc.md"]


@pytest.mark.parametrize(
    ("dotted", "value", "expected"),
    [
        ("finished_at", "x", "field 'finished_at': 'x' is not a UTC time like 2026-01-01T00:00:00Z"),
        ("started_at", "", "field 'started_at': '' is not a UTC time"),
        ("row.vllm", "garbage", "field 'row.vllm': 'garbage' is not a PEP 440 version"),
        ("row.cuda", "", "field 'row.cuda': '' is not a CUDA/torch build tag"),
        ("plugin.source_fingerprint", "", "field 'plugin.source_fingerprint': '' is not a fingerprint"),
        ("row_fingerprint", None, "field 'row_fingerprint': expected str, got null None"),
        ("row_fingerprint", "0123456789abcdef\n", "field 'row_fingerprint': '0123456789abcdef\\n' is not a"),
        ("runner", "qa\n", "field 'runner': 'qa\\n' is not a runner name"),
        ("row.id", "vllm-0.21.0\n", "field 'row.id': 'vllm-0.21.0\\n' is not a row id"),
    ],
)
def test_fields_with_a_format_are_checked(dotted, value, expected):
    doc = document(ALL_DONE)
    *parents, name = dotted.split(".")
    node = doc
    for part in parents:
        node = node[part]
    node[name] = value
    (message,) = validate_result(doc, "r.json")
    assert message.startswith(f"r.json: {expected}")


def test_missing_object_is_one_message_not_one_per_field():
    doc = document(ALL_DONE)
    del doc["env"]
    assert validate_result(doc, "r.json") == ["r.json: field 'env': missing"]


def test_top_level_null_says_null():
    assert validate_result(None, "r.json") == ["r.json: expected a JSON object at the top, got null"]


def test_newer_schema_version_says_the_file_is_from_a_newer_caovan():
    doc = document(ALL_DONE)
    doc["schema_version"] = RESULT_SCHEMA_VERSION + 1
    (message,) = validate_result(doc, "r.json")
    assert "written by a newer caovan than this checkout" in message and "rerun" not in message


def test_a_tier_record_the_results_own_row_does_not_list_is_an_error():
    # compat would show it as run for a row that does not run it.
    doc = document(ALL_DONE)
    doc["row"]["tiers"] = ["discovery", "kernel"]
    assert validate_result(doc, "r.json") == [
        "r.json: field 'tiers.serve': the result's row does not list this tier (row.tiers: discovery, kernel)"
    ]
