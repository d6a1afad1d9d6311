"""The start-up profiles' inputs: the GPUs through (a fake) NVML, and a model folder's shapes and weight bytes."""

from __future__ import annotations

import json
import struct
import sys
import types
from collections import namedtuple

import pytest

from caovan.bench.model_folders import write_architecture_config, write_tiny_qwen3_5
from caovan.model_check import ModelCheckError
from caovan.profiles import Gpu, GpuInventoryError, read_gpus, read_model_facts

GIB = 1 << 30
_Memory = namedtuple("_Memory", "total free used")


def _fake_nvml(monkeypatch, cards, *, init_error=None):
    """``cards``: (name, capability, total GiB, free GiB) per NVML index."""
    nvml = types.ModuleType("pynvml")

    def init():
        if init_error:
            raise RuntimeError(init_error)

    nvml.nvmlInit = init
    nvml.nvmlShutdown = lambda: None
    nvml.nvmlDeviceGetCount = lambda: len(cards)
    nvml.nvmlDeviceGetHandleByIndex = lambda i: i
    nvml.nvmlDeviceGetUUID = lambda i: f"GPU-{i:04d}-uuid"
    nvml.nvmlDeviceGetName = lambda i: cards[i][0].encode()
    nvml.nvmlDeviceGetCudaComputeCapability = lambda i: cards[i][1]
    nvml.nvmlDeviceGetMemoryInfo = lambda i: _Memory(cards[i][2] * GIB, cards[i][3] * GIB, 0)
    monkeypatch.setitem(sys.modules, "pynvml", nvml)


TWO_2080TI = [("NVIDIA GeForce RTX 2080 Ti", (7, 5), 22, 21), ("NVIDIA GeForce RTX 2080 Ti", (7, 5), 22, 11)]


def test_gpus_are_measured_in_cuda_visible_devices_order(monkeypatch):
    _fake_nvml(monkeypatch, TWO_2080TI)
    gpus = read_gpus({"CUDA_VISIBLE_DEVICES": "1,0"})
    assert [g.index for g in gpus] == [1, 0]
    assert gpus[0] == Gpu(1, "NVIDIA GeForce RTX 2080 Ti", (7, 5), 22 * GIB, 11 * GIB)
    assert gpus[0].used_bytes == 11 * GIB
    assert gpus[0].describe() == "GPU 1 NVIDIA GeForce RTX 2080 Ti sm_75: 11.0 of 22.0 GiB free"
    assert [g.index for g in read_gpus({})] == [0, 1]
    assert [g.index for g in read_gpus({"CUDA_VISIBLE_DEVICES": "GPU-0001"})] == [1]


@pytest.mark.parametrize(
    ("environ", "init_error", "message"),
    [
        ({"CUDA_VISIBLE_DEVICES": ""}, None, "no GPU visible (CUDA_VISIBLE_DEVICES='')"),
        ({"CUDA_VISIBLE_DEVICES": "MIG-abc"}, None, "a MIG instance is visible"),
        ({}, "Driver Not Loaded", "NVML does not start (Driver Not Loaded)"),
    ],
)
def test_what_cannot_be_measured_is_one_error(monkeypatch, environ, init_error, message):
    _fake_nvml(monkeypatch, TWO_2080TI, init_error=init_error)
    with pytest.raises(GpuInventoryError, match=message.replace("(", r"\(").replace(")", r"\)")):
        read_gpus(environ)


def test_without_pynvml_the_error_says_so(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)
    with pytest.raises(GpuInventoryError, match="pynvml"):
        read_gpus({})


