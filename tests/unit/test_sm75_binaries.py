"""caovan.sm75.fatbin / caovan.sm75.binaries: the fatbin reader on ELF files built here, the verdict for a 7.5
device by NVIDIA's rules, one error naming the file for each way a file can be wrong, the findings document of a
fake vllm + torch install, and (where Triton ships cuobjdump) the reader against cuobjdump on real libraries."""

from __future__ import annotations

import json
import re
import struct
import subprocess
from collections import Counter
from pathlib import Path

import pytest

from caovan.sm75 import binaries
from caovan.sm75.binaries import inspect_binaries, inspect_binary, ptx_runs_on, sass_runs_on
from caovan.sm75.fatbin import KIND_PTX, KIND_SASS, BinaryReadError, FatbinEntry, read_fatbins

# --- building ELF files with fatbins ------------------------------------------------------------------------------


def sass(arch: int, header_size: int = 64) -> tuple[int, int, int, tuple[int, int]]:
    return (KIND_SASS, arch, header_size, (1, 8))


def ptx(arch: int, header_size: int = 64, isa: tuple[int, int] = (8, 0)) -> tuple[int, int, int, tuple[int, int]]:
    return (KIND_PTX, arch, header_size, isa)


def fatbin_entry(kind: int, arch: int, header_size: int, version: tuple[int, int], payload: bytes) -> bytes:
    """One entry as nvcc lays it out: the header (kind, header size, padded payload size, ..., minor, major, arch)
    padded to ``header_size``, then the payload padded to 8 bytes."""
    padded = payload + bytes(-len(payload) % 8)
    header = struct.pack(
        "<HHIQIIHHI", kind, 0x0101, header_size, len(padded), len(payload), 0, version[1], version[0], arch
    )
    return header + bytes(header_size - len(header)) + padded


def container(*entries: tuple[int, int, int, tuple[int, int]]) -> bytes:
    body = b"".join(fatbin_entry(*entry, payload=b"\x28\xb5\x2f\xfd" + bytes(9)) for entry in entries)
    return struct.pack("<IHHQ", 0xBA55ED50, 1, 16, len(body)) + body


def elf(sections: dict[str, bytes]) -> bytes:
    """A 64-bit little-endian ELF file of the given sections, section table right after the ELF header."""
    names = [".shstrtab", *sections]
    strtab = b"\0" + b"".join(name.encode() + b"\0" for name in names)
    contents = [strtab, *sections.values()]
    table_size = 64 * (len(contents) + 1)
    headers, data, offset, name_at = [bytes(64)], b"", 64 + table_size, 1
    for name, content in zip(names, contents, strict=True):
        headers.append(struct.pack("<IIQQQQIIQQ", name_at, 1, 0, 0, offset + len(data), len(content), 0, 0, 8, 0))
        data += content + bytes(-len(content) % 8)
        name_at += len(name) + 1
    ident = b"\x7fELF\x02\x01\x01" + bytes(9)
    head = struct.pack("<16sHHIQQQIHHHHHH", ident, 3, 62, 1, 0, 0, 64, 0, 64, 56, 0, 64, len(headers), 1)
    return head + b"".join(headers) + data


def library(path: Path, *containers: bytes, padding: bytes = b"") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    sections = {".text": b"\xc3" * 24}
    if containers:
        sections[".nv_fatbin"] = padding.join(containers)
    path.write_bytes(elf(sections))
    return path


# --- the rules ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("code", "device", "runs"),
    [(75, 75, True), (70, 75, True), (72, 75, True), (80, 75, False), (90, 75, False), (100, 75, False),
     (86, 80, False), (80, 86, True), (120, 121, True), (121, 120, False), (61, 75, False), (75, 70, False)],
)  # fmt: skip
def test_sass_runs_within_its_major_arch_at_an_equal_or_higher_minor(code, device, runs):
    assert sass_runs_on(code, device) is runs


@pytest.mark.parametrize(
    ("code", "device", "runs"), [(75, 75, True), (70, 75, True), (52, 75, True), (80, 75, False), (90, 86, False)]
)
def test_ptx_compiles_for_its_own_and_newer_archs(code, device, runs):
    assert ptx_runs_on(code, device) is runs


