"""The tiny GDN + MTP model folders of the serve tier: their content, and that vLLM 0.21 reads them (no GPU).

The plain tests need neither vLLM nor a GPU.  ``test_vllm_reads_the_tiny_model_with_its_mtp_draft`` is in the
``discovery`` tier: it imports the real vLLM and builds the target ``ModelConfig`` and the MTP
``SpeculativeConfig`` the engine would build, on CPU.
"""

import json

import pytest
import serve_workload

from caovan.bench import model_folders as tiny_models
from caovan.bench.model_tokenizer import write_architecture
from caovan.model_check import check_model_dir


@pytest.mark.parametrize("writer", [tiny_models.write_tiny_qwen3_next, tiny_models.write_tiny_qwen3_5])
def test_tiny_model_is_a_caovan_candidate(tmp_path, writer):
    folder = writer(tmp_path / "m")
    files = sorted(p.name for p in folder.iterdir())
    assert files[0] == "config.json" and not any("token" in f or f.endswith(".safetensors") for f in files), files
    report = check_model_dir(folder)
    assert report.is_candidate, report.to_dict()
    failing = [r for r in report.to_dict()["reasons"] if r["status"] == "fail"]
    assert failing == []


def test_tiny_dense_model_is_not_a_candidate(tmp_path):
    folder = tiny_models.write_tiny_qwen3_dense(tmp_path / "dense", torch_dtype="float16")
    config = json.loads((folder / "config.json").read_text())
    assert config["architectures"] == ["Qwen3ForCausalLM"]
    assert serve_workload.TOKEN_ID_LIMIT <= config["vocab_size"]
    report = check_model_dir(folder)
    assert not report.is_candidate, report.to_dict()


def test_tiny_qwen3_next_fields():
    config = tiny_models.tiny_qwen3_next_config(torch_dtype="float16")
    assert config["architectures"] == ["Qwen3NextForCausalLM"]
    assert config["layer_types"] == ["linear_attention"] * 3 + ["full_attention"]
    assert config["linear_num_value_heads"] // config["linear_num_key_heads"] == 2
    assert config["linear_key_head_dim"] == config["linear_value_head_dim"] == 128
    assert config["num_nextn_predict_layers"] == 1
    assert config["num_experts"] > 0  # vLLM's Qwen3-Next (and its MTP layer) require a MoE layer
    assert config["torch_dtype"] == "float16"
    # The workload's token ids must exist in the vocabulary.
    assert serve_workload.TOKEN_ID_LIMIT <= config["vocab_size"]
    assert all(0 < t < serve_workload.TOKEN_ID_LIMIT for ids in serve_workload.PROMPT_TOKEN_IDS for t in ids)


def test_tiny_qwen3_5_fields():
    config = tiny_models.tiny_qwen3_5_config()
    text = config["text_config"]
    assert config["architectures"] == ["Qwen3_5ForConditionalGeneration"]
    assert text["linear_num_value_heads"] // text["linear_num_key_heads"] == 3
    assert text["mtp_num_hidden_layers"] == 1
    assert text["mamba_ssm_dtype"] == "float32"
    rotary_half = int(text["head_dim"] * text["rope_parameters"]["partial_rotary_factor"]) // 2
    assert sum(text["rope_parameters"]["mrope_section"]) == rotary_half
    special = [config[k] for k in ("image_token_id", "video_token_id", "vision_start_token_id", "vision_end_token_id")]
    assert all(serve_workload.TOKEN_ID_LIMIT <= t < text["vocab_size"] for t in special)
    assert "mamba_ssm_dtype" not in tiny_models.tiny_qwen3_5_config(mamba_ssm_dtype=None)["text_config"]


