"""The profiles over GPU inventories x model folders, against golden output kept as data.

``data/profiles_golden.json`` holds, per case, the lines DynamicTP and AutoMem print (or the one-line refusal), as
reviewed by hand when it was written. A change to the profiles that moves any of them fails here; to take a
reviewed change, run ``CAOVAN_WRITE_GOLDEN=1 pytest tests/unit/test_profiles_golden.py`` and read the diff before
committing it.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from caovan.bench.model_folders import write_architecture_config, write_tiny_qwen3_5
from caovan.profiles import Gpu, ProfileError, read_model_facts, size_server

GOLDEN = Path(__file__).with_name("data") / "profiles_golden.json"
GIB = 1 << 30
TI, TI22 = "NVIDIA GeForce RTX 2080 Ti", "NVIDIA GeForce RTX 2080 Ti (22 GB)"


def _cards(*specs):
    """(name, total GiB, free GiB) per card, NVML index in order."""
    capability = {TI: (7, 5), TI22: (7, 5), "NVIDIA GeForce RTX 3090": (8, 6), "NVIDIA H100 80GB HBM3": (9, 0)}
    return [
        Gpu(i, name, capability[name], int(total * GIB), int(free * GIB)) for i, (name, total, free) in enumerate(specs)
    ]


INVENTORIES = {
    "1x11GB": _cards((TI, 11, 10.5)),
    "2x11GB": _cards((TI, 11, 10.5), (TI, 11, 10.5)),
    "1x22GB": _cards((TI22, 22, 21.5)),
    "2x22GB": _cards((TI22, 22, 21.5), (TI22, 22, 21.5)),
    "2x22GB-one-half-used": _cards((TI22, 22, 21.5), (TI22, 22, 11)),
    "1x24GB": _cards(("NVIDIA GeForce RTX 3090", 24, 23.5)),
    "mixed-22GB-11GB": _cards((TI22, 22, 21.5), (TI, 11, 10.5)),
    "1x80GB": _cards(("NVIDIA H100 80GB HBM3", 80, 79.2)),
}
#: (model, --max-model-len or None for the model's own) per case name.
MODELS = {
    "qwen3.6-27b-bf16-8k": ("qwen3.6-27b", 8192),
    "qwen3.6-27b-awq-262k": ("qwen3.6-27b-awq", None),
    "qwen3.6-27b-awq-32k": ("qwen3.6-27b-awq", 32768),
    "qwen3.5-no-mtp-awq-32k": ("no-mtp", 32768),
    "qwen3-next-80b-4k": ("qwen3-next-80b", 4096),
}


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("golden")
    made = {
        name: write_architecture_config(name, root / name)
        for name in ("qwen3.6-27b", "qwen3.6-27b-awq", "qwen3-next-80b")
    }
    awq = json.loads((made["qwen3.6-27b-awq"] / "config.json").read_text())
    made["no-mtp"] = write_tiny_qwen3_5(
        root / "no-mtp",
        **{k: v for k, v in awq["text_config"].items() if k in ("num_hidden_layers", "hidden_size", "vocab_size")},
        intermediate_size=17408, num_attention_heads=24, num_key_value_heads=4, head_dim=256,
        linear_num_key_heads=16, linear_num_value_heads=48, mtp_num_hidden_layers=0, torch_dtype="float16",
        max_position_embeddings=262144, quantization_config=awq["quantization_config"],
    )  # fmt: skip
    return made


def _outcome(folder, max_len, gpus):
    import dataclasses

    facts = read_model_facts(folder)
    if max_len is not None:
        facts = dataclasses.replace(facts, max_positions=max_len)
    try:
        lines = size_server(facts, gpus, kv_dtype=facts.dtype)
    except ProfileError as exc:
        return [f"refused: {str(exc).replace(str(folder), '<model>')}"]
    return [line.render() for line in lines]


def test_profiles_match_their_reviewed_golden_output(folders):
    actual = {
        f"{model} on {inventory}": _outcome(folders[folder], max_len, gpus)
        for model, (folder, max_len) in MODELS.items()
        for inventory, gpus in INVENTORIES.items()
    }
    if os.environ.get("CAOVAN_WRITE_GOLDEN") == "1":
        GOLDEN.write_text(json.dumps(actual, indent=1) + "\n")
        pytest.fail(f"wrote {GOLDEN}: review the diff, then run again without CAOVAN_WRITE_GOLDEN")
    golden = json.loads(GOLDEN.read_text())
    assert list(actual) == list(golden)
    for case, lines in actual.items():
        assert lines == golden[case], case
