"""The sm75 tier's ``binaries`` part: which of the row's compiled binaries (vLLM's extensions, torch's CUDA
libraries) carry code a 7.5 device can run, read from their fatbins and torch's arch flags
(:mod:`caovan.sm75.binaries`), written as the findings part ``binaries``.

The test passes when the question was answered, whatever the answer: vLLM's ``_C`` and torch's ``libtorch_cuda``
found and read, torch's arch flags known, no binary left unreadable. A row whose binaries lack sm_75 code passes
with ``summary.ready`` false in its findings."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pytest

from caovan.sm75.binaries import inspect_binaries
from caovan.sm75.findings import write_part

pytestmark = pytest.mark.sm75


def _line(entry: dict) -> str:
    if entry["error"]:
        return f"  {entry['file']}: UNREADABLE {entry['error']}"
    if not entry["has_fatbin"]:
        return f"  {entry['file']}: no CUDA code"
    archs = " ".join(entry["sass"] + entry["ptx"])
    return f"  {entry['file']}: {entry['sm75']:<4} [{archs}] {entry['note']}"


def _found(entries: list[dict], folder: str, name: re.Pattern) -> list[dict]:
    return [e for e in entries if Path(e["file"]).parent.as_posix() == folder and name.match(Path(e["file"]).name)]


def test_the_rows_binaries_are_read_for_sm75():
    started = time.perf_counter()
    import torch  # noqa: F401  (imported here only to time the reading apart from torch's import)

    imported = time.perf_counter()
    doc = inspect_binaries()
    elapsed = time.perf_counter() - imported
    json.dumps(doc)  # a findings part must be JSON
    torch_doc, vllm_doc, summary = doc["torch"], doc["vllm"], doc["summary"]
    print(f"\nbinaries for sm_75 (inspect_binaries: {elapsed:.2f} s; importing torch: {imported - started:.2f} s)")
    print(f"torch {torch_doc['version']}: arch flags {' '.join(torch_doc['arch_flags']) or '-'} -> {torch_doc['sm75']}")
    print("\n".join(_line(entry) for entry in torch_doc["libraries"]))
    print(f"vllm {vllm_doc['version']}:")
    print("\n".join(_line(entry) for entry in vllm_doc["extensions"]))
    print(f"ready: {summary['ready']}; missing: {', '.join(summary['missing']) or 'none'}")
    for problem in summary["problems"]:
        print(f"  problem: {problem}")
    write_part("binaries", doc)

    # vLLM's _C is _C_stable_libtorch alone from 0.33 on; 0.21 has both, each with device code.
    core = _found(vllm_doc["extensions"], "vllm", re.compile(r"_C(_\w+)?\."))
    assert core, f"vLLM's _C extension was not found: {summary['problems']}"
    libtorch_cuda = _found(torch_doc["libraries"], "torch/lib", re.compile(r"libtorch_cuda\.so$"))
    assert libtorch_cuda, f"torch's libtorch_cuda.so was not found: {summary['problems']}"
    for entry in core + libtorch_cuda:
        assert entry["error"] is None, entry["error"]
    assert any(entry["has_fatbin"] for entry in core), f"no device code in vLLM's _C: {[e['file'] for e in core]}"
    assert libtorch_cuda[0]["has_fatbin"], "no device code in torch's libtorch_cuda.so"
    assert torch_doc["arch_flags"], f"torch's arch flags are unknown: {torch_doc.get('arch_flags_error')}"
    assert not summary["unreadable"], "binaries left unreadable:\n" + "\n".join(
        entry["error"] for entry in torch_doc["libraries"] + vllm_doc["extensions"] if entry["error"]
    )