def test_writer_round_trips_and_overwrites(tmp_path):
    folder = tiny_models.write_tiny_qwen3_next(tmp_path / "m", linear_num_value_heads=6)
    assert json.loads((folder / "config.json").read_text())["linear_num_value_heads"] == 6
    tiny_models.write_tiny_qwen3_next(folder)
    assert json.loads((folder / "config.json").read_text())["linear_num_value_heads"] == 4


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"num_hidden_layers": 6}, "num_hidden_layers=6 must be a multiple of 4"),
        ({"linear_num_value_heads": 5}, "linear_num_value_heads=5 must be a multiple of linear_num_key_heads=2"),
        ({"linear_key_head_dim": 0}, "linear_key_head_dim must be a positive int, got 0"),
        ({"hidden_size": True}, "hidden_size must be a positive int, got True"),
        ({"torch_dtype": "half"}, "torch_dtype must be one of"),
        ({"num_nextn_predict_layers": -1}, "num_nextn_predict_layers must be a positive int"),
    ],
)
def test_bad_shape_is_one_clear_error(kwargs, message):
    with pytest.raises(ValueError, match=message):
        tiny_models.tiny_qwen3_next_config(**kwargs)


def test_writer_refuses_a_file_in_the_way(tmp_path):
    (tmp_path / "taken").write_text("x")
    with pytest.raises(ValueError, match="exists and is not a directory"):
        tiny_models.write_tiny_qwen3_next(tmp_path / "taken")


@pytest.mark.discovery
@pytest.mark.usefixtures("served_release")
@pytest.mark.parametrize(
    ("writer", "architecture", "draft_architecture"),
    [
        (tiny_models.write_tiny_qwen3_next, "Qwen3NextForCausalLM", "Qwen3NextMTP"),
        (tiny_models.write_tiny_qwen3_5, "Qwen3_5ForConditionalGeneration", "Qwen3_5MTP"),
    ],
)
def test_vllm_reads_the_tiny_model_with_its_mtp_draft(tmp_path, writer, architecture, draft_architecture):
    from vllm.config import ModelConfig, ParallelConfig, SpeculativeConfig
    from vllm.model_executor.models import ModelRegistry
    from vllm.transformers_utils.config import get_config

    if architecture not in ModelRegistry.get_supported_archs():
        import vllm

        assert architecture.startswith("Qwen3_5"), f"vLLM {vllm.__version__} has no {architecture}"
        pytest.skip(f"vLLM {vllm.__version__} has no {architecture}: Qwen3.5 arrived in vLLM 0.18")
    folder = writer(tmp_path / "m")
    hf_config = get_config(str(folder), trust_remote_code=False)
    text = hf_config.get_text_config()
    assert text.layer_types == ["linear_attention"] * 3 + ["full_attention"]

    target = ModelConfig(model=str(folder), skip_tokenizer_init=True, dtype="float16", max_model_len=512, seed=0)
    assert target.architectures == [architecture]
    assert target.is_hybrid
    spec = SpeculativeConfig(
        method="mtp", num_speculative_tokens=2, target_model_config=target, target_parallel_config=ParallelConfig()
    )
    assert spec.method == "mtp" and spec.num_speculative_tokens == 2
    assert spec.draft_model_config.architectures == [draft_architecture]


@pytest.mark.discovery
@pytest.mark.usefixtures("served_release")
def test_vllm_reads_the_tiny_dense_model_as_a_plain_model(tmp_path):
    """The serve tier's "no GDN layer" engine: vLLM must take it as an ordinary (non-hybrid) model."""
    from vllm.config import ModelConfig

    folder = tiny_models.write_tiny_qwen3_dense(tmp_path / "dense")
    target = ModelConfig(model=str(folder), skip_tokenizer_init=True, dtype="float16", max_model_len=512, seed=0)
    assert target.architectures == ["Qwen3ForCausalLM"]
    assert not target.is_hybrid


