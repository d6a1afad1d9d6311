"""The profiles over GPU inventories x model folders, against golden output kept as data.

``data/profiles_golden.json`` holds, per case, the lines Elastic-KV, DynamicTP and AutoMem print and the KV
prediction (or the one-line refusal), as reviewed by hand when it was written, with ``caovan serve``'s AutoSpec
default (MTP 3 where the model has MTP layers) and the KV-cache dtypes vLLM 0.21.0 takes per capability. A change
to the profiles that moves any of them fails here; to take a reviewed change, run
``CAOVAN_WRITE_GOLDEN=1 pytest tests/unit/test_profiles_golden.py`` and read the diff before committing it.
The golden figures are the profiles' arithmetic; the installed vLLM's own planning functions must give the same
(``test_vllm_own_kv_planning_agrees_with_the_golden_arithmetic``), and docs/usage.md quotes one case verbatim.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from caovan.bench.model_folders import write_architecture_config, write_tiny_qwen3_5
from caovan.profiles import Gpu, ProfileError, ServeRequest, read_model_facts, size_server
from caovan.profiles.elastic_kv import kv_room
from caovan.profiles.kv_prediction import predict_kv_cache
from caovan.profiles.memory import weights_per_gpu
from caovan.profiles.modes import MODES

GOLDEN = Path(__file__).with_name("data") / "profiles_golden.json"
USAGE = Path(__file__).parents[2] / "docs" / "usage.md"
#: The KV-cache dtypes vLLM 0.21.0's own selection takes per capability, as caovan.sm75.vllm_decisions answers
#: (``test_the_kv_dtypes_the_golden_data_assumes_are_what_vllm_takes`` asks the installed vLLM again).
KV_ACCEPTED = {cap: ("auto", "fp8", "fp8_e4m3", "fp8_e5m2") for cap in ((7, 5), (8, 6), (9, 0))}
#: caovan serve's AutoSpec depth for a model with MTP layers.
AUTOSPEC_DEPTH = 3
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
#: (model, --max-model-len or None for the model's own, the user's --kv-cache-dtype or None) per case name.
MODELS = {
    "qwen3.6-27b-bf16-8k": ("qwen3.6-27b", 8192, None),
    "qwen3.6-27b-awq-262k": ("qwen3.6-27b-awq", None, None),
    "qwen3.6-27b-awq-262k-kv-auto": ("qwen3.6-27b-awq", None, "auto"),
    "qwen3.6-27b-awq-32k": ("qwen3.6-27b-awq", 32768, None),
    "qwen3.5-no-mtp-awq-32k": ("no-mtp", 32768, None),
    "qwen3-next-80b-4k": ("qwen3-next-80b", 4096, None),
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


def _sizing(folder, max_len, kv_dtype, gpus):
    facts = read_model_facts(folder)
    depth = AUTOSPEC_DEPTH if facts.mtp_layers else 0
    request = ServeRequest(
        kv_dtype=kv_dtype,
        max_model_len=max_len,
        speculative_tokens=depth,
        drafter_layers=facts.mtp_layers if depth else 0,
    )
    accepted = KV_ACCEPTED[min(gpu.capability for gpu in gpus)]
    return facts, size_server(facts, gpus, kv_accepted=accepted, request=request)


def _outcome(folder, max_len, kv_dtype, gpus):
    try:
        _, sizing = _sizing(folder, max_len, kv_dtype, gpus)
    except ProfileError as exc:
        return [f"refused: {str(exc).replace(str(folder), '<model>')}"]
    return [line.render() for line in sizing.lines] + [sizing.prediction.render()]


def test_profiles_match_their_reviewed_golden_output(folders):
    actual = {
        f"{model} on {inventory}": _outcome(folders[folder], max_len, kv_dtype, gpus)
        for model, (folder, max_len, kv_dtype) in MODELS.items()
        for inventory, gpus in INVENTORIES.items()
    }
    if os.environ.get("CAOVAN_WRITE_GOLDEN") == "1":
        GOLDEN.write_text(json.dumps(actual, indent=1) + "\n")
        pytest.fail(f"wrote {GOLDEN}: review the diff, then run again without CAOVAN_WRITE_GOLDEN")
    golden = json.loads(GOLDEN.read_text())
    assert list(actual) == list(golden)
    for case, lines in actual.items():
        assert lines == golden[case], case


def test_vllm_own_kv_planning_agrees_with_the_golden_arithmetic(folders):
    """vLLM's get_kv_cache_configs, run on the profiles' layer specs, gives the golden cases' blocks and tokens."""
    from caovan.profiles.vllm_kv_cache import vllm_kv_report

    checked = 0
    for model, (folder, max_len, kv_dtype) in MODELS.items():
        for inventory, gpus in INVENTORIES.items():
            try:
                facts, sizing = _sizing(folders[folder], max_len, kv_dtype, gpus)
            except ProfileError:
                continue
            prediction = sizing.prediction
            asked = predict_kv_cache(facts, prediction.layout, prediction.context, prediction.room, vllm_kv_report)
            # Where vLLM's functions could not be asked, the source says why: a failure here, never a skip.
            assert asked.source.startswith("figures from vLLM"), f"{model} on {inventory}: {asked.source}"
            assert (asked.num_blocks, asked.tokens) == (prediction.num_blocks, prediction.tokens), (model, inventory)
            assert asked.refusal is None
            checked += 1
    assert checked >= 20, f"only {checked} golden cases are served: the comparison says little"


