"""Reading the device code of an ELF shared library: the fatbin containers of its ``.nv_fatbin`` section.

A CUDA build embeds one fatbin container per compiled source (magic ``0xBA55ED50``, a 16-byte header, then entries
each with its own header: kind PTX or ELF cubin, payload size, code version and target arch; payloads may be
compressed). Only the ELF section table and those headers are read, with ``pread``: a few KB of a file that may be
hundreds of MB long, no payload read or decompressed. Only 64-bit little-endian ELF files, the kind CUDA wheels
ship for Linux, are read; anything else is a :class:`BinaryReadError` naming the file.

The format is NVIDIA's and undocumented; the field layout below is the one cuobjdump reads (checked against
``cuobjdump --list-elf --list-ptx`` on vLLM's and torch's libraries, tests/unit/test_sm75_binaries.py).
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

FATBIN_SECTION = ".nv_fatbin"
FATBIN_MAGIC = 0xBA55ED50
#: Entry kinds of a fatbin container (CUDA's fatbinary.h: FATBIN_2_PTX, FATBIN_2_ELF).
KIND_PTX = 1
KIND_SASS = 2

# ELF64 header: e_ident, e_type, e_machine, e_version, e_entry, e_phoff, e_shoff, e_flags, e_ehsize, e_phentsize,
# e_phnum, e_shentsize, e_shnum, e_shstrndx.
_ELF_HEADER = struct.Struct("<16sHHIQQQIHHHHHH")
# ELF64 section header: sh_name, sh_type, sh_flags, sh_addr, sh_offset, sh_size, sh_link, sh_info, ...
_SECTION_HEADER = struct.Struct("<IIQQQQIIQQ")
_SHT_NOBITS = 8
# Fatbin container header: magic, version, size of this header, size of the entries that follow it.
_CONTAINER_HEADER = struct.Struct("<IHHQ")
# The leading fields of a fatbin entry header: kind, (flags of the format), size of this header (64, 80 or 112
# bytes in CUDA 12/13 builds), size of the payload after it, compressed size, (unknown), version minor, version
# major (the cubin's code version, or the PTX ISA version), arch (75 for sm_75 / compute_75).
_ENTRY_HEADER = struct.Struct("<HHIQIIHHI")
# Bounds that keep a corrupt length field from sending the reader through gigabytes of nonsense.
_MAX_SECTIONS = 1 << 16
_MAX_SECTION_NAMES = 1 << 24


class BinaryReadError(ValueError):
    """A file that could not be read as a 64-bit ELF file with well-formed fatbins; the message starts with its path."""


@dataclass(frozen=True)
class FatbinEntry:
    """One code object of a fatbin container: SASS or PTX for one arch, ``version`` (major, minor) being the
    cubin's code version or the PTX ISA version."""

    kind: int
    arch: int
    version: tuple[int, int]

    @property
    def name(self) -> str:
        """``sm_75`` for SASS, ``compute_75`` for PTX (cuobjdump's names)."""
        return {KIND_SASS: "sm", KIND_PTX: "compute"}.get(self.kind, f"kind{self.kind}") + f"_{self.arch}"


@dataclass(frozen=True)
class Fatbin:
    """One fatbin container (the device code of one compiled source), at ``offset`` in its file."""

    offset: int
    entries: tuple[FatbinEntry, ...]


def _read_at(fd: int, path: Path, offset: int, size: int, what: str) -> bytes:
    data = os.pread(fd, size, offset)
    if len(data) != size:
        raise BinaryReadError(
            f"{path}: truncated: the {what} at offset {offset:#x} needs {size} bytes, the file ends at "
            f"{offset + len(data):#x}"
        )
    return data


def _section_headers(fd: int, path: Path) -> tuple[list[tuple[Any, ...]], int]:
    """The ELF file's section headers and the index of the one holding the section names."""
    head = os.pread(fd, _ELF_HEADER.size, 0)
    if not head:
        raise BinaryReadError(f"{path}: empty file")
    if head[:4] != b"\x7fELF":
        raise BinaryReadError(f"{path}: not an ELF file")
    if len(head) < _ELF_HEADER.size:
        raise BinaryReadError(f"{path}: truncated: the file ends inside its ELF header")
    if head[4] != 2 or head[5] != 1:
        raise BinaryReadError(f"{path}: not a 64-bit little-endian ELF file (class {head[4]}, data {head[5]})")
    fields = _ELF_HEADER.unpack(head)
    shoff, shentsize, shnum, shstrndx = fields[6], fields[11], fields[12], fields[13]
    if shoff == 0:
        raise BinaryReadError(f"{path}: the ELF file has no section table, so its fatbins cannot be found")
    if shentsize < _SECTION_HEADER.size:
        raise BinaryReadError(f"{path}: corrupt ELF header: section header size {shentsize}")
    if shnum == 0 or shstrndx == 0xFFFF:
        # Extended numbering (gABI): more than 0xff00 sections keep the count and the name index in section 0.
        first = _SECTION_HEADER.unpack(_read_at(fd, path, shoff, _SECTION_HEADER.size, "ELF section table"))
        shnum = shnum or first[5]
        shstrndx = first[6] if shstrndx == 0xFFFF else shstrndx
    if not 0 < shnum <= _MAX_SECTIONS or shstrndx >= shnum:
        raise BinaryReadError(f"{path}: corrupt ELF header: {shnum} sections, names in section {shstrndx}")
    table = _read_at(fd, path, shoff, shnum * shentsize, "ELF section table")
    return [_SECTION_HEADER.unpack_from(table, index * shentsize) for index in range(shnum)], shstrndx