@pytest.mark.discovery
@pytest.mark.usefixtures("served_release")
@pytest.mark.parametrize("writer", [tiny_models.write_tiny_qwen3_next, tiny_models.write_tiny_qwen3_5])
def test_vllm_loads_the_tiny_tokenizer_and_it_round_trips_the_benchmark_prompts(tmp_path, monkeypatch, writer):
    # The HTTP tests of the serve tier send the benchmark's text prompts through this tokenizer, with whatever
    # tokenizer class this row's transformers picks for the model type.
    from vllm.tokenizers import get_tokenizer

    from caovan.bench.model_tokenizer import END_OF_TEXT, write_tokenizer
    from caovan.serving.benchmark import WORDS, prompt

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    folder = write_tokenizer(writer(tmp_path / "m"))
    tokenizer = get_tokenizer(str(folder))
    vocab_size = json.loads((folder / "config.json").read_text()).get("text_config", {}).get("vocab_size", 2048)
    assert len(tokenizer) == vocab_size and tokenizer.eos_token == END_OF_TEXT
    text = prompt("mixed", "repeat-1", 3)
    ids = tokenizer.encode(text, add_special_tokens=False)
    assert tokenizer.decode(ids) == text and max(ids) < vocab_size
    assert len(ids) < 1.5 * len(text.split())  # words are whole tokens: the tier's max_model_len holds the prompts
    assert all(len(tokenizer.encode(f" {word}", add_special_tokens=False)) == 1 for word in WORDS)


def test_the_tokenizer_refuses_a_vocabulary_without_room_or_with_vision_tokens_inside(tmp_path):
    from caovan.bench.model_tokenizer import write_tokenizer

    with pytest.raises(ValueError, match="vocab_size=200 leaves too few ids"):
        write_tokenizer(tiny_models.write_tiny_qwen3_next(tmp_path / "small", vocab_size=200))
    config = tiny_models.tiny_qwen3_5_config()
    config["image_token_id"] = 7
    (tmp_path / "odd").mkdir()
    (tmp_path / "odd" / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match="are not the last ids of the vocabulary"):
        write_tokenizer(tmp_path / "odd")


def test_the_27b_architecture_is_the_public_config_s(tmp_path):
    import json

    folder = write_architecture("qwen3.6-27b", tmp_path / "m27")
    text = json.loads((folder / "config.json").read_text())["text_config"]
    assert sorted(p.name for p in folder.iterdir()) == [
        "config.json", "preprocessor_config.json", "tokenizer.json", "tokenizer_config.json",
        "video_preprocessor_config.json",
    ]  # fmt: skip
    assert (text["num_hidden_layers"], text["hidden_size"], text["intermediate_size"]) == (64, 5120, 17408)
    assert (text["num_attention_heads"], text["num_key_value_heads"], text["head_dim"]) == (24, 4, 256)
    assert text["layer_types"].count("linear_attention") == 48 and text["layer_types"][3] == "full_attention"
    linear = ("linear_num_key_heads", "linear_num_value_heads", "linear_key_head_dim", "linear_value_head_dim")
    assert [text[name] for name in linear] == [16, 48, 128, 128] and text["linear_conv_kernel_dim"] == 4
    assert (text["vocab_size"], text["mtp_num_hidden_layers"], text["mamba_ssm_dtype"]) == (248320, 1, "float32")
    assert text["rope_parameters"]["mrope_section"] == [11, 11, 10]
    assert text["max_position_embeddings"] == 262144
    assert (folder / "tokenizer.json").is_file()
    with pytest.raises(ValueError, match="unknown architecture 'qwen9' \\(known: qwen3.6-27b, qwen3.6-27b-awq, qwen3-"):
        write_architecture("qwen9", tmp_path / "x")


def test_the_awq_27b_and_qwen3_next_80b_architectures(tmp_path):
    from caovan.bench.model_tokenizer import write_architecture
    from caovan.model_check import check_model_dir

    awq = json.loads((write_architecture("qwen3.6-27b-awq", tmp_path / "awq") / "config.json").read_text())
    assert awq["quantization_config"] == {
        "quant_method": "awq", "bits": 4, "group_size": 128, "zero_point": True, "version": "gemm",
    }  # fmt: skip
    assert awq["text_config"]["dtype"] == "float16" and awq["text_config"]["num_hidden_layers"] == 64
    folder = write_architecture("qwen3-next-80b", tmp_path / "next80b")
    config = json.loads((folder / "config.json").read_text())
    assert config["architectures"] == ["Qwen3NextForCausalLM"]
    assert (config["hidden_size"], config["num_hidden_layers"], config["num_experts"]) == (2048, 48, 512)
    assert (config["num_attention_heads"], config["num_key_value_heads"], config["head_dim"]) == (16, 2, 256)
    assert (config["linear_num_key_heads"], config["linear_num_value_heads"]) == (16, 32)
    assert (config["moe_intermediate_size"], config["num_experts_per_tok"]) == (512, 10)
    for model in (tmp_path / "awq", folder):
        assert check_model_dir(model).is_candidate, model