def test_the_total_is_cudas_nvmls_less_the_drivers_reserve(monkeypatch):
    """Seen on a lent H100: NVML v1 79.65 GiB total, CUDA (and so vLLM) 79.18 GiB; v2 tells the 0.47 GiB reserve."""
    _fake_nvml(monkeypatch, [("NVIDIA H100 80GB HBM3", (9, 0), 80, 79)])
    nvml = sys.modules["pynvml"]
    v2 = namedtuple("_MemoryV2", "total reserved free used")
    nvml.nvmlMemory_v2 = 0x02000028

    def memory_info(i, version=None):
        assert version in (None, nvml.nvmlMemory_v2)
        return v2(80 * GIB, GIB // 2, 79 * GIB, 0) if version else _Memory(80 * GIB, 79 * GIB, GIB)

    nvml.nvmlDeviceGetMemoryInfo = memory_info
    (gpu,) = read_gpus({})
    assert (gpu.total_bytes, gpu.free_bytes) == (80 * GIB - GIB // 2, 79 * GIB)

    def no_v2(i, version=None):
        if version:
            raise RuntimeError("Function Not Found")
        return _Memory(80 * GIB, 79 * GIB, GIB)

    nvml.nvmlDeviceGetMemoryInfo = no_v2
    assert read_gpus({})[0].total_bytes == 80 * GIB


def test_a_gpu_with_more_free_than_total_memory_is_refused():
    with pytest.raises(ValueError, match="GPU 3: free"):
        Gpu(3, "x", (7, 5), GIB, 2 * GIB)


def test_the_27b_architecture_without_weights_is_read_and_estimated(tmp_path):
    folder = write_architecture_config("qwen3.6-27b", tmp_path / "q27")
    facts = read_model_facts(folder)
    assert (facts.layers, facts.gdn_layers, facts.full_attention_layers, facts.mtp_layers) == (64, 48, 16, 1)
    assert (facts.num_attention_heads, facts.num_kv_heads, facts.head_dim) == (24, 4, 256)
    assert (facts.gdn_key_heads, facts.gdn_value_heads, facts.gdn_key_dim, facts.gdn_value_dim) == (16, 48, 128, 128)
    assert facts.conv_width == 4 and facts.gdn_conv_dim == 2 * 16 * 128 + 48 * 128
    assert (facts.dtype, facts.ssm_dtype, facts.quantization) == ("bfloat16", "float32", None)
    # Qwen3.6-27B: about 27 billion parameters in bf16 (the vision tower is not counted).
    assert 26.5e9 < facts.weight_bytes / 2 < 28e9
    assert facts.weight_source.startswith("estimated from config.json")


def _write_safetensors(path, tensors):
    """A real safetensors file: header of (name, dtype, shape, bytes) then that many zero bytes."""
    header, offset = {}, 0
    for name, dtype, shape, size in tensors:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + size]}
        offset += size
    raw = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + bytes(offset))


def test_weights_are_the_bytes_the_safetensors_headers_give(tmp_path):
    folder = write_tiny_qwen3_5(tmp_path / "tiny")
    _write_safetensors(folder / "model-00001-of-00002.safetensors", [("a", "BF16", [4, 8], 64), ("b", "F32", [3], 12)])
    _write_safetensors(folder / "model-00002-of-00002.safetensors", [("mtp.layers.0.c", "BF16", [10], 20)])
    facts = read_model_facts(folder)
    assert facts.weight_bytes == 96
    assert facts.weight_source == "safetensors headers (3 tensors in 2 files)"


def test_a_tensor_without_data_offsets_names_file_and_tensor(tmp_path):
    folder = write_tiny_qwen3_5(tmp_path / "tiny")
    raw = json.dumps({"w": {"dtype": "F16", "shape": [2]}}).encode()
    (folder / "model.safetensors").write_bytes(struct.pack("<Q", len(raw)) + raw)
    with pytest.raises(ModelCheckError, match=r"model\.safetensors: tensor 'w' has no \[begin, end\] data_offsets"):
        read_model_facts(folder)


def _quantized(tmp_path, quantization_config):
    folder = write_architecture_config("qwen3.6-27b", tmp_path / "q27-quantized")
    config = json.loads((folder / "config.json").read_text())
    config["quantization_config"] = quantization_config
    (folder / "config.json").write_text(json.dumps(config))
    return folder


def test_an_awq_folder_without_weights_is_estimated_from_bits_and_group_size(tmp_path):
    facts = read_model_facts(_quantized(tmp_path, {"quant_method": "awq", "bits": 4, "group_size": 128}))
    assert facts.quantization == "awq"
    assert facts.weight_source.startswith("estimated from config.json (awq 4-bit, ")
    # Qwen3.6-27B in AWQ int4: the 2.5 G embedding and head parameters stay bf16 (5.1 GB), the rest about 0.52
    # bytes a weight (half a byte, plus an fp16 scale and a 4-bit zero point per 128).
    assert 17.5e9 < facts.weight_bytes < 18.5e9


def test_a_quantized_folder_whose_size_config_json_does_not_tell_is_not_guessed(tmp_path):
    folder = _quantized(tmp_path, {"quant_method": "fp8", "weight_block_size": [128, 128]})
    with pytest.raises(ModelCheckError, match="no safetensors file to measure the fp8 weights from"):
        read_model_facts(folder)