def _find_section(fd: int, path: Path, wanted: str) -> tuple[int, int] | None:
    """(file offset, size) of the section named ``wanted``; None if the file has none."""
    headers, names_index = _section_headers(fd, path)
    names_header = headers[names_index]
    if names_header[5] > _MAX_SECTION_NAMES:
        raise BinaryReadError(f"{path}: corrupt ELF section name table ({names_header[5]} bytes)")
    names = _read_at(fd, path, names_header[4], names_header[5], "ELF section name table")
    target = wanted.encode() + b"\0"
    for header in headers:
        name_at = header[0]
        if names[name_at : name_at + len(target)] != target:
            continue
        if header[1] == _SHT_NOBITS:
            raise BinaryReadError(f"{path}: its {wanted} section holds no data in this file")
        offset, size = header[4], header[5]
        if offset + size > os.fstat(fd).st_size:
            raise BinaryReadError(
                f"{path}: truncated: its {wanted} section runs to offset {offset + size:#x}, past the end of the file"
            )
        return offset, size
    return None


def _read_container(fd: int, path: Path, at: int, section_end: int) -> tuple[Fatbin, int]:
    """The container at ``at`` and the offset just past it."""
    magic, _version, header_size, body_size = _CONTAINER_HEADER.unpack(
        _read_at(fd, path, at, _CONTAINER_HEADER.size, "fatbin header")
    )
    if magic != FATBIN_MAGIC:
        raise BinaryReadError(f"{path}: corrupt fatbin: no fatbin magic {FATBIN_MAGIC:#x} at offset {at:#x}")
    end = at + header_size + body_size
    if header_size < _CONTAINER_HEADER.size or end > section_end:
        raise BinaryReadError(
            f"{path}: corrupt fatbin at offset {at:#x}: it claims {header_size + body_size} bytes, past the end of "
            f"the {FATBIN_SECTION} section"
        )
    entries = []
    entry_at = at + header_size
    while entry_at < end:
        if end - entry_at < _ENTRY_HEADER.size:
            raise BinaryReadError(f"{path}: corrupt fatbin at offset {at:#x}: a partial entry at {entry_at:#x}")
        kind, _, entry_size, payload_size, _, _, minor, major, arch = _ENTRY_HEADER.unpack(
            _read_at(fd, path, entry_at, _ENTRY_HEADER.size, "fatbin entry header")
        )
        next_at = entry_at + entry_size + payload_size
        if entry_size < _ENTRY_HEADER.size or next_at > end:
            raise BinaryReadError(
                f"{path}: corrupt fatbin entry at offset {entry_at:#x}: header {entry_size} + payload "
                f"{payload_size} bytes overrun its container"
            )
        if kind in (KIND_PTX, KIND_SASS) and not 10 <= arch < 1000:
            raise BinaryReadError(f"{path}: corrupt fatbin entry at offset {entry_at:#x}: arch {arch}")
        entries.append(FatbinEntry(kind, arch, (major, minor)))
        entry_at = next_at
    return Fatbin(at, tuple(entries)), end


def read_fatbins(path: str | os.PathLike[str]) -> list[Fatbin] | None:
    """Every fatbin container of an ELF file's ``.nv_fatbin`` section; None when it has no such section (no CUDA
    device code). Raises :class:`BinaryReadError`, naming the file, for anything not well formed."""
    path = Path(path)
    fd = os.open(path, os.O_RDONLY)
    try:
        section = _find_section(fd, path, FATBIN_SECTION)
        if section is None:
            return None
        at, end = section[0], section[0] + section[1]
        containers = []
        while at < end:
            # A linker that aligns the containers fills the gaps with zeros: skipped, whatever their length.
            word = _read_at(fd, path, at, min(8, end - at), "fatbin header")
            zeros = len(word) - len(word.lstrip(b"\0"))
            if zeros:
                at += zeros
                continue
            container, at = _read_container(fd, path, at, end)
            containers.append(container)
        return containers
    finally:
        os.close(fd)
