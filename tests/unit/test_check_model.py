"""`caovan check-model`: verdicts, facts, advice and exit codes, driven through the CLI module's
``add_arguments`` + ``run`` exactly as the ``caovan`` console script calls them.

Fixtures in data/model_configs/ are shaped like the released configs (see its README); variants
are derived here so each test shows the one field it changes. No vLLM, no torch.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import shutil
import struct
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from caovan import model_check
from caovan.cli import check_model
from caovan.kernels.gdn_spec_decode import envelope

FIXTURES = Path(__file__).parent / "data" / "model_configs"
SPEC_FLAG = """--speculative-config '{"method":"mtp","num_speculative_tokens":3}'"""
JSON_KEYS = {"schema", "model_dir", "verdict", "candidate", "caveat", "reasons", "facts", "advice"}
FACT_KEYS = {
    "config_file",
    "architecture",
    "model_type",
    "fields_from",
    "layers",
    "mtp",
    "gdn_heads",
    "tensor_parallel",
    "dtype",
    "mamba_ssm_dtype",
    "quantization",
}


# ------------------------------------------------------------------------------------------------
# Helpers.
# ------------------------------------------------------------------------------------------------


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str | Path) -> tuple[int, str, str]:
    parser = argparse.ArgumentParser(prog="caovan check-model")
    check_model.add_arguments(parser)
    args = parser.parse_args([str(arg) for arg in argv])
    code = check_model.run(args)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def run_json(capsys: pytest.CaptureFixture[str], model_dir: Path) -> tuple[int, dict[str, Any]]:
    code, out, err = run_cli(capsys, model_dir, "--json")
    assert err == ""
    return code, json.loads(out)


def reasons_by_check(report: dict[str, Any]) -> dict[str, dict[str, str]]:
    return {reason["check"]: reason for reason in report["reasons"]}


def text_fields(config: dict[str, Any]) -> dict[str, Any]:
    """The object holding the language-model fields (text_config when nested)."""
    return config.get("text_config", config)


def variant(
    tmp_path: Path,
    fixture: str,
    edit: Callable[[dict[str, Any]], None] | None = None,
    *,
    copy_index: bool = False,
) -> Path:
    """Copy a fixture's config.json (edited) into a fresh folder; weights index only on request."""
    config = json.loads((FIXTURES / fixture / "config.json").read_text())
    if edit is not None:
        edit(config)
    folder = tmp_path / f"{fixture}-variant"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(config, indent=2))
    if copy_index:
        shutil.copy(FIXTURES / fixture / model_check.SAFETENSORS_INDEX_FILE_NAME, folder)
    return folder


def set_text(**fields: Any) -> Callable[[dict[str, Any]], None]:
    def edit(config: dict[str, Any]) -> None:
        for key, value in fields.items():
            if value is _DELETE:
                text_fields(config).pop(key, None)
            else:
                text_fields(config)[key] = value

    return edit


_DELETE = object()


def write_safetensors(path: Path, tensor_names: list[str]) -> None:
    """A minimal valid safetensors file: 8-byte header length, JSON header, 2 bytes per tensor."""
    header: dict[str, Any] = {"__metadata__": {"format": "pt"}}
    for i, name in enumerate(tensor_names):
        header[name] = {"dtype": "F16", "shape": [1], "data_offsets": [2 * i, 2 * i + 2]}
    raw = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + bytes(2 * len(tensor_names)))


def drop_mtp_from_index(folder: Path) -> None:
    index_path = folder / model_check.SAFETENSORS_INDEX_FILE_NAME
    index = json.loads(index_path.read_text())
    index["weight_map"] = {name: shard for name, shard in index["weight_map"].items() if not name.startswith("mtp.")}
    index_path.write_text(json.dumps(index))


# ------------------------------------------------------------------------------------------------
# The CLI contract.
# ------------------------------------------------------------------------------------------------


def test_cli_module_follows_the_subcommand_contract() -> None:
    assert check_model.NAME == "check-model"
    assert check_model.ALIAS == "caovan-sm75-check-model"
    assert isinstance(check_model.HELP, str) and "\n" not in check_model.HELP
    assert callable(check_model.add_arguments) and callable(check_model.run)


def test_check_imports_neither_vllm_nor_torch() -> None:
    code = (
        "import sys, caovan.cli.check_model, caovan.model_check; "
        "bad = sorted(m for m in ('vllm', 'torch', 'triton') if m in sys.modules); "
        "print(','.join(bad)); sys.exit(1 if bad else 0)"
    )
    src = Path(model_check.__file__).resolve().parents[2]
    result = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env={"PYTHONPATH": str(src)},
        check=False,
    )
    assert result.returncode == 0, f"imported: {result.stdout} {result.stderr}"