# --- verdicts of single binaries ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("codes", "verdict", "used", "note"),
    [
        ([sass(75), sass(80), ptx(80)], "sass", "sm_75", "sm_75 SASS"),
        ([sass(80), sass(90), sass(100, 112), ptx(80, 80)], "none", None, "SASS sm_80, sm_90, sm_100; PTX compute_80"),
        ([ptx(70)], "ptx", "compute_70", "JIT-compiles compute_70 PTX (ISA 8.0)"),
        ([sass(86), ptx(52), ptx(70)], "ptx", "compute_70", "JIT-compiles compute_70"),
        # NVIDIA's Turing Compatibility Guide 1.3: any binary that runs on Volta runs on Turing.
        ([sass(70)], "sass", "sm_70", "sm_70 SASS runs on 7.5"),
        ([sass(72), ptx(80)], "sass", "sm_72", "more than 64 KB of shared memory"),
        ([sass(61), sass(80)], "none", None, "SASS sm_61, sm_80; PTX nothing"),
    ],
    ids=["sm75-sass", "sm80-and-up", "compute70-ptx", "old-ptx-beside-sm86", "volta-sass", "xavier-sass", "pascal"],
)
def test_verdict_for_a_75_device(tmp_path, codes, verdict, used, note):
    path = library(tmp_path / "pkg" / "_C.abi3.so", container(*codes))
    entry = inspect_binary(path, tmp_path)
    assert entry["file"] == "pkg/_C.abi3.so" and entry["error"] is None and entry["has_fatbin"] is True
    assert (entry["sm75"], entry["sm75_code"]) == (verdict, used)
    assert note in entry["note"]
    assert entry["sass"] == sorted({f"sm_{a}" for k, a, *_ in codes if k == KIND_SASS}, key=lambda s: int(s[3:]))
    assert entry["ptx"] == sorted({f"compute_{a}" for k, a, *_ in codes if k == KIND_PTX}, key=lambda s: int(s[8:]))


def test_reads_every_entry_of_every_container_across_padding(tmp_path):
    first = container(sass(75), sass(80, 64), ptx(80, 80, isa=(9, 0)))
    second = container(sass(90, 112), sass(100, 112))
    path = library(tmp_path / "lib.so", first, second, padding=bytes(8))
    fatbins = read_fatbins(path)
    assert [fatbin.entries for fatbin in fatbins] == [
        (FatbinEntry(KIND_SASS, 75, (1, 8)), FatbinEntry(KIND_SASS, 80, (1, 8)), FatbinEntry(KIND_PTX, 80, (9, 0))),
        (FatbinEntry(KIND_SASS, 90, (1, 8)), FatbinEntry(KIND_SASS, 100, (1, 8))),
    ]
    assert fatbins[1].offset - fatbins[0].offset == len(first) + 8
    entry = inspect_binary(path, tmp_path)
    assert entry["sm75"] == "sass" and entry["ptx_isa"] == ["9.0"]
    assert entry["fatbins"] == {"total": 2, "sass": 1, "ptx": 0, "none": 1}
    assert "1 of its 2 fatbins have no code for 7.5" in entry["note"]


def test_a_library_without_a_fatbin_has_no_cuda_code_and_no_verdict(tmp_path):
    path = library(tmp_path / "cumem_allocator.abi3.so")
    assert read_fatbins(path) is None
    entry = inspect_binary(path, tmp_path)
    assert (entry["has_fatbin"], entry["sm75"], entry["error"]) == (False, None, None)
    assert "no CUDA device code" in entry["note"]


def _replace(data: bytes, old: bytes, new: bytes) -> bytes:
    assert data.count(old) == 1
    return data.replace(old, new)


GOOD = elf({".text": b"\xc3" * 24, ".nv_fatbin": container(sass(75), sass(80))})
FATBIN_AT = GOOD.index(struct.pack("<I", 0xBA55ED50))


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"", "empty file"),
        (b"#!/bin/sh\necho not a library\n", "not an ELF file"),
        (GOOD[:40], "truncated: the file ends inside its ELF header"),
        (GOOD[:100], "truncated: the ELF section table"),
        (GOOD[: FATBIN_AT + 40], "truncated: its .nv_fatbin section runs to offset"),
        (GOOD[:4] + b"\x01" + GOOD[5:], "not a 64-bit little-endian ELF file (class 1"),
        (_replace(GOOD, struct.pack("<I", 0xBA55ED50), struct.pack("<I", 0xDEADBEEF)), "no fatbin magic"),
        (GOOD[: FATBIN_AT + 8] + struct.pack("<Q", 1 << 20) + GOOD[FATBIN_AT + 16 :], "past the end of the .nv_fatbin"),
        (GOOD[: FATBIN_AT + 24] + struct.pack("<Q", 1 << 20) + GOOD[FATBIN_AT + 32 :], "overrun its container"),
        (GOOD[: FATBIN_AT + 44] + struct.pack("<I", 0) + GOOD[FATBIN_AT + 48 :], "arch 0"),
    ],
    ids=["empty", "script", "cut-in-elf-header", "cut-in-section-table", "cut-in-fatbin", "elf32", "bad-magic",
         "container-too-long", "entry-too-long", "arch-zero"],
)  # fmt: skip
def test_a_corrupt_file_is_one_error_naming_the_file(tmp_path, content, message):
    path = tmp_path / "vllm" / "_C.abi3.so"
    path.parent.mkdir()
    path.write_bytes(content)
    with pytest.raises(BinaryReadError) as info:
        read_fatbins(path)
    assert str(info.value).startswith(f"{path}: ") and message in str(info.value)
    entry = inspect_binary(path, tmp_path)
    assert entry["error"] == str(info.value) and entry["sm75"] is None and entry["has_fatbin"] is False


