"""``bench prefill``'s sm_75 figures: the sm75 entry's kernels compiled for an RTX 2080 Ti, and each case's waves."""

from __future__ import annotations

import pytest

from caovan.bench.prefill_cases import PREFILL_SHAPES, PrefillCase
from caovan.bench.prefill_sm75 import case_waves, format_sm75, kernel_figures, sm75_section
from caovan.kernels.gdn_prefill.launch_configs import LAUNCH_CONFIGS, path_forced

pytest.importorskip("triton", reason="triton is not installed: nothing to compile")

_FIGURES = {  # programs per SM as an RTX 2080 Ti would hold them (made up, round numbers)
    name: {"blocks_per_sm": per_sm, "registers": 128, "shared_bytes": 1024}
    for name, per_sm in (
        ("_caovan_gdn_prefill_wy_kernel", 1),
        ("_caovan_gdn_prefill_state_kernel", 2),
        ("_caovan_gdn_prefill_wy_kernel[PAIRED]", 4),
        ("_caovan_gdn_prefill_merge_kernel", 2),
        ("_caovan_gdn_prefill_chunk_state_kernel", 2),
        ("_caovan_gdn_prefill_output_kernel", 3),
    )
}


def _launches(waves):
    return {launch["kernel"].removeprefix("_caovan_gdn_prefill_"): launch for launch in waves["launches"]}


def test_a_short_case_takes_the_fused_path_with_its_grids_and_waves():
    case = PrefillCase("qwen3.6-27b-tp2", 1000, 4)  # 24 value heads of 128; 4 sequences, 4000 tokens in all
    waves = case_waves(case, _FIGURES)
    assert waves["path"] == "fused"
    launches = _launches(waves)
    assert list(launches) == ["wy_kernel", "state_kernel"]
    assert launches["wy_kernel"]["grid"] == [125 + 4, 24]
    assert launches["wy_kernel"]["waves"] == round((125 + 4) * 24 / 68, 2)
    bv = LAUNCH_CONFIGS["sm75"].state.BV
    assert launches["state_kernel"]["programs"] == 128 // bv * 24 * 4
    assert launches["state_kernel"]["waves"] == round(128 // bv * 24 * 4 / (68 * 2), 2)


def test_the_sm75_entry_takes_the_fused_path_at_every_length():
    assert case_waves(PrefillCase("qwen3.6-27b-tp1", 65536, 4), _FIGURES)["path"] == "fused"


def test_the_chunked_path_where_forced_with_its_paired_wy_figures():
    case = PrefillCase("qwen3.6-27b-tp1", 16384, 1)
    waves = case_waves(case, _FIGURES, path_forced(LAUNCH_CONFIGS["sm75"], "chunked"))
    assert waves["path"] == "chunked"
    launches = _launches(waves)
    assert list(launches) == ["wy_kernel", "merge_kernel", "chunk_state_kernel", "output_kernel"]
    assert launches["wy_kernel"]["waves"] == round((512 + 1) * 48 / (68 * 4), 2)
    assert launches["merge_kernel"]["grid"] == [256 + 1, 48]
    chunked = LAUNCH_CONFIGS["sm75"].chunked
    assert launches["output_kernel"]["grid"] == [512 + 1, 48, 128 // chunked.output.BV]
    assert launches["chunk_state_kernel"]["grid"] == [128 // chunked.state.BV, 48, 1]


def test_a_kernel_without_a_register_count_has_no_waves():
    waves = case_waves(PrefillCase("tiny", 64, 1), {})
    assert all(launch["waves"] is None for launch in waves["launches"])


def test_bf16_and_the_interpreter_give_a_reason_instead_of_figures(monkeypatch):
    shape = PREFILL_SHAPES["tiny"]
    assert "no RTX 2080 Ti runs bf16" in kernel_figures(shape, "bfloat16", "float32")
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    section = sm75_section([PrefillCase("tiny", 64, 1)])
    assert section["kernels"] == {"tiny act=float16 ssm=float32": "not compiled: the kernels were imported under "
                                  "TRITON_INTERPRET=1"}  # fmt: skip
    assert section["cases"] == {}
    assert "not compiled" in format_sm75(section)


@pytest.mark.sm75_gate
def test_the_sm75_entry_compiles_for_the_tiny_shape_with_every_figure(monkeypatch):
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    from caovan.kernels.gdn_prefill.aot import COMPILED_NAMES

    cases = [PrefillCase("tiny", 64, 1), PrefillCase("tiny", 64, 4), PrefillCase("tiny", 64, 1, "bfloat16")]
    section = sm75_section(cases)
    kernels = section["kernels"]["tiny act=float16 ssm=float32"]
    assert list(kernels) == list(COMPILED_NAMES)
    for figure in kernels.values():
        assert 0 < figure["shared_bytes"] <= 65536 and figure["registers"] > 0 and figure["blocks_per_sm"] >= 1
    assert set(section["cases"]) == {"tiny/L64/B1", "tiny/L64/B4"}
    assert all(launch["waves"] > 0 for launch in section["cases"]["tiny/L64/B1"]["launches"])
    assert section["launch_entry"]["arch"] == "sm75"
