"""docs/compat.md generation from committed sample results: content, determinism, bad input."""

from __future__ import annotations

import errno
import json
import shutil
import tempfile
from pathlib import Path
from types import SimpleNamespace

import pytest

from caovan.matrix import MatrixError
from caovan.matrix.compat import (
    MARK_END,
    MARK_START,
    collect_results,
    lines_at_other_source,
    main,
    older_source_note,
    regenerate,
    render_block,
)

DATA = Path(__file__).parent / "data"


@pytest.fixture
def workspace(tmp_path: Path) -> tuple[Path, Path]:
    """A copy of the sample results, their matrix rows and the template doc, so tests may damage them."""
    results = tmp_path / "results"
    shutil.copytree(DATA / "results", results)
    shutil.copy(DATA / "matrix.yaml", tmp_path / "matrix.yaml")
    doc = tmp_path / "compat.md"
    shutil.copy(DATA / "compat_template.md", doc)
    # The CLI regenerates the SM75 page beside the table: the tests give it this one, never the repository's.
    (tmp_path / "sm75.md").write_text("# SM75\n\n<!-- START sm75-releases -->\n<!-- END sm75-releases -->\n")
    return results, doc


def table_lines(text: str) -> list[list[str]]:
    lines = [line for line in text.splitlines() if line.startswith("| ")]
    return [[cell.strip() for cell in line.strip("|").split("|")] for line in lines]


def test_generated_doc_matches_the_committed_expectation(workspace):
    results, doc = workspace
    assert regenerate(results, doc) is True
    assert doc.read_text(encoding="utf-8") == (DATA / "compat_expected.md").read_text("utf-8")


def test_one_line_per_row_and_runner_newest_vllm_first_with_required_columns(workspace):
    results, _ = workspace
    header, *rows = table_lines(render_block(collect_results(results)))
    assert header == [
        "vLLM", "family", "torch", "Python", "CUDA", "GPU (arch)", "runner", "plugin @source",
        "discovery", "numerics", "sm75", "kernel", "serve", "SM75 (2080 Ti)", "date",
    ]  # fmt: skip
    assert [(r[0], r[6]) for r in rows] == [
        ("0.21.0", "cpu"),
        ("0.21.0", "nvidia-geforce-rtx-2080-ti"),
        ("0.20.2", "cpu"),
    ]
    gpu_row = rows[1]
    assert gpu_row[1] == "gdn-linear-attn-v020"
    assert gpu_row[4] == "cu130"
    assert gpu_row[5] == "2 × NVIDIA GeForce RTX 2080 Ti (sm_75)"
    assert gpu_row[7].startswith("0.1.0 @")
    # The sample rows predate the numerics and sm75 tiers: "—", the row does not list them.
    assert gpu_row[8:13] == ["✅ pass", "—", "—", "✅ pass", "✅ pass"]
    assert gpu_row[13] == "➖ not checked"  # no sm75 findings on that line
    assert gpu_row[14] == "2026-11-28"
    assert rows[2][1].startswith("none [")
    assert rows[2][8].startswith("⚠️ error [")


def test_skip_and_error_reasons_become_numbered_notes(workspace):
    results, _ = workspace
    block = render_block(collect_results(results))
    assert "- [1] kernel: all 2 tests skipped: no CUDA GPU" in block
    assert "(exit 5): a tier without tests is an error" in block
    assert "Legend:" in block and "`nox -s compat`" in block


def test_running_twice_changes_nothing(workspace):
    results, doc = workspace
    regenerate(results, doc)
    first = doc.read_bytes()
    assert regenerate(results, doc) is False
    assert doc.read_bytes() == first


def test_file_order_on_disk_does_not_matter(workspace, tmp_path):
    results, doc = workspace
    regenerate(results, doc)
    shuffled = tmp_path / "shuffled"
    for path in sorted(results.glob("*/*.json"), reverse=True):
        target = shuffled / path.parent.name / path.name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(path.read_text())
    assert regenerate(shuffled, doc) is False


def test_corrupt_json_is_one_error_naming_the_file_and_the_doc_is_untouched(workspace):
    results, doc = workspace
    before = doc.read_bytes()
    bad = results / "cpu" / "vllm-0.20.2.json"
    bad.write_text('{"schema_version": 1,')
    with pytest.raises(MatrixError) as caught:
        regenerate(results, doc)
    (message,) = caught.value.messages
    assert message.startswith(f"{bad}:1:") and "malformed JSON" in message
    assert doc.read_bytes() == before
    assert sorted(p.name for p in doc.parent.iterdir() if p.is_file()) == ["compat.md", "matrix.yaml", "sm75.md"]