def test_the_good_file_of_the_corrupt_cases_reads(tmp_path):
    (tmp_path / "good.so").write_bytes(GOOD)
    assert inspect_binary(tmp_path / "good.so", tmp_path)["sass"] == ["sm_75", "sm_80"]


# --- the document of a whole install ------------------------------------------------------------------------------


def fake_install(root: Path, moe: bytes, c: bytes | None = None) -> tuple[Path, Path]:
    vllm, torch = root / "vllm", root / "torch"
    (vllm / "__pycache__").mkdir(parents=True)
    (vllm / "__init__.py").write_text("")
    if c is not None:
        (vllm / "_C.abi3.so").write_bytes(c)
    library(vllm / "_moe_C.abi3.so", moe)
    library(vllm / "cumem_allocator.abi3.so")
    library(vllm / "vllm_flash_attn" / "_vllm_fa2_C.abi3.so", container(sass(80), ptx(80)))
    library(vllm / "third_party" / "deep_gemm" / "_C.cpython-399-x86_64-linux-gnu.so", container(sass(90)))
    library(vllm / "__pycache__" / "stray.so", container(sass(90)))
    library(torch / "lib" / "libtorch_cuda.so", container(sass(75), sass(80)), container(sass(75), sass(90)))
    library(torch / "lib" / "libc10_cuda.so")
    library(torch / "lib" / "libtorch_cpu.so")
    library(torch / "lib" / "libtorch_cuda_linalg.so", container(sass(80)))
    return vllm, torch


def test_the_document_of_an_install_where_moe_lacks_sm75(tmp_path):
    vllm, torch = fake_install(tmp_path, moe=container(sass(80), ptx(80)), c=elf({".nv_fatbin": container(sass(75))}))
    doc = inspect_binaries(vllm_dir=vllm, torch_dir=torch, torch_arch_flags=["sm_75", "sm_80", "sm_90"])
    json.dumps(doc)
    assert doc["arch"] == "sm_75"
    assert [e["file"] for e in doc["vllm"]["extensions"]] == [
        "vllm/_C.abi3.so", "vllm/_moe_C.abi3.so", "vllm/cumem_allocator.abi3.so",
        "vllm/vllm_flash_attn/_vllm_fa2_C.abi3.so",
    ]  # fmt: skip
    assert doc["vllm"]["other_python_extensions"] == ["vllm/third_party/deep_gemm/_C.cpython-399-x86_64-linux-gnu.so"]
    assert [e["file"] for e in doc["torch"]["libraries"]] == [
        "torch/lib/libc10_cuda.so", "torch/lib/libtorch_cuda.so", "torch/lib/libtorch_cuda_linalg.so"
    ]  # fmt: skip
    assert doc["torch"]["sm75"] == "sass" and doc["torch"]["sm75_from"] == "arch_flags"
    assert doc["torch"]["libraries"][1]["fatbins"] == {"total": 2, "sass": 2, "ptx": 0, "none": 0}
    for entry in doc["vllm"]["extensions"] + doc["torch"]["libraries"]:
        assert {"file", "has_fatbin", "sass", "ptx", "sm75", "error"} <= entry.keys()
    summary = doc["summary"]
    assert summary["ready"] is False
    assert summary["missing"] == [
        "torch/lib/libtorch_cuda_linalg.so", "vllm/_moe_C.abi3.so", "vllm/vllm_flash_attn/_vllm_fa2_C.abi3.so"
    ]  # fmt: skip
    assert summary["required"] == ["vllm/_C.abi3.so", "vllm/_moe_C.abi3.so", "torch/lib/libtorch_cuda.so"]
    assert len(summary["problems"]) == 1 and summary["problems"][0].startswith("vllm/_moe_C.abi3.so: nothing a 7.5")


def test_ready_when_torch_and_the_startup_extensions_run_on_75(tmp_path):
    vllm, torch = fake_install(tmp_path, moe=container(ptx(70)), c=elf({".nv_fatbin": container(sass(70))}))
    doc = inspect_binaries(vllm_dir=vllm, torch_dir=torch, torch_arch_flags=["sm_75", "compute_80"])
    assert doc["summary"]["ready"] is True, doc["summary"]["problems"]
    assert doc["summary"]["unreadable"] == [] and doc["summary"]["problems"] == []


