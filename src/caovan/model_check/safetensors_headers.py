"""Checkpoint weights: does the checkpoint carry the MTP head?  Only safetensors headers are read, never tensors."""

from __future__ import annotations

import re
import struct
from pathlib import Path
from typing import Any

from .config import ModelCheckError, parse_json_bytes, read_json_file

SAFETENSORS_INDEX_FILE_NAME = "model.safetensors.index.json"

#: Safetensors headers are a few MB even for 1000-tensor shards; refuse absurd lengths.
_MAX_SAFETENSORS_HEADER_BYTES = 256 * 1024 * 1024
_MTP_LAYER_RE = re.compile(r"^mtp\.layers\.(\d+)\.")


def _safetensors_tensor_names(path: Path) -> list[str]:
    return [name for name in _safetensors_header(path) if name != "__metadata__"]


def _safetensors_header(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as handle:
            prefix = handle.read(8)
            if len(prefix) < 8:
                raise ModelCheckError(f"{path}: not a safetensors file (shorter than 8 bytes)")
            (header_length,) = struct.unpack("<Q", prefix)
            if header_length > _MAX_SAFETENSORS_HEADER_BYTES:
                raise ModelCheckError(f"{path}: not a safetensors file (header length {header_length} bytes)")
            raw = handle.read(header_length)
    except OSError as error:
        raise ModelCheckError(f"cannot read {path}: {error.strerror or error}") from None
    if len(raw) < header_length:
        raise ModelCheckError(f"{path}: truncated safetensors header")
    header = parse_json_bytes(raw, f"{path} (safetensors header)")
    if not isinstance(header, dict):
        raise ModelCheckError(f"{path}: safetensors header must be a JSON object")
    return header


def inspect_mtp_weights(model_dir: Path) -> dict[str, Any]:
    """Count ``mtp.*`` tensors from the safetensors index (what vLLM's loader follows) or, without
    an index, from the headers of ``*.safetensors`` files. Only headers are read, never tensors."""
    index_path = model_dir / SAFETENSORS_INDEX_FILE_NAME
    if index_path.is_file():
        index = read_json_file(index_path)
        weight_map = index.get("weight_map") if isinstance(index, dict) else None
        if not isinstance(weight_map, dict):
            raise ModelCheckError(f"{index_path}: weight_map must be a JSON object")
        names: list[str] = list(weight_map)
        source = SAFETENSORS_INDEX_FILE_NAME
    else:
        shards = sorted(model_dir.glob("*.safetensors"))
        if not shards:
            return {"checked": False, "source": None, "mtp_tensors": None, "mtp_layers": None}
        names = [name for shard in shards for name in _safetensors_tensor_names(shard)]
        source = ", ".join(shard.name for shard in shards)
    mtp_names = [name for name in names if name.startswith("mtp.")]
    layers = {int(match.group(1)) for name in mtp_names if (match := _MTP_LAYER_RE.match(name))}
    return {
        "checked": True,
        "source": source,
        "mtp_tensors": len(mtp_names),
        "mtp_layers": len(layers),
    }


def safetensors_weight_bytes(model_dir: Path) -> dict[str, Any] | None:
    """Bytes of every tensor of the checkpoint (``*.safetensors`` in the folder), from each header's
    ``data_offsets``; None when the folder holds no safetensors file (dummy weights)."""
    shards = sorted(Path(model_dir).glob("*.safetensors"))
    if not shards:
        return None
    total = tensors = 0
    for shard in shards:
        for name, entry in _safetensors_header(shard).items():
            if name == "__metadata__":
                continue
            offsets = entry.get("data_offsets") if isinstance(entry, dict) else None
            if not (isinstance(offsets, list) and len(offsets) == 2 and all(type(o) is int for o in offsets)):
                raise ModelCheckError(f"{shard}: tensor {name!r} has no [begin, end] data_offsets")
            if not 0 <= offsets[0] <= offsets[1]:
                raise ModelCheckError(f"{shard}: tensor {name!r} has data_offsets {offsets} (end before begin)")
            total += offsets[1] - offsets[0]
            tensors += 1
    return {"bytes": total, "tensors": tensors, "files": [shard.name for shard in shards]}