def test_bad_field_is_an_error_naming_file_and_field_and_the_doc_is_untouched(workspace):
    results, doc = workspace
    before = doc.read_bytes()
    path = results / "nvidia-geforce-rtx-2080-ti" / "vllm-0.21.0.json"
    data = json.loads(path.read_text())
    data["tiers"]["serve"]["outcome"] = "green"
    path.write_text(json.dumps(data))
    with pytest.raises(MatrixError) as caught:
        regenerate(results, doc)
    assert caught.value.messages == [
        f"{path}: field 'tiers.serve.outcome': 'green' is not one of pass, fail, skipped, error, not-run"
    ]
    assert doc.read_bytes() == before


def test_result_in_the_wrong_place_is_an_error(workspace):
    results, doc = workspace
    source = results / "cpu" / "vllm-0.21.0.json"
    moved = results / "nvidia-h200" / "vllm-0.21.0.json"
    moved.parent.mkdir()
    source.rename(moved)
    with pytest.raises(MatrixError, match=r"field 'runner': 'cpu' but the file lies in nvidia-h200/"):
        regenerate(results, doc)


def test_partial_result_is_refused(workspace):
    results, doc = workspace
    path = results / "cpu" / "vllm-0.21.0.json"
    data = json.loads(path.read_text())
    data["complete"] = False
    path.write_text(json.dumps(data))
    with pytest.raises(MatrixError, match="field 'complete': false"):
        regenerate(results, doc)


def test_missing_results_folder_is_a_clear_error(tmp_path):
    doc = tmp_path / "compat.md"
    shutil.copy(DATA / "compat_template.md", doc)
    with pytest.raises(MatrixError, match="results folder does not exist"):
        regenerate(tmp_path / "absent", doc)


def test_missing_doc_is_a_clear_error(workspace):
    results, doc = workspace
    doc.unlink()
    with pytest.raises(MatrixError, match="cannot read the compat doc"):
        regenerate(results, doc)
    assert not doc.exists()


def test_empty_results_folder_says_so(tmp_path):
    (tmp_path / "results").mkdir()
    assert "No results yet" in render_block(collect_results(tmp_path / "results"))


@pytest.mark.parametrize(
    "text",
    [
        "no markers at all\n",
        f"{MARK_START}\n{MARK_END}\n{MARK_START}\n{MARK_END}\n",
        f"{MARK_END}\nx\n{MARK_START}\n",
    ],
    ids=["none", "twice", "reversed"],
)
def test_doc_without_exactly_one_marker_pair_is_an_error_and_untouched(workspace, text):
    results, doc = workspace
    doc.write_text(text)
    with pytest.raises(MatrixError, match=str(doc)):
        regenerate(results, doc)
    assert doc.read_text() == text


def test_cli_exit_codes(workspace, capsys):
    results, doc = workspace
    args = ["--results", str(results), "--doc", str(doc), "--sm75-doc", str(doc.with_name("sm75.md"))]
    assert main([*args, "--check"]) == 1, "template doc is stale"
    assert main(args) == 0
    assert main([*args, "--check"]) == 0
    assert (
        main(["--results", str(results / "absent"), "--doc", str(doc), "--sm75-doc", str(doc.with_name("sm75.md"))])
        == 2
    )
    assert "compat: error:" in capsys.readouterr().err


def test_rows_run_outside_their_venv_say_so(workspace):
    results, _ = workspace
    path = next(p for p in sorted(results.rglob("*.json")) if p.parent.name != "cpu")
    doc = json.loads(path.read_text(encoding="utf-8"))
    doc["install"] = {"mode": "current-environment", "python": "/opt/torch/.venv/bin/python3"}
    path.write_text(json.dumps(doc), encoding="utf-8")
    block = render_block(collect_results(results))
    assert "ran in the host's environment (python -m caovan.matrix run-here, /opt/torch/.venv/bin/python3)" in block
    fingerprint = doc["plugin"]["source_fingerprint"][:8]
    assert any(f"@{fingerprint} [" in line for line in block.splitlines())


def test_compat_doc_that_is_not_utf8_is_one_error(workspace):
    results, doc = workspace
    doc.write_bytes(b"\xff" + doc.read_bytes())
    with pytest.raises(MatrixError, match=r"compat\.md: the compat doc is not UTF-8 text \(bad byte at offset 0\)"):
        regenerate(results, doc)


