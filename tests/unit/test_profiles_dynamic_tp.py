"""DynamicTP over fake GPU inventories: the smallest TP that fits, the user's kept, the impossible refused."""

from __future__ import annotations

import dataclasses

import pytest

from caovan.bench.model_folders import write_architecture_config
from caovan.profiles import (
    Gpu,
    ProfileError,
    auto_mem,
    dynamic_tp,
    hybrid_layout,
    read_model_facts,
    tp_problems,
)

GIB = 1 << 30


def _card(index, total_gib, free_gib, name="NVIDIA GeForce RTX 2080 Ti", capability=(7, 5)):
    return Gpu(index, name, capability, int(total_gib * GIB), int(free_gib * GIB))


TWO_22GB = [_card(0, 22, 21.5), _card(1, 22, 21.5)]


@pytest.fixture(scope="module")
def qwen27b(tmp_path_factory):
    """Qwen3.6-27B's architecture at its released context (262144), bf16 weights estimated from the config."""
    folder = write_architecture_config("qwen3.6-27b", tmp_path_factory.mktemp("q27"))
    facts = read_model_facts(folder)
    assert facts.max_positions == 262144
    return facts


@pytest.fixture(scope="module")
def qwen27b_awq(qwen27b):
    # What the safetensors headers of an AWQ int4 27B checkpoint add up to, about 17 GB.
    return dataclasses.replace(qwen27b, quantization="awq", weight_bytes=17_000_000_000, weight_source="headers")


def test_kv_and_gdn_state_per_gpu_follow_the_tp_split(qwen27b):
    # One attention layer's token: 4 KV heads of 256, K and V, 2 bytes; heads split over TP, replicated past 4.
    assert hybrid_layout(qwen27b, 1, "bfloat16").attention_token_bytes == 2 * 4 * 256 * 2
    assert hybrid_layout(qwen27b, 2, "bfloat16").attention_token_bytes == 2 * 2 * 256 * 2
    assert hybrid_layout(qwen27b, 8, "fp8").attention_token_bytes == 2 * 1 * 256 * 1
    # One GDN layer: 48 heads of 128 x 128 fp32 state, 10240 conv channels x 3 steps in bf16, split over TP.
    assert hybrid_layout(qwen27b, 1, "bfloat16").gdn_state_bytes == 48 * 128 * 128 * 4 + 10240 * 3 * 2
    assert hybrid_layout(qwen27b, 2, "bfloat16").gdn_state_bytes == (48 * 128 * 128 * 4 + 10240 * 3 * 2) // 2
    # Without a drafter: 16 attention and 48 GDN layers, 4 groups of 16; a block holds one GDN state.
    layout = hybrid_layout(qwen27b, 2, "bfloat16")
    assert (layout.attention_layers, layout.group_size, layout.attention_groups, layout.gdn_groups) == (16, 16, 1, 3)
    assert layout.block_size == 784 and layout.page_bytes == 784 * 2048 >= layout.gdn_state_bytes


def test_tp_problems_name_the_heads_that_do_not_split(qwen27b):
    assert tp_problems(qwen27b, 2) == []
    assert tp_problems(qwen27b, 3) == [
        "16 GDN key heads do not split over 3 GPUs",
        "4 KV heads neither split over nor replicate onto 3 GPUs",
    ]
    assert tp_problems(qwen27b, 8) == []  # 24, 16 and 48 heads split; 4 KV heads replicate twice
    assert tp_problems(qwen27b, 16) == ["24 attention heads do not split over 16 GPUs"]


def test_the_awq_27b_on_two_22gb_cards_takes_tp2_with_every_number(qwen27b_awq):
    line = dynamic_tp(qwen27b_awq, TWO_22GB, kv_dtype="float16")
    assert (line.value, line.kept) == ("2", False)
    assert line.render() == (
        "DynamicTP: --tensor-parallel-size 2 added: weights 7.92 GiB per GPU (headers); "
        "KV 32768 B per token x 262144 tokens (in 335 blocks of 784) = 8.02 GiB; "
        "GDN state 0.07 GiB per sequence (3 state slots in vLLM's layout); reserve 2.00 GiB; "
        "18.00 GiB of the 21.50 GiB vLLM gets on GPU 0; "
        "TP=1 needs 34.01 GiB per GPU, 12.51 GiB more than the 21.50 GiB vLLM gets on GPU 0"
    )


