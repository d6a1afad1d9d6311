"""From sm75 findings to the compat cell and docs/sm75.md: verdicts, flags, quoted refusals, missing parts."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from caovan.matrix.sm75_page import NOT_CHECKED, render_page_block, table_cell
from caovan.matrix.tiers import run_tier
from caovan.sm75.findings import FINDINGS_DIR_ENV, read_parts, write_part
from caovan.sm75.readiness import assess

FP8_REFUSAL = "FLASH_ATTN does not support fp8 KV cache on compute capability 7.5"


def _kernel(name, verdict, step="prefill", **call):
    base = {"verdict": verdict, "seen_in": ["Qwen3.6-27B TP=2, float32 state, prefill"], "configs_offered": 12}
    if verdict == "runs":
        base.update(config_index=0, config={"BV": 32, "num_warps": 4}, shared_bytes=16384, registers=96)
    return {"kernel": name, "module": "vllm.fla.ops.x", "steps": [step], "verdict": verdict, "calls": [base | call]}


FINDINGS = {
    "kernels": {
        "triton": "3.6.0",
        "kernels": [_kernel("chunk_fwd_kernel_o", "runs", spill_bytes=0), _kernel("fused_recurrent_kernel", "runs")],
        "caovan": [{"kernel": "_caovan_v", "verdict": "runs", "seen_in": "x", "shared_bytes": 512, "registers": 168}],
        "unreached": [],
    },
    "vllm": {
        "attention_backends": [
            {"name": "FLASH_ATTN", "valid": False, "reason": "compute capability 7.5 < 8.0"},
            {"name": "TRITON_ATTN", "valid": True, "reason": None},
        ],
        "kv_cache_dtypes": [
            {"dtype": "auto", "accepted_by": ["TRITON_ATTN"], "refused_by": []},
            {"dtype": "fp8", "accepted_by": [], "refused_by": [{"backend": "TRITON_ATTN", "message": FP8_REFUSAL}]},
        ],
        "flashinfer": {"attention": {"usable": False, "reason": "FlashInfer is not installed"}},
        "gdn_prefill_backend": {"chosen": "triton", "how": "gdn_prefill_backend auto on 7.5"},
        "model_dtypes": [
            {"dtype": "float16", "ok": True, "message": None},
            {"dtype": "bfloat16", "ok": False, "message": "Bfloat16 is only supported on GPUs with compute capability"},
        ],
        "quantization": [{"method": "compressed-tensors", "min_capability": 70, "ok_on_device": True, "reason": None}],
        "unanswered": [],
    },
    "binaries": {"summary": {"ready": True, "missing": ["vllm/_vllm_fa3_C.abi3.so"]}, "torch": {"arch_flags": []}},
    "cudagraph": {"with_caovan": True, "without_caovan": False, "reason": "the guard keeps prompts out"},
}


def test_fp8_refused_everywhere_reads_ready_with_fp16_kv_only_and_quotes_vllm():
    readiness = assess(FINDINGS)
    assert (readiness.status, readiness.headline) == ("limited", "fp16 KV only")
    assert f"--kv-cache-dtype fp8: {FP8_REFUSAL}" in readiness.refusals
    flags = {flag: value for flag, value, _ in readiness.flags}
    assert flags["--dtype"] == "half" and flags["--kv-cache-dtype"] == "auto"
    assert flags["--attention-backend"] == "TRITON_ATTN" and flags["GDN prefill backend"] == "triton"
    assert flags["cudagraph_mode"].startswith("FULL_AND_PIECEWISE")
    turbo3 = {flag: state for flag, _, state, _ in readiness.turbo3}
    assert turbo3["--kv-cache-dtype"] == "refused" and turbo3["--dtype"] == "ok"
    assert turbo3["--attention-backend"] == "refused" and turbo3["--quantization"] == "ok"


def test_a_kernel_that_fits_no_config_makes_the_release_cannot_with_kernel_family_and_reason():
    findings = copy.deepcopy(FINDINGS)
    reason = "none of its 12 configs fits sm_75: 12 need more shared memory than 65536 B (the least 81920 B)"
    findings["kernels"]["kernels"].append(
        _kernel("chunk_gated_delta_rule_fwd_kernel_h", "cannot", reason=reason, config_family="12 config(s) over BV")
    )
    readiness = assess(findings)
    assert readiness.status == "cannot"
    assert readiness.headline == "chunk_gated_delta_rule_fwd_kernel_h fits no config"
    assert "(12 config(s) over BV) (at Qwen3.6-27B TP=2, float32 state, prefill)" in readiness.problems[0]
    assert reason in readiness.problems[0]


def test_a_missing_part_or_an_unreached_step_is_unknown_never_ready():
    missing = {k: v for k, v in FINDINGS.items() if k != "binaries"}
    assert assess(missing).status == "unknown" and "binaries part missing" in assess(missing).problems
    unreached = copy.deepcopy(FINDINGS)
    unreached["kernels"]["unreached"] = ["Qwen3.6-27B TP=1, float32 state: RuntimeError: boom"]
    assert assess(unreached).status == "unknown"
    assert assess(None).status == "unknown"


def test_a_family_caovan_does_not_serve_reads_kernels_not_reached_with_the_refusal():
    refusal = "vLLM 0.10.2 is F1 qwen3-next-gdn-v010; caovan does not serve it: the op runs the whole layer"
    findings = copy.deepcopy(FINDINGS)
    unreached = [f"every shape: the layer rig builds served families only, and {refusal}"]
    findings["kernels"].update(kernels=[], family_refusal=refusal, unreached=unreached)
    readiness = assess(findings)
    assert (readiness.status, readiness.headline) == ("unknown", "kernels not reached (family not served)")
    assert len(readiness.problems) == 1 and refusal in readiness.problems[0]


def test_kernel_modules_outside_the_device_view_are_named_in_the_notes():
    findings = copy.deepcopy(FINDINGS)
    findings["kernels"]["not_importable"] = ["vllm.model_executor.layers.fla.ops.kda: ImportError: no sm_75"]
    findings["kernels"]["imported_before_the_device_view"] = ["vllm.model_executor.layers.fla.ops.utils"]
    notes = " ".join(assess(findings).notes)
    assert "not importable under a 7.5 device view: vllm.model_executor.layers.fla.ops.kda: ImportError" in notes
    assert "fla.ops.utils was imported before the 7.5 device view" in notes


def test_extensions_without_sm75_code_on_the_start_up_path_make_it_cannot():
    findings = copy.deepcopy(FINDINGS)
    findings["binaries"]["summary"] = {"ready": False, "missing": ["vllm/_C.abi3.so"]}
    readiness = assess(findings)
    assert readiness.status == "cannot" and "vllm/_C.abi3.so" in readiness.problems[0]


def _result(findings, vllm="0.21.0", runner="cpu", finished="2026-12-06T10:00:00Z"):
    doc = {
        "row": {"id": f"vllm-{vllm}", "vllm": vllm},
        "runner": runner,
        "finished_at": finished,
        "env": {"family": "gdn-linear-attn-v020", "torch": "2.11.0", "triton": "3.6.0"},
        "tiers": {"sm75": {"outcome": "pass", "findings": findings}} if findings is not None else {},
    }
    return SimpleNamespace(doc=doc, shown=f"matrix/results/{runner}/vllm-{vllm}.json")


def test_the_compat_cell_names_the_verdict_and_notes_vllms_words():
    notes: list[str] = []
    cell = table_cell(_result(FINDINGS).doc, lambda text: notes.append(text) or f"[{len(notes)}]")
    assert cell == "🟡 ready: fp16 KV only [1]"
    assert FP8_REFUSAL in notes[0]
    assert table_cell(_result(None).doc, lambda text: "") == NOT_CHECKED


def test_the_page_has_one_section_per_release_newest_first_and_lists_the_unchecked_rows():
    older = _result(FINDINGS, vllm="0.12.0")
    newer = _result(FINDINGS, vllm="0.21.0")
    page = render_page_block([older, newer], ["vllm-0.12.0", "vllm-0.21.0", "vllm-0.33.0"])
    assert page.index("### vLLM 0.21.0") < page.index("### vLLM 0.12.0")
    assert f"--kv-cache-dtype fp8: {FP8_REFUSAL}" in page
    assert "`chunk_fwd_kernel_o`" in page and "Rows without sm75 findings yet: `vllm-0.33.0`." in page
    assert render_page_block([older, newer], ["vllm-0.12.0"]) == render_page_block([newer, older], ["vllm-0.12.0"])


def test_parts_written_by_a_tier_become_its_findings(tmp_path: Path, monkeypatch):
    folder = tmp_path / "findings"
    monkeypatch.setenv(FINDINGS_DIR_ENV, str(folder))
    assert write_part("kernels", {"verdict": "runs"}) == folder / "kernels.json"
    (folder / "broken.json").write_text("{", encoding="utf-8")
    parts, problems = read_parts(folder)
    assert parts == {"kernels": {"verdict": "runs"}} and problems and problems[0].startswith("broken.json")
    monkeypatch.delenv(FINDINGS_DIR_ENV)
    assert write_part("kernels", {}) is None  # outside a matrix tier run nothing is written
    with pytest.raises(ValueError):
        write_part("../escape", {}, folder=folder)


def test_run_tier_records_the_parts_its_tests_wrote_and_none_left_from_before(tmp_path: Path):
    folder = tmp_path / "findings"
    folder.mkdir()
    (folder / "stale.json").write_text(json.dumps({"old": True}), encoding="utf-8")
    test = tmp_path / "test_part.py"
    test.write_text(
        "import pytest\nfrom caovan.sm75 import write_part\n\n"
        "@pytest.mark.sm75\ndef test_writes():\n    write_part('kernels', {'verdict': 'runs'})\n",
        encoding="utf-8",
    )
    import os
    import sys

    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    record = run_tier(
        sys.executable,
        "sm75",
        junit_path=tmp_path / "junit.xml",
        log_path=tmp_path / "log.txt",
        cwd=tmp_path,
        env=env,
        test_paths=[str(test), "-p", "no:cacheprovider", "-o", "markers=sm75"],
        findings_dir=folder,
    )
    assert record["outcome"] == "pass", record
    assert record["findings"] == {"kernels": {"verdict": "runs"}}


def test_every_sm75_test_lives_where_the_tier_collects_from():
    import re

    from caovan.matrix.tiers import TIER_TEST_PATHS

    tests = Path(__file__).resolve().parents[1]
    (folder,) = TIER_TEST_PATHS["sm75"]
    marked = [
        path.relative_to(tests.parent).as_posix()
        for path in tests.rglob("*.py")
        if re.search(r"^(pytestmark = pytest\.mark\.sm75\b|@pytest\.mark\.sm75\b)", path.read_text(), re.M)
    ]
    assert marked and all(path.startswith(folder + "/") for path in marked), marked


def test_a_part_is_keyed_by_every_file_of_the_package_data_included_litter_left_out(tmp_path):
    from caovan.sm75.part_cache import caovan_digest

    (tmp_path / "kernels").mkdir()
    (tmp_path / "kernels" / "entry.py").write_text("X = 1\n")
    (tmp_path / "kernels" / "launch_configs.json").write_text('{"sm75": {"num_warps": 4}}\n')
    before = caovan_digest(tmp_path)
    (tmp_path / "kernels" / "__pycache__").mkdir()
    (tmp_path / "kernels" / "__pycache__" / "entry.cpython-311.pyc").write_bytes(b"\0")
    assert caovan_digest(tmp_path) == before  # an import's bytecode is no change
    (tmp_path / "kernels" / "launch_configs.json").write_text('{"sm75": {"num_warps": 8}}\n')
    assert caovan_digest(tmp_path) != before  # a launch config is