def test_result_of_a_row_no_longer_in_the_matrix_is_an_error(workspace):
    results, doc = workspace
    matrix = doc.parent / "matrix.yaml"
    matrix.write_text(matrix.read_text().split("  - id: vllm-0.21.0")[0])
    with pytest.raises(MatrixError) as caught:
        regenerate(results, doc)
    assert caught.value.messages == [
        f"{results / 'cpu' / 'vllm-0.21.0.json'}: row 'vllm-0.21.0' is not in {doc.parent}/*.yaml any more: "
        "delete the file (or put the row back and re-run it)",
        f"{results / 'nvidia-geforce-rtx-2080-ti' / 'vllm-0.21.0.json'}: row 'vllm-0.21.0' is not in "
        f"{doc.parent}/*.yaml any more: delete the file (or put the row back and re-run it)",
    ]


def test_result_recorded_for_other_pins_than_the_matrix_row_now_is_an_error(workspace, capsys):
    results, doc = workspace
    matrix = doc.parent / "matrix.yaml"
    text = matrix.read_text().replace('vllm: "0.20.2"\n    torch: "2.11.0"', 'vllm: "0.20.2"\n    torch: "2.10.0"')
    matrix.write_text(text + '    extra_requirements: ["numpy==2.3.5"]\n')
    with pytest.raises(MatrixError) as caught:
        regenerate(results, doc)
    path = results / "cpu" / "vllm-0.20.2.json"
    (first, *others) = caught.value.messages
    assert first == (
        f"{path}: matrix row 'vllm-0.20.2' changed since this result (torch '2.11.0' -> '2.10.0'): "
        're-run the row (nox -s "matrix(vllm-0.20.2)") or delete the file'
    )
    assert len(others) == 2 and all("extra_requirements [] -> ['numpy==2.3.5']" in m for m in others)
    assert (
        main(["--results", str(results), "--doc", str(doc), "--sm75-doc", str(doc.with_name("sm75.md")), "--check"])
        == 2
    )
    assert len(capsys.readouterr().err.strip().splitlines()) == 3


def test_a_row_that_overrides_a_release_pin_says_so_on_its_vllm_cell(workspace):
    results, doc = workspace
    override = {"requirement": "flashinfer-python==0.7.4", "reason": "the release pins 0.7.3, not on the index"}
    matrix = doc.parent / "matrix.yaml"
    row_field = f"    overrides: {json.dumps([override])}\n"  # JSON is YAML
    text = matrix.read_text().replace('vllm: "0.20.2"\n', 'vllm: "0.20.2"\n' + row_field, 1)
    matrix.write_text(text)
    with pytest.raises(MatrixError, match=r"overrides None -> \[\{'requirement': 'flashinfer-python==0.7.4'"):
        regenerate(results, doc)  # a result made without the override is not this row's any more
    path = results / "cpu" / "vllm-0.20.2.json"
    result = json.loads(path.read_text())
    result["row"]["overrides"] = [override]
    result["env"]["packages"]["flashinfer-python"] = "0.7.4"
    path.write_text(json.dumps(result))
    assert regenerate(results, doc) is True
    text = doc.read_text(encoding="utf-8")
    line = next(r for r in table_lines(text) if r[0].startswith("0.20.2"))
    note = line[0].split("[")[1].rstrip("]")
    expected = "flashinfer-python==0.7.4 in place of the release's own pin (uv --override; installed: 0.7.4): "
    assert f"- [{note}] {expected}{override['reason']}" in text


def test_committed_results_match_the_committed_matrix():
    repo = DATA.parents[2]
    assert collect_results(repo / "matrix" / "results", matrix_dir=repo / "matrix")


def test_result_recorded_with_other_tiers_than_the_row_now_is_an_error(workspace):
    # A tier the row lists but the result lacks would read as "the row does not list the tier" (—).
    results, doc = workspace
    matrix = doc.parent / "matrix.yaml"
    matrix.write_text(matrix.read_text().replace("tiers: [discovery, kernel, serve]", "tiers: [discovery]", 1))
    with pytest.raises(MatrixError) as caught:
        regenerate(results, doc)
    assert "tiers ['discovery', 'kernel', 'serve'] -> ['discovery']" in caught.value.messages[0]