def test_one_80gb_card_serves_the_bf16_27b_alone(qwen27b):
    line = dynamic_tp(qwen27b, [_card(0, 80, 79, "NVIDIA H100 80GB HBM3", (9, 0))], kv_dtype="bfloat16")
    assert line.value == "1" and "69.06 GiB of the 79.00 GiB vLLM gets on GPU 0" in line.render()


def test_the_tightest_gpu_decides(qwen27b_awq):
    half_used = [_card(0, 22, 21.5), _card(1, 22, 11)]  # another process holds half of GPU 1
    with pytest.raises(
        ProfileError, match="TP=2 needs 18.00 GiB per GPU, 7.00 GiB more than the 11.00 GiB vLLM gets on GPU 1"
    ):
        dynamic_tp(qwen27b_awq, half_used, kv_dtype="float16")


def test_a_model_that_fits_no_tp_is_one_line_with_what_is_missing(qwen27b):
    with pytest.raises(ProfileError) as error:
        dynamic_tp(qwen27b, TWO_22GB, kv_dtype="bfloat16")
    message = str(error.value)
    assert "\n" not in message
    assert "fits no tensor-parallel size on 2 GPU(s) (GPU 0 21.50 GiB free, GPU 1 21.50 GiB free)" in message
    assert "at a context of 262144 tokens" in message
    assert "TP=2 needs 35.53 GiB per GPU, 14.03 GiB more than the 21.50 GiB vLLM gets on GPU 0" in message


def test_the_users_tp_is_kept_and_checked_against_the_gpus(qwen27b):
    line = dynamic_tp(qwen27b, TWO_22GB, user_tp=2, kv_dtype="bfloat16")
    assert (line.value, line.kept) == ("2", True)
    assert line.render().startswith("DynamicTP: --tensor-parallel-size 2 kept (yours): ")
    with pytest.raises(ProfileError, match="--tensor-parallel-size 4: only 2 GPU"):
        dynamic_tp(qwen27b, TWO_22GB, user_tp=4, kv_dtype="bfloat16")


# AutoMem


def test_auto_mem_leaves_the_margin_on_the_tightest_card():
    line = auto_mem(TWO_22GB)
    # (21.5 - 1) / 22 = 0.9318... rounded down
    assert (line.value, line.kept) == ("0.93", False)
    assert line.render() == (
        "AutoMem: --gpu-memory-utilization 0.93 added: tightest GPU 0: 21.50 GiB free of 22.00 GiB, "
        "0.50 GiB held by others; margin 1.00 GiB kept; 0.93 x 22.00 GiB = 20.46 GiB for vLLM"
    )
    assert auto_mem([_card(0, 22, 21.5), _card(1, 22, 11)]).value == "0.45"
    assert auto_mem([_card(0, 80, 79.5, "NVIDIA H100 80GB HBM3", (9, 0))]).value == "0.95"  # the ceiling


def test_auto_mem_refuses_a_card_others_have_nearly_filled_and_a_share_it_cannot_get():
    with pytest.raises(ProfileError, match=r"GPU 1 has 5.00 GiB free of 22.00 GiB \(17.00 GiB held by other"):
        auto_mem([_card(0, 22, 21.5), _card(1, 22, 5)])
    assert (
        auto_mem(TWO_22GB, user_value=0.9)
        .render()
        .startswith("AutoMem: --gpu-memory-utilization 0.9 kept (yours): GPU 0")
    )
    with pytest.raises(ProfileError, match="--gpu-memory-utilization 0.99: GPU 0 has 21.50 GiB free of 22.00 GiB"):
        auto_mem(TWO_22GB, user_value=0.99)