# ------------------------------------------------------------------------------------------------
# Released-config fixtures.
# ------------------------------------------------------------------------------------------------


def test_qwen3_6_27b_is_a_candidate_human_output(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(capsys, FIXTURES / "qwen3_6_27b")
    assert (code, err) == (0, "")
    assert "Qwen3_5ForConditionalGeneration (model_type qwen3_5; fields from text_config)" in out
    assert "48 of 64 (16 full attention; from text_config.layer_types)" in out
    assert "depth 1 (text_config.mtp_num_hidden_layers); weights not checked" in out
    assert "H=16 HV=48 (HV/H=3) K=128 V=128 conv width 4" in out
    assert "TP=1: H=16 HV=48 conv_dim=10240 | TP=2: H=8 HV=24 conv_dim=5120" in out
    assert "bfloat16 weights; SSM state float32 (mamba_ssm_dtype)" in out
    assert "WARN dtype: bfloat16 weights: SM75 has no bf16: run with --dtype half" in out
    assert "verdict: candidate (a candidate, not a guarantee" in out
    assert SPEC_FLAG in out
    assert "run with --dtype half" in out
    # Compact: passing checks are counted, not listed.
    assert "PASS" not in out


def test_qwen3_6_27b_json_is_stable_and_complete(capsys: pytest.CaptureFixture[str]) -> None:
    code, report = run_json(capsys, FIXTURES / "qwen3_6_27b")
    assert code == 0
    assert set(report) == JSON_KEYS
    assert set(report["facts"]) == FACT_KEYS
    assert report["schema"] == "caovan.check-model/1"
    assert (report["verdict"], report["candidate"]) == ("candidate", True)
    facts = report["facts"]
    assert facts["layers"] == {
        "total_layers": 64,
        "gdn_layers": 48,
        "full_attention_layers": 16,
        "source": "text_config.layer_types",
        "other_layer_types": [],
    }
    assert facts["mtp"]["depth"] == 1
    assert facts["mtp"]["source"] == "text_config.mtp_num_hidden_layers"
    assert facts["mtp"]["weights"]["checked"] is False
    assert facts["gdn_heads"] == {
        "num_key_heads": 16,
        "num_value_heads": 48,
        "key_head_dim": 128,
        "value_head_dim": 128,
        "conv_kernel_width": 4,
        "value_heads_per_key_head": 3,
    }
    assert facts["tensor_parallel"] == [
        {"tp": 1, "divisible": True, "num_key_heads": 16, "num_value_heads": 48, "conv_dim": 10240},
        {"tp": 2, "divisible": True, "num_key_heads": 8, "num_value_heads": 24, "conv_dim": 5120},
    ]
    assert (facts["dtype"], facts["mamba_ssm_dtype"], facts["quantization"]) == (
        "bfloat16",
        "float32",
        None,
    )
    statuses = {name: reason["status"] for name, reason in reasons_by_check(report).items()}
    assert statuses == {
        "gdn_layers": "pass",
        "architecture": "pass",
        "mtp": "pass",
        "head_ratio": "pass",
        "key_head_dim": "pass",
        "value_head_dim": "pass",
        "conv_width": "pass",
        "activation": "pass",
        "tensor_parallel": "pass",
        "dtype": "warn",
        "ssm_state_dtype": "pass",
    }
    assert any(SPEC_FLAG in item for item in report["advice"])
    assert any("--dtype half" in item for item in report["advice"])


def test_qwen3_6_27b_awq_compressed_tensors(capsys: pytest.CaptureFixture[str]) -> None:
    code, report = run_json(capsys, FIXTURES / "qwen3_6_27b_awq")
    assert code == 0
    facts = report["facts"]
    assert facts["quantization"] == {
        "method": "compressed-tensors",
        "detail": "int4 weight-only (W4A16), group 32",
        "source": "quantization_config",
    }
    reasons = reasons_by_check(report)
    assert reasons["quantization"]["status"] == "pass"
    assert "Marlin on SM75" in reasons["quantization"]["message"]
    assert reasons["dtype"] == {
        "check": "dtype",
        "status": "pass",
        "message": "float16 (text_config.dtype)",
    }
    assert facts["mtp"]["weights"] == {
        "checked": True,
        "source": "model.safetensors.index.json",
        "mtp_tensors": 7,
        "mtp_layers": 1,
    }
    assert not any("--dtype half" in item for item in report["advice"])


def test_awq_checkpoint_that_dropped_its_mtp_head_is_not_a_candidate(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = variant(tmp_path, "qwen3_6_27b_awq", copy_index=True)
    drop_mtp_from_index(folder)
    code, out, _ = run_cli(capsys, folder)
    assert code == 1
    assert "FAIL mtp: text_config.mtp_num_hidden_layers=1 but model.safetensors.index.json has no mtp.* tensors" in out
    assert "verdict: not a candidate" in out


def test_qwen3_5_moe_35b_a3b(capsys: pytest.CaptureFixture[str]) -> None:
    code, report = run_json(capsys, FIXTURES / "qwen3_5_35b_a3b")
    assert code == 0
    facts = report["facts"]
    assert facts["architecture"] == "Qwen3_5MoeForConditionalGeneration"
    assert (facts["layers"]["gdn_layers"], facts["layers"]["total_layers"]) == (30, 40)
    assert facts["gdn_heads"]["value_heads_per_key_head"] == 2
    assert facts["tensor_parallel"][1] == {
        "tp": 2,
        "divisible": True,
        "num_key_heads": 8,
        "num_value_heads": 16,
        "conv_dim": 4096,
    }


def test_qwen3_next_top_level_fields_and_mtp_from_weights(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, _ = run_cli(capsys, FIXTURES / "qwen3_next_80b_a3b")
    assert code == 0
    assert "Qwen3NextForCausalLM (model_type qwen3_next; fields from top level)" in out
    assert "36 of 48 (12 full attention; from full_attention_interval=4)" in out
    assert "depth 1 (model.safetensors.index.json): 7 mtp.* tensors" in out
    assert "H=16 HV=32 (HV/H=2)" in out
    code, report = run_json(capsys, FIXTURES / "qwen3_next_80b_a3b")
    mtp_reason = reasons_by_check(report)["mtp"]
    assert mtp_reason["status"] == "pass"
    assert "no MTP depth field (num_nextn_predict_layers)" in mtp_reason["message"]


def test_qwen3_next_without_weights_assumes_vllm_default_mtp_layer(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, report = run_json(capsys, variant(tmp_path, "qwen3_next_80b_a3b"))
    assert code == 0
    assert report["facts"]["mtp"]["depth"] == 1
    assert report["facts"]["mtp"]["source"] == "vLLM's default for Qwen3NextForCausalLM"
    assert reasons_by_check(report)["mtp"]["status"] == "warn"


def test_qwen3_next_declared_mtp_field_is_read(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = variant(tmp_path, "qwen3_next_80b_a3b", set_text(num_nextn_predict_layers=2))
    code, report = run_json(capsys, folder)
    assert code == 0
    assert report["facts"]["mtp"]["source"] == "num_nextn_predict_layers"
    assert report["facts"]["mtp"]["depth"] == 2


def test_qwen3_next_index_without_mtp_tensors_is_not_a_candidate(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = variant(tmp_path, "qwen3_next_80b_a3b", copy_index=True)
    drop_mtp_from_index(folder)
    code, report = run_json(capsys, folder)
    assert code == 1
    assert reasons_by_check(report)["mtp"]["status"] == "fail"
    assert any(SPEC_FLAG in item for item in report["advice"])


def test_qwen3_next_ignores_full_attention_interval_like_vllm(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # vLLM's Qwen3NextConfig always builds every 4th layer as full attention when layer_types is
    # absent, whatever full_attention_interval says.
    folder = variant(tmp_path, "qwen3_next_80b_a3b", set_text(full_attention_interval=2))
    code, report = run_json(capsys, folder)
    assert code == 0
    assert report["facts"]["layers"]["gdn_layers"] == 36
    assert reasons_by_check(report)["layer_pattern"]["status"] == "warn"


def test_llama_has_no_gdn_layers(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(capsys, FIXTURES / "llama_3_1_8b")
    assert (code, err) == (1, "")
    assert "FAIL gdn_layers: no GatedDeltaNet (linear_attention) layers" in out
    assert "verdict: not a candidate" in out
    code, report = run_json(capsys, FIXTURES / "llama_3_1_8b")
    assert code == 1
    assert set(report["facts"]) == FACT_KEYS
    assert report["facts"]["layers"]["gdn_layers"] == 0
    assert (report["facts"]["mtp"], report["facts"]["gdn_heads"]) == (None, None)
    assert report["candidate"] is False


# ------------------------------------------------------------------------------------------------
# Layer counting.
# ------------------------------------------------------------------------------------------------


def test_full_attention_interval_without_layer_types(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = variant(tmp_path, "qwen3_6_27b", set_text(layer_types=_DELETE))
    code, report = run_json(capsys, folder)
    assert code == 0
    assert report["facts"]["layers"]["gdn_layers"] == 48
    assert report["facts"]["layers"]["source"] == "text_config.full_attention_interval=4"


def test_qwen3_5_interval_other_than_4_is_honoured(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = variant(tmp_path, "qwen3_6_27b", set_text(layer_types=_DELETE, full_attention_interval=8))
    code, report = run_json(capsys, folder)
    assert code == 0
    assert report["facts"]["layers"]["gdn_layers"] == 56


def test_qwen3_5_without_layer_pattern_uses_vllm_default(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = variant(tmp_path, "qwen3_6_27b", set_text(layer_types=_DELETE, full_attention_interval=_DELETE))
    code, report = run_json(capsys, folder)
    assert code == 0
    assert report["facts"]["layers"]["gdn_layers"] == 48
    assert report["facts"]["layers"]["source"] == ("vLLM's default: every 4th layer full attention")


def test_all_full_attention_layer_types_is_not_a_candidate(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = variant(tmp_path, "qwen3_6_27b", set_text(layer_types=["full_attention"] * 64))
    code, report = run_json(capsys, folder)
    assert code == 1
    assert reasons_by_check(report)["gdn_layers"]["status"] == "fail"


# ------------------------------------------------------------------------------------------------
# MTP.
# ------------------------------------------------------------------------------------------------


def test_gdn_model_without_mtp_field_is_not_a_candidate(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = variant(tmp_path, "qwen3_6_27b", set_text(mtp_num_hidden_layers=_DELETE))
    code, out, _ = run_cli(capsys, folder)
    assert code == 1
    assert "FAIL mtp: no MTP depth field (mtp_num_hidden_layers)" in out
    assert SPEC_FLAG in out
    assert "verdict: not a candidate" in out


def test_mtp_depth_zero_is_not_a_candidate(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = variant(tmp_path, "qwen3_6_27b", set_text(mtp_num_hidden_layers=0))
    code, report = run_json(capsys, folder)
    assert code == 1
    reason = reasons_by_check(report)["mtp"]
    assert reason["status"] == "fail"
    assert reason["message"].startswith("text_config.mtp_num_hidden_layers=0: no MTP layers")
    assert report["facts"]["mtp"]["depth"] == 0


def test_mtp_tensors_read_from_safetensors_headers_without_index(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = variant(tmp_path, "qwen3_6_27b", set_text(mtp_num_hidden_layers=_DELETE))
    write_safetensors(
        folder / "model.safetensors",
        [
            "model.language_model.layers.0.linear_attn.A_log",
            "mtp.fc.weight",
            "mtp.layers.0.self_attn.q_proj.weight",
        ],
    )
    code, report = run_json(capsys, folder)
    assert code == 0
    assert report["facts"]["mtp"]["weights"] == {
        "checked": True,
        "source": "model.safetensors",
        "mtp_tensors": 2,
        "mtp_layers": 1,
    }
    assert report["facts"]["mtp"]["depth"] == 1


def test_safetensors_without_mtp_tensors_is_not_a_candidate(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = variant(tmp_path, "qwen3_6_27b")
    write_safetensors(folder / "model.safetensors", ["model.language_model.embed_tokens.weight"])
    code, report = run_json(capsys, folder)
    assert code == 1
    assert "has no mtp.* tensors" in reasons_by_check(report)["mtp"]["message"]


def test_declared_depth_disagreeing_with_weights_warns(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = variant(tmp_path, "qwen3_6_27b_awq", set_text(mtp_num_hidden_layers=2), copy_index=True)
    code, report = run_json(capsys, folder)
    assert code == 0
    assert reasons_by_check(report)["mtp_weights"]["status"] == "warn"


# ------------------------------------------------------------------------------------------------
# Kernel envelope.
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fields", "check", "status", "message"),
    [
        ({"linear_num_value_heads": 64}, "head_ratio", "fail", "num_v_heads=64: 4 value heads per key head"),
        ({"linear_num_value_heads": 40}, "head_ratio", "fail", "num_v_heads=40: not a multiple of num_k_heads=16"),
        ({"linear_num_value_heads": 16}, "head_ratio", "pass", "HV/H = 16/16 = 1"),
        ({"linear_key_head_dim": 8}, "key_head_dim", "fail", "head_k_dim=8: the kernels take 16..256"),
        ({"linear_key_head_dim": 100}, "key_head_dim", "fail", "head_k_dim=100: the kernels take a multiple of 8"),
        ({"linear_key_head_dim": 512}, "key_head_dim", "fail", "head_k_dim=512"),
        ({"linear_key_head_dim": 96}, "key_head_dim", "warn", "tuned for K=128"),
        ({"linear_key_head_dim": 64}, "key_head_dim", "warn", "tuned for K=128"),
        ({"linear_key_head_dim": 256}, "key_head_dim", "warn", "tuned for K=128"),
        ({"linear_value_head_dim": 100}, "value_head_dim", "fail", "head_v_dim=100: the kernels take a positive"),
        ({"linear_value_head_dim": 120}, "value_head_dim", "warn", "BV=32 leaves a masked"),
        ({"linear_value_head_dim": 80}, "value_head_dim", "warn", "BV=32 leaves a masked"),
        ({"linear_value_head_dim": 64}, "value_head_dim", "warn", "tuned for V=128"),
        ({"linear_conv_kernel_dim": 7}, "conv_width", "fail", "conv_width=7: the kernels take 2..6"),
        ({"linear_conv_kernel_dim": 1}, "conv_width", "fail", "take 2..6"),
        ({"linear_conv_kernel_dim": 2}, "conv_width", "pass", "conv width 2"),
        ({"linear_conv_kernel_dim": 6}, "conv_width", "pass", "conv width 6"),
        ({"hidden_act": "gelu"}, "activation", "fail", "activation='gelu': the kernels apply SiLU"),
        ({"hidden_act": "swish"}, "activation", "pass", "conv activation swish"),
        ({"hidden_act": _DELETE}, "activation", "pass", "conv activation silu"),
    ],
)
def test_kernel_envelope(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    fields: dict[str, Any],
    check: str,
    status: str,
    message: str,
) -> None:
    code, report = run_json(capsys, variant(tmp_path, "qwen3_6_27b", set_text(**fields)))
    reason = reasons_by_check(report)[check]
    assert reason["status"] == status
    assert message in reason["message"]
    assert code == (1 if status == "fail" else 0)
    assert report["verdict"] == ("not a candidate" if status == "fail" else "candidate")


def test_bad_ratio_human_output(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = variant(tmp_path, "qwen3_6_27b", set_text(linear_num_value_heads=64))
    code, out, _ = run_cli(capsys, folder)
    assert code == 1
    assert "H=16 HV=64 (HV/H=4)" in out
    assert "FAIL head_ratio: num_v_heads=64: 4 value heads per key head (num_k_heads=16); " in out
    assert "the kernels take 1, 2 or 3" in out
    assert "verdict: not a candidate" in out


def test_not_a_candidate_gets_no_advice_to_serve(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # MTP passes (the serve advice is made there), then the head ratio fails: no advice to serve it.
    folder = variant(tmp_path, "qwen3_6_27b", set_text(linear_num_value_heads=64))
    code, out, _ = run_cli(capsys, folder)
    assert code == 1 and "verdict: not a candidate" in out
    assert "serve with" not in out
    code, report = run_json(capsys, folder)
    assert not any(item.startswith("serve with") for item in report["advice"])
    code, out, _ = run_cli(capsys, FIXTURES / "qwen3_6_27b")
    assert code == 0 and f"serve with {SPEC_FLAG}" in out  # a candidate keeps it


def test_missing_model_type_and_dtype_read_as_not_given(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    def edit(config: dict[str, Any]) -> None:
        for fields in (config, text_fields(config)):
            for key in ("model_type", "torch_dtype", "dtype"):
                fields.pop(key, None)

    code, out, _ = run_cli(capsys, variant(tmp_path, "qwen3_6_27b", edit))
    assert "(model_type not given; fields from text_config)" in out
    assert "  dtype         weights' dtype not given" in out
    assert "None" not in out


def test_envelope_is_data(tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    # When the kernels learn HV/H = 4, changing the table is all the check needs.
    wider = dataclasses.replace(envelope.KERNEL_ENVELOPE, value_heads_per_key_head=(1, 2, 3, 4))
    monkeypatch.setattr(envelope, "KERNEL_ENVELOPE", wider)
    folder = variant(tmp_path, "qwen3_6_27b", set_text(linear_num_value_heads=64))
    code, report = run_json(capsys, folder)
    assert code == 0
    assert reasons_by_check(report)["head_ratio"]["status"] == "pass"


def test_heads_that_do_not_split_for_tp2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = variant(tmp_path, "qwen3_6_27b", set_text(linear_num_key_heads=3, linear_num_value_heads=9))
    code, out, _ = run_cli(capsys, folder)
    assert code == 0
    assert "TP=1: H=3 HV=9 conv_dim=1920 | TP=2: impossible (H=3, HV=9)" in out
    assert "WARN tensor_parallel: GDN heads do not split for TP=2 (H=3, HV=9 not divisible" in out
    code, report = run_json(capsys, folder)
    assert report["facts"]["tensor_parallel"][1] == {
        "tp": 2,
        "divisible": False,
        "not_divisible": ["H=3", "HV=9"],
    }


# ------------------------------------------------------------------------------------------------
# Architectures.
# ------------------------------------------------------------------------------------------------


def test_unknown_architecture_with_gdn_fields_is_a_warned_candidate(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    def edit(config: dict[str, Any]) -> None:
        config["architectures"] = ["Qwen4ExpForConditionalGeneration"]

    code, report = run_json(capsys, variant(tmp_path, "qwen3_6_27b", edit))
    assert code == 0
    reason = reasons_by_check(report)["architecture"]
    assert reason["status"] == "warn"
    assert "not an architecture caovan knows" in reason["message"]


def test_unknown_linear_attention_model_without_gdn_fields(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Another family's linear attention (no linear_num_key_heads & co.): not a candidate, and not
    # a usage error either, since the config is valid for its own model.
    config = {
        "architectures": ["OlmoHybridForCausalLM"],
        "model_type": "olmo_hybrid",
        "num_hidden_layers": 4,
        "layer_types": ["linear_attention"] * 3 + ["full_attention"],
        "torch_dtype": "bfloat16",
    }
    folder = tmp_path / "olmo"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(config))
    code, report = run_json(capsys, folder)
    assert code == 1
    reason = reasons_by_check(report)["gdn_heads"]
    assert reason["status"] == "fail"
    assert "missing linear_num_key_heads" in reason["message"]


# ------------------------------------------------------------------------------------------------
# Dtypes and quantization.
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("dtype", "status", "advice"),
    [
        ("float16", "pass", False),
        ("bfloat16", "warn", True),
        ("float32", "warn", True),
        (_DELETE, "warn", True),
    ],
)
def test_dtype_advice(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    dtype: object,
    status: str,
    advice: bool,
) -> None:
    code, report = run_json(capsys, variant(tmp_path, "qwen3_6_27b", set_text(dtype=dtype)))
    assert code == 0
    assert reasons_by_check(report)["dtype"]["status"] == status
    assert any("--dtype half" in item for item in report["advice"]) is advice


def test_torch_dtype_at_top_level_is_read(capsys: pytest.CaptureFixture[str]) -> None:
    code, report = run_json(capsys, FIXTURES / "qwen3_next_80b_a3b")
    assert report["facts"]["dtype"] == "bfloat16"
    assert reasons_by_check(report)["dtype"]["status"] == "warn"


def test_root_dtype_wins_over_text_config_dtype(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # vLLM reads the root config's dtype first and falls back to text_config's.
    def edit(config: dict[str, Any]) -> None:
        config["torch_dtype"] = "float16"

    code, report = run_json(capsys, variant(tmp_path, "qwen3_6_27b", edit))
    assert report["facts"]["dtype"] == "float16"
    assert reasons_by_check(report)["dtype"]["message"] == "float16 (torch_dtype)"


def test_bf16_ssm_state_gets_advice(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = variant(tmp_path, "qwen3_6_27b", set_text(mamba_ssm_dtype="bfloat16"))
    code, report = run_json(capsys, folder)
    assert code == 0
    assert reasons_by_check(report)["ssm_state_dtype"]["status"] == "warn"
    assert any("--mamba-ssm-cache-dtype float32" in item for item in report["advice"])


def test_ssm_state_dtype_the_kernels_refuse_fails(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # vLLM allocates the SSM state in the config's dtype: an int8 state would leave every GDN layer to vLLM.
    folder = variant(tmp_path, "qwen3_6_27b", set_text(mamba_ssm_dtype="int8"))
    code, report = run_json(capsys, folder)
    assert code == 1 and report["verdict"] == "not a candidate"
    reason = reasons_by_check(report)["ssm_state_dtype"]
    assert reason["status"] == "fail"
    assert reason["message"] == (
        "text_config.mamba_ssm_dtype: ssm_state_dtype=int8: the kernels take float16, bfloat16 or float32"
    )
    assert any("--mamba-ssm-cache-dtype float32" in item for item in report["advice"])


@pytest.mark.parametrize(
    ("quantization_config", "method", "status", "note"),
    [
        (
            {"bits": 4, "group_size": 128, "quant_method": "awq", "version": "gemm"},
            "awq",
            "pass",
            "AWQ-Marlin on SM75",
        ),
        (
            {"bits": 4, "group_size": 128, "quant_method": "gptq", "desc_act": False},
            "gptq",
            "pass",
            "GPTQ-Marlin on SM75",
        ),
        (
            {"bits": 4, "group_size": 128, "quant_method": "AutoRound"},
            "auto-round",
            "pass",
            "Marlin on SM75",
        ),
        (
            {"quant_method": "fp8", "weight_block_size": [128, 128]},
            "fp8",
            "warn",
            "check vLLM support",
        ),
        (
            {
                "quant_method": "compressed_tensors",
                "config_groups": {
                    "group_0": {
                        "weights": {"type": "float", "num_bits": 8, "strategy": "channel"},
                        "input_activations": {"type": "float", "num_bits": 8, "dynamic": True},
                    }
                },
            },
            "compressed-tensors",
            "warn",
            "check vLLM support",
        ),
        ({"quant_method": "mystery"}, "mystery", "warn", "not a method caovan knows"),
    ],
)
def test_quantization_notes(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    quantization_config: dict[str, Any],
    method: str,
    status: str,
    note: str,
) -> None:
    def edit(config: dict[str, Any]) -> None:
        config["quantization_config"] = quantization_config

    code, report = run_json(capsys, variant(tmp_path, "qwen3_6_27b", edit))
    assert code == 0  # quantization never decides the verdict on its own
    assert report["facts"]["quantization"]["method"] == method
    reason = reasons_by_check(report)["quantization"]
    assert reason["status"] == status
    assert note in reason["message"]
    assert any(note in item for item in report["advice"]) is (status == "warn")


def test_quantization_config_inside_text_config_is_found(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = variant(tmp_path, "qwen3_6_27b", set_text(quantization_config={"quant_method": "gptq", "bits": 4}))
    code, report = run_json(capsys, folder)
    assert report["facts"]["quantization"] == {
        "method": "gptq",
        "detail": "4-bit",
        "source": "text_config.quantization_config",
    }


# ------------------------------------------------------------------------------------------------
# Usage errors: exit 2, one line on stderr, nothing on stdout.
# ------------------------------------------------------------------------------------------------


def assert_usage_error(
    capsys: pytest.CaptureFixture[str], folder: Path, *expected: str, json_flag: bool = False
) -> None:
    argv: list[str | Path] = [folder, "--json"] if json_flag else [folder]
    code, out, err = run_cli(capsys, *argv)
    assert code == 2
    assert out == ""
    assert err.startswith("caovan check-model: error: ")
    assert err.count("\n") == 1 and err.endswith("\n"), err
    for text in expected:
        assert text in err, err


@pytest.mark.parametrize("json_flag", [False, True])
def test_missing_folder(tmp_path: Path, capsys: pytest.CaptureFixture[str], json_flag: bool) -> None:
    missing = tmp_path / "nope"
    assert_usage_error(capsys, missing, f"model folder not found: {missing}", json_flag=json_flag)


def test_file_instead_of_folder(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "config.json"
    path.write_text("{}")
    assert_usage_error(capsys, path, f"not a folder: {path}")


def test_folder_without_config(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert_usage_error(capsys, tmp_path, f"no config.json in {tmp_path}")


def test_config_json_that_is_a_broken_link(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "config.json").symlink_to(tmp_path / "gone.json")
    assert_usage_error(capsys, tmp_path, f"{tmp_path / 'config.json'}: a broken link to {tmp_path / 'gone.json'}")


def test_config_json_that_is_a_folder(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "config.json").mkdir()
    assert_usage_error(capsys, tmp_path, "config.json is a folder, not a JSON file")


def test_invalid_json_names_file_line_and_column(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "config.json").write_text('{\n  "architectures": ["X"],\n  "num_hidden_layers": 4\n  "oops": 1\n}\n')
    assert_usage_error(
        capsys,
        tmp_path,
        f"{tmp_path / 'config.json'}: invalid JSON at line 4, column 3: Expecting ',' delimiter",
    )


def test_non_utf8_config(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "config.json").write_bytes(b'{"model_type": "\xff"}')
    assert_usage_error(capsys, tmp_path, "config.json: not UTF-8 text (bad byte at offset 16)")


@pytest.mark.parametrize(("payload", "kind"), [("[1, 2]", "array"), ('"qwen"', "string"), ("null", "null")])
def test_non_object_json(tmp_path: Path, capsys: pytest.CaptureFixture[str], payload: str, kind: str) -> None:
    (tmp_path / "config.json").write_text(payload)
    assert_usage_error(capsys, tmp_path, f"top level must be a JSON object, got {kind}")


@pytest.mark.parametrize(
    ("edit", "expected"),
    [
        (
            set_text(linear_num_key_heads="16"),
            'text_config.linear_num_key_heads must be a positive integer, got "16" (string)',
        ),
        (
            set_text(linear_key_head_dim=0),
            "text_config.linear_key_head_dim must be a positive integer, got 0 (number)",
        ),
        (
            set_text(linear_value_head_dim=128.0),
            "text_config.linear_value_head_dim must be a positive integer, got 128.0 (number)",
        ),
        (
            set_text(num_hidden_layers=True),
            "text_config.num_hidden_layers must be a positive integer, got true (boolean)",
        ),
        (
            set_text(mtp_num_hidden_layers=-1),
            "text_config.mtp_num_hidden_layers must be an integer >= 0, got -1 (number)",
        ),
        (
            set_text(layer_types="linear_attention"),
            "text_config.layer_types must be an array of strings",
        ),
        (
            set_text(layer_types=["linear_attention", 3]),
            "text_config.layer_types must be an array of strings",
        ),
        (set_text(dtype=16), "text_config.dtype must be a string, got 16 (number)"),
        (
            set_text(linear_num_value_heads=_DELETE),
            "text_config.linear_num_value_heads missing: needed for the GDN layers of Qwen3_5ForConditionalGeneration",
        ),
        (
            set_text(layer_types=["linear_attention"] * 63),
            "text_config.layer_types has 63 entries but text_config.num_hidden_layers is 64",
        ),
        (
            set_text(layer_types=_DELETE, num_hidden_layers=_DELETE),
            "text_config.num_hidden_layers missing: needed to count the GDN layers",
        ),
    ],
)
def test_wrong_or_missing_fields_in_text_config(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    edit: Callable[[dict[str, Any]], None],
    expected: str,
) -> None:
    folder = variant(tmp_path, "qwen3_6_27b", edit)
    assert_usage_error(capsys, folder, f"{folder / 'config.json'}: {expected}")


@pytest.mark.parametrize(
    ("key", "value", "expected"),
    [
        ("text_config", [1], "text_config must be a JSON object, got [1] (array)"),
        ("architectures", "Qwen3_5ForConditionalGeneration", "architectures must be an array of"),
        ("quantization_config", "awq", 'quantization_config must be a JSON object, got "awq"'),
        ("quantization_config", {"quant_method": 4}, "quantization_config.quant_method must be a"),
    ],
)
def test_wrong_top_level_field_types(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], key: str, value: Any, expected: str
) -> None:
    def edit(config: dict[str, Any]) -> None:
        config[key] = value

    folder = variant(tmp_path, "qwen3_6_27b", edit)
    assert_usage_error(capsys, folder, f"{folder / 'config.json'}: {expected}")


def test_qwen3_next_missing_head_field_names_top_level_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = variant(tmp_path, "qwen3_next_80b_a3b", set_text(linear_conv_kernel_dim=_DELETE))
    assert_usage_error(
        capsys,
        folder,
        "config.json: linear_conv_kernel_dim missing: needed for the GDN layers of Qwen3NextForCausalLM",
    )


def test_invalid_weight_index_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = variant(tmp_path, "qwen3_6_27b")
    (folder / "model.safetensors.index.json").write_text('{"weight_map": {,}}')
    assert_usage_error(capsys, folder, "model.safetensors.index.json: invalid JSON at line 1, column 17")


def test_weight_index_without_weight_map(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = variant(tmp_path, "qwen3_6_27b")
    (folder / "model.safetensors.index.json").write_text('{"metadata": {}}')
    assert_usage_error(capsys, folder, "weight_map must be a JSON object")


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (b"\x01\x02", "not a safetensors file (shorter than 8 bytes)"),
        (struct.pack("<Q", 100) + b'{"a":', "truncated safetensors header"),
        (struct.pack("<Q", 2**40), "not a safetensors file (header length"),
        (struct.pack("<Q", 3) + b"[1]", "safetensors header must be a JSON object"),
    ],
)
def test_broken_safetensors_header(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: bytes, expected: str
) -> None:
    folder = variant(tmp_path, "qwen3_6_27b")
    (folder / "model.safetensors").write_bytes(content)
    assert_usage_error(capsys, folder, "model.safetensors", expected)


def test_text_only_variant_is_a_warning_not_a_pass(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # vLLM 0.20.2 and 0.21.0 register only the multimodal Qwen3.5 classes: a text-only checkpoint does not load there.
    def text_only(config: dict[str, Any]) -> None:
        text = config.pop("text_config")
        config.clear()
        config.update(text, architectures=["Qwen3_5ForCausalLM"], model_type="qwen3_5_text")

    code, report = run_json(capsys, variant(tmp_path, "qwen3_6_27b", text_only))
    architecture = reasons_by_check(report)["architecture"]
    assert architecture["status"] == "warn", architecture
    assert "vLLM 0.20.2 and 0.21.0 do not register" in architecture["message"]
    assert "Qwen3_5ForConditionalGeneration" in architecture["message"]


def test_a_hugging_face_name_is_read_from_the_local_cache(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # What `caovan serve` checks for AutoSpec, check-model checks too: the cached snapshot of the default branch.
    constants = pytest.importorskip("huggingface_hub.constants", reason="huggingface_hub comes with vLLM")
    snapshot = tmp_path / "hub" / "models--Qwen--Qwen3.6-27B" / "snapshots" / "0123abc"
    snapshot.mkdir(parents=True)
    shutil.copy(FIXTURES / "qwen3_6_27b" / "config.json", snapshot)
    (tmp_path / "hub" / "models--Qwen--Qwen3.6-27B" / "refs").mkdir()
    (tmp_path / "hub" / "models--Qwen--Qwen3.6-27B" / "refs" / "main").write_text("0123abc")
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.chdir(tmp_path)
    code, report = run_json(capsys, Path("Qwen/Qwen3.6-27B"))
    assert code == 0 and report["model_dir"] == str(snapshot)
    code, _, err = run_cli(capsys, "Qwen/Qwen3.5-9B")
    assert code == 2
    assert "model folder not found: Qwen/Qwen3.5-9B (nor a Hugging Face name whose config.json is in" in err