def test_vllm_own_kv_planning_refuses_what_the_arithmetic_says_does_not_fit(folders):
    from caovan.profiles.vllm_kv_cache import vllm_kv_report

    facts, sizing = _sizing(folders["qwen3.6-27b-awq"], None, None, INVENTORIES["2x22GB"])
    layout, room = sizing.prediction.layout, sizing.prediction.room
    short = layout.bytes_per_request(262144) - 1
    assert layout.longest_context(short, 262144) < 262144
    report = vllm_kv_report(facts, layout, 262144, short)
    assert report.refusal is not None and "To serve at least one request" in report.refusal
    assert f"the estimated maximum model length is {layout.longest_context(short, 262144)}" in report.refusal
    assert room.bytes >= layout.bytes_per_request(262144)  # the golden case itself fits


def test_the_kv_dtypes_the_golden_data_assumes_are_what_vllm_takes():
    """The golden data's KV-cache dtypes per capability are the installed vLLM's answers (caovan.sm75's probe)."""
    from caovan.serving.serve_profiles import vllm_kv_cache_dtypes

    for capability, accepted in KV_ACCEPTED.items():
        assert vllm_kv_cache_dtypes(capability, "golden") == accepted, capability


def test_docs_quote_the_golden_output_verbatim():
    """Each ``<!-- profiles_golden: CASE -->`` block in docs/usage.md holds that case's lines, as serve prints them."""
    golden = json.loads(GOLDEN.read_text())
    text = USAGE.read_text()
    quoted = re.findall(r"<!-- profiles_golden: (.+?) -->\n```text\n(.*?)\n```", text, flags=re.S)
    assert quoted, "docs/usage.md quotes no golden case"
    for case, block in quoted:
        assert case in golden, case
        assert block.splitlines() == [f"[Caovan] serve: {line}" for line in golden[case]], case


def test_kv_room_is_the_share_less_weights_and_reserve(folders):
    facts, sizing = _sizing(folders["qwen3.6-27b-awq"], None, None, INVENTORIES["2x22GB"])
    room = kv_room(INVENTORIES["2x22GB"][:2], 0.93, weights_per_gpu(facts, 2), MODES["normal"].reserve.total)
    assert sizing.prediction.room == room
    assert room.bytes == int(0.93 * 22 * GIB) - -(-facts.weight_bytes // 2) - 2 * GIB