def test_the_model_folder_command_writes_once_and_never_over_a_folder(tmp_path, capsys):
    from caovan.cli import main

    assert main(["bench", "model-folder", "qwen3.6-27b", str(tmp_path / "m27")]) == 0
    assert "config.json and a tokenizer" in capsys.readouterr().out
    before = (tmp_path / "m27" / "config.json").read_text()
    assert main(["bench", "model-folder", "qwen3.6-27b", str(tmp_path / "m27")]) == 2
    assert "exists and is not an empty folder (nothing written)" in capsys.readouterr().err
    assert (tmp_path / "m27" / "config.json").read_text() == before


@pytest.mark.discovery
@pytest.mark.usefixtures("served_release")
def test_vllm_reads_the_27b_folder_as_the_hybrid_model_with_its_mtp_draft(tmp_path):
    from vllm.config import ModelConfig, ParallelConfig, SpeculativeConfig
    from vllm.model_executor.models import ModelRegistry

    if "Qwen3_5ForConditionalGeneration" not in ModelRegistry.get_supported_archs():
        import vllm

        pytest.skip(f"vLLM {vllm.__version__} has no Qwen3_5ForConditionalGeneration: Qwen3.5 arrived in vLLM 0.18")
    folder = write_architecture("qwen3.6-27b", tmp_path / "m27")
    target = ModelConfig(model=str(folder), dtype="float16", max_model_len=4096, seed=0)
    assert target.architectures == ["Qwen3_5ForConditionalGeneration"] and target.is_hybrid
    text = target.hf_text_config
    assert (text.num_hidden_layers, text.hidden_size, text.linear_num_value_heads, text.vocab_size) == (
        64, 5120, 48, 248320
    )  # fmt: skip
    spec = SpeculativeConfig(
        method="mtp", num_speculative_tokens=3, target_model_config=target, target_parallel_config=ParallelConfig()
    )
    assert spec.draft_model_config.architectures == ["Qwen3_5MTP"]


@pytest.mark.discovery
@pytest.mark.usefixtures("served_release")
@pytest.mark.parametrize("make", ["tiny", "qwen3.6-27b"])
def test_vllm_builds_the_qwen3_5_processor_from_the_folder_offline(tmp_path, monkeypatch, make):
    # A served Qwen3.5 folder is multimodal: vLLM builds Hugging Face's processor (image, video, tokenizer) at
    # start-up to profile images; it must load from the folder, with no network, and know the vision tokens.
    from vllm.config import ModelConfig
    from vllm.model_executor.models import ModelRegistry
    from vllm.multimodal import MULTIMODAL_REGISTRY

    if "Qwen3_5ForConditionalGeneration" not in ModelRegistry.get_supported_archs():
        pytest.skip("this vLLM has no Qwen3_5ForConditionalGeneration: Qwen3.5 arrived in vLLM 0.18")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")
    if make == "tiny":
        from caovan.bench.model_tokenizer import write_tokenizer

        folder = write_tokenizer(tiny_models.write_tiny_qwen3_5(tmp_path / "m"))
    else:
        folder = write_architecture(make, tmp_path / "m")
    config = ModelConfig(model=str(folder), dtype="float16", max_model_len=4096, seed=0)
    processor = MULTIMODAL_REGISTRY.create_processor(config).info.get_hf_processor()
    assert type(processor).__name__ == "Qwen3VLProcessor"
    assert processor.image_token_id == config.hf_config.image_token_id
    vocab = processor.tokenizer.get_vocab()
    assert vocab["<|vision_start|>"] == config.hf_config.vision_start_token_id
    assert len(processor.tokenizer) == config.hf_text_config.vocab_size  # no token past the model's vocabulary