def test_a_tier_added_to_the_row_after_a_result_shows_as_not_run_with_a_note(workspace):
    # Adding a tier must not void the results made before it (a self-hosted GPU runner's above all).
    results, doc = workspace
    matrix = doc.parent / "matrix.yaml"
    matrix.write_text(
        matrix.read_text().replace("tiers: [discovery, kernel, serve]", "tiers: [discovery, numerics, kernel, serve]")
    )
    assert regenerate(results, doc) is True
    header, *rows = table_lines(doc.read_text(encoding="utf-8"))
    numerics = header.index("numerics")
    gpu = next(r for r in rows if r[6] == "nvidia-geforce-rtx-2080-ti")
    assert gpu[numerics].startswith("➖ not run [")
    assert [gpu[i] for i in (8, 11, 12)] == ["✅ pass", "✅ pass", "✅ pass"]
    assert "numerics: added to the row after this result; re-run it" in doc.read_text(encoding="utf-8")
    # Tiers taken away or reordered are a changed row: its results must be re-made.
    matrix.write_text(
        matrix.read_text().replace("tiers: [discovery, numerics, kernel, serve]", "tiers: [serve, kernel, discovery]")
    )
    with pytest.raises(MatrixError, match="changed since this result"):
        regenerate(results, doc)


def test_an_interpreter_or_torch_other_than_the_rows_pin_is_shown(workspace):
    results, _ = workspace
    path = results / "nvidia-geforce-rtx-2080-ti" / "vllm-0.21.0.json"
    doc = json.loads(path.read_text())
    doc["env"]["python"], doc["env"]["torch"] = "3.12.3", "2.11.0+cu130"
    path.write_text(json.dumps(doc))
    rows = {r[6]: r for r in table_lines(render_block(collect_results(results)))[1:] if r[0] == "0.21.0"}
    assert rows["nvidia-geforce-rtx-2080-ti"][3] == "3.12.3 (row: 3.11)"
    assert rows["nvidia-geforce-rtx-2080-ti"][2] == "2.11.0+cu130"  # a local build tag still meets the 2.11.0 pin
    assert rows["cpu"][3].startswith("3.11.") and "row:" not in rows["cpu"][3]


def test_rows_without_a_result_are_listed_not_invisible(workspace):
    results, doc = workspace
    matrix = doc.parent / "matrix.yaml"
    new_row = '  - id: vllm-0.99.0\n    vllm: "0.99.0"\n    torch: "2.11.0"\n    python: "3.11"\n    cuda: cu130\n'
    matrix.write_text(
        matrix.read_text().rstrip("\n") + "\n\n" + new_row + "    tiers: [discovery]\n    runner_labels: [x]\n"
    )
    regenerate(results, doc)
    assert "Rows of `matrix/*.yaml` with no result yet: `vllm-0.99.0`." in doc.read_text()


def test_lines_at_other_source_than_the_checkout_are_named(workspace):
    results, _ = workspace
    path = results / "cpu" / "vllm-0.20.2.json"
    doc = json.loads(path.read_text())
    current = doc["plugin"]["source_fingerprint"]
    doc["plugin"]["source_fingerprint"] = "abcdef0123456789"
    path.write_text(json.dumps(doc))
    assert lines_at_other_source(collect_results(results), current) == ["cpu/vllm-0.20.2 @abcdef01"]


def test_older_source_note_outside_a_checkout_says_nothing(workspace, tmp_path):
    results, _ = workspace
    assert older_source_note(results, tmp_path) is None


def test_the_table_does_not_depend_on_whether_wcwidth_is_installed(workspace, monkeypatch):
    # tabulate measures cells with wcwidth when it can import it (an emoji then counts 2): the same results would
    # give another doc on a machine that has it, and `compat --check` in lint would fail there.
    import tabulate

    results, _ = workspace
    without = render_block(collect_results(results))
    wide = {"✅", "❌", "⚠", "⏭", "➖"}
    fake_wcwidth = SimpleNamespace(wcswidth=lambda text: len(text) + sum(ch in wide for ch in text))
    monkeypatch.setattr(tabulate, "wcwidth", fake_wcwidth)
    monkeypatch.setattr(tabulate, "WIDE_CHARS_MODE", True)
    assert render_block(collect_results(results)) == without