@pytest.mark.parametrize(
    ("c", "flags", "problem"),
    [
        (None, ["sm_75"], "vLLM's _C extension (_C or _C_stable_libtorch) was not found in"),
        (b"\x7fELF\x02", ["sm_75"], "_C.abi3.so: truncated"),
        (elf({".text": b""}), ["sm_75"], "vllm/_C.abi3.so: no CUDA device code at all"),
        (elf({".nv_fatbin": container(sass(75))}), ["sm_80", "sm_90a", "compute_86"], "torch was built for no arch"),
    ],
    ids=["no-_C", "corrupt-_C", "cpu-only-_C", "torch-without-sm75"],
)
def test_not_ready_and_why(tmp_path, c, flags, problem):
    vllm, torch = fake_install(tmp_path, moe=container(sass(75)), c=c)
    summary = inspect_binaries(vllm_dir=vllm, torch_dir=torch, torch_arch_flags=flags)["summary"]
    assert summary["ready"] is False
    assert any(problem in line for line in summary["problems"]), summary["problems"]


def test_the_stable_abi_names_of_0_33_are_vllms_c_and_moe_c(tmp_path):
    vllm, torch = fake_install(tmp_path, moe=container(sass(75)), c=None)
    (vllm / "_moe_C.abi3.so").rename(vllm / "_moe_C_stable_libtorch.abi3.so")
    library(vllm / "_C_stable_libtorch.abi3.so", container(sass(75)), container(sass(90)))
    library(vllm / "_qutlass_C.abi3.so", container(sass(100)))
    summary = inspect_binaries(vllm_dir=vllm, torch_dir=torch, torch_arch_flags=["sm_75"])["summary"]
    assert summary["required"] == [
        "vllm/_C_stable_libtorch.abi3.so", "vllm/_moe_C_stable_libtorch.abi3.so", "torch/lib/libtorch_cuda.so"
    ]  # fmt: skip
    assert summary["ready"] is True, summary["problems"]
    assert "vllm/_qutlass_C.abi3.so" in summary["missing"]


def test_torch_falls_back_to_libtorch_cuda_when_its_flags_are_unknown(tmp_path):
    vllm, torch = fake_install(tmp_path, moe=container(sass(75)), c=elf({".nv_fatbin": container(sass(75))}))
    doc = inspect_binaries(vllm_dir=vllm, torch_dir=torch, torch_arch_flags=[])
    assert (doc["torch"]["sm75"], doc["torch"]["sm75_from"]) == ("sass", "libtorch_cuda.so")


def test_no_install_is_not_ready(tmp_path, monkeypatch):
    monkeypatch.setattr(binaries, "_package_dir", lambda name: None)
    summary = inspect_binaries(torch_arch_flags=[])["summary"]
    assert summary["ready"] is False
    assert summary["problems"][:2] == ["vLLM is not installed", "torch is not installed"]


# --- the reader against NVIDIA's cuobjdump ------------------------------------------------------------------------


def _cuobjdump_counts(cuobjdump: Path, path: Path) -> Counter:
    counts: Counter = Counter()
    for option, kind in (("--list-elf", KIND_SASS), ("--list-ptx", KIND_PTX)):
        listing = subprocess.run([str(cuobjdump), option, str(path)], capture_output=True, text=True, timeout=120)
        for name in re.findall(r"\.sm_(\d+)[af]?\.(?:cubin|ptx)$", listing.stdout, re.MULTILINE):
            counts[kind, int(name)] += 1
    return counts


def test_the_reader_lists_what_cuobjdump_lists_on_real_libraries():
    triton_dir, vllm_dir, torch_dir = (binaries._package_dir(name) for name in ("triton", "vllm", "torch"))
    cuobjdump = triton_dir / "backends" / "nvidia" / "bin" / "cuobjdump" if triton_dir else None
    if cuobjdump is None or not cuobjdump.is_file():
        pytest.skip("no cuobjdump to compare with (Triton's NVIDIA backend ships it in backends/nvidia/bin)")
    candidates = [
        path
        for folder in (vllm_dir, torch_dir and torch_dir / "lib")
        if folder
        for path in binaries._shared_libraries(folder)
        if read_fatbins(path)
    ]
    if not candidates:
        pytest.skip("no vLLM or torch library with a fatbin is installed here")
    for path in sorted(candidates, key=lambda p: p.stat().st_size)[:4]:  # the smallest: cuobjdump takes ~3 s per 100 MB
        ours = Counter((entry.kind, entry.arch) for fatbin in read_fatbins(path) for entry in fatbin.entries)
        assert ours == _cuobjdump_counts(cuobjdump, path), path