def test_a_doc_that_cannot_be_written_is_one_error_and_stays_as_it_was(workspace, monkeypatch, capsys):
    results, doc = workspace
    before = doc.read_bytes()

    def full_disk(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(tempfile, "mkstemp", full_disk)
    with pytest.raises(MatrixError) as caught:
        regenerate(results, doc)
    assert caught.value.messages == [f"{doc}: cannot write the compat doc: No space left on device (left as it was)"]
    assert doc.read_bytes() == before
    assert main(["--results", str(results), "--doc", str(doc), "--sm75-doc", str(doc.with_name("sm75.md"))]) == 2
    assert capsys.readouterr().err.splitlines() == [
        f"compat: error: {doc}: cannot write the compat doc: No space left on device (left as it was)"
    ]


def test_a_line_that_ran_with_older_source_than_the_newest_result_is_marked_stale_in_the_doc(workspace):
    # The doc is made from result files alone, so "older" is measured against the newest result among them.
    results, _ = workspace
    path = results / "cpu" / "vllm-0.20.2.json"
    doc = json.loads(path.read_text())
    doc["plugin"]["source_fingerprint"] = "abcdef0123456789"
    path.write_text(json.dumps(doc))
    block = render_block(collect_results(results))
    lines = {(r[0], r[6]): r for r in table_lines(block)[1:]}
    assert lines[("0.20.2", "cpu")][7] == "0.1.0 @abcdef01 [4]"
    assert lines[("0.21.0", "cpu")][7] == "0.1.0 @01234567"
    assert lines[("0.21.0", "nvidia-geforce-rtx-2080-ti")][7] == "0.1.0 @01234567"
    assert (
        "- [4] stale: ran with plugin source @abcdef01, older than that of the newest result "
        "(@01234567, nvidia-geforce-rtx-2080-ti/vllm-0.21.0, 2026-11-28T10:20:00Z); re-run it to refresh"
    ) in block.splitlines()


def test_a_cpu_row_whose_torch_is_a_cuda_build_does_not_read_as_a_cpu_build(workspace):
    results, doc = workspace
    matrix = doc.parent / "matrix.yaml"
    matrix.write_text(matrix.read_text().replace("cuda: cu130", "cuda: cpu"))
    for path in results.glob("*/*.json"):
        data = json.loads(path.read_text())
        data["row"]["cuda"] = "cpu"
        path.write_text(json.dumps(data))
    lines = table_lines(render_block(collect_results(results)))[1:]
    cells = {line[4] for line in lines}
    assert all(cell.startswith("cpu (torch built for CUDA ") for cell in cells), cells


def test_a_result_file_nested_deeper_than_runner_folder_is_an_error_not_ignored(workspace):
    # e.g. artifacts unpacked into a folder of their own: the doc would silently leave those runs out.
    results, doc = workspace
    nested = results / "result-vllm-0.21.0" / "cpu" / "vllm-0.21.0.json"
    nested.parent.mkdir(parents=True)
    shutil.copy(results / "cpu" / "vllm-0.21.0.json", nested)
    with pytest.raises(MatrixError) as caught:
        regenerate(results, doc)
    assert caught.value.messages == [f"{nested}: result files belong in <results>/<runner>/<row>.json"]


def test_one_sentence_per_family_oldest_first_from_the_records():
    from caovan.adapters.families import FAMILIES

    block = render_block(collect_results(DATA / "results", matrix_dir=DATA))
    lines = [line for line in block.splitlines() if line.startswith("- **F")]
    refused = " (caovan recognises it but does not serve it: its row's note says why)"
    assert lines == [
        f"- **{f.label}** `{f.family_id}` (vLLM {f.version_hint}){refused if f.refusal else ''}: {f.differs}."
        for f in reversed(FAMILIES)
    ]
    assert sum(refused in line for line in lines) == sum(f.refusal is not None for f in FAMILIES) > 0
    # A record's sentence is what the doc says: changing it changes the doc, nothing else does.
    assert all(f.differs and not f.differs.endswith(".") for f in FAMILIES)


def test_the_fixed_software_hosts_are_listed_under_the_table(workspace):
    results, doc = workspace
    hosts = results.parent / "hosts"
    hosts.mkdir()
    (hosts / "lent.yaml").write_text(
        'hosts:\n  - {runner: nvidia-geforce-rtx-2080-ti, gpu: RTX 2080 Ti, torch: "2.11.0", python: "3.11"}\n'
    )
    regenerate(results, doc)
    text = doc.read_text(encoding="utf-8")
    assert "- **nvidia-geforce-rtx-2080-ti** (RTX 2080 Ti; torch 2.11.0, Python 3.11):" in text
    assert "  - ran (their lines in the table): `vllm-0.21.0`" in text
