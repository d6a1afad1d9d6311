"""vLLM's KV cache layout for GDN hybrids in arithmetic, Elastic-KV's lines, and asking vLLM's own planning code.

The arithmetic is checked against hand-computed numbers here and against the installed vLLM's own functions on
every golden case in test_profiles_golden.py; here also what happens where vLLM's functions cannot be asked.
"""

from __future__ import annotations

import dataclasses

import pytest

from caovan.bench.model_folders import write_architecture_config
from caovan.profiles import Gpu, KvLayoutError, ProfileError, hybrid_layout, read_model_facts
from caovan.profiles.elastic_kv import (
    KvRoom,
    batched_tokens_line,
    context_line,
    kv_dtype_line,
    num_seqs_line,
    vllm_batch_defaults,
)

GIB = 1 << 30
MIB = 1 << 20
#: One Qwen3.6-27B GDN layer at TP=2: 5120 conv channels x 3 steps in bf16, 24 heads of 128 x 128 fp32 state.
GDN_TP2 = 5120 * 3 * 2 + 24 * 128 * 128 * 4


@pytest.fixture(scope="module")
def qwen27b(tmp_path_factory):
    return read_model_facts(write_architecture_config("qwen3.6-27b", tmp_path_factory.mktemp("q27")))


def test_the_block_holds_one_gdn_state_in_multiples_of_16_tokens(qwen27b):
    layout = hybrid_layout(qwen27b, 2, "bfloat16")
    assert layout.gdn_state_bytes == GDN_TP2
    # 2048 B per attention token and layer: 16 x cdiv(1603584, 16 x 2048) = 16 x 49 = 784 tokens.
    assert (layout.attention_token_bytes, layout.block_size, layout.page_bytes) == (2048, 784, 784 * 2048)
    # MTP 3 widens the conv state by 3 steps: 1634304 B, 16 x 50 = 800 tokens; fp8 halves the token: 1600.
    assert hybrid_layout(qwen27b, 2, "bfloat16", speculative_tokens=3).block_size == 800
    assert hybrid_layout(qwen27b, 2, "fp8", speculative_tokens=3).block_size == 1600
    # The user's --block-size is the alignment where larger: 64 x cdiv(1603584, 64 x 2048) = 64 x 13 = 832.
    assert hybrid_layout(qwen27b, 2, "bfloat16", block_size=64).block_size == 832
    assert hybrid_layout(qwen27b, 2, "bfloat16", block_size=2048).block_size == 2048


def test_groups_are_of_one_size_and_the_last_one_padded(qwen27b):
    plain = hybrid_layout(qwen27b, 2, "bfloat16")
    assert (plain.group_size, plain.attention_groups, plain.gdn_groups, plain.padding_layers) == (16, 1, 3, 0)
    drafted = hybrid_layout(qwen27b, 2, "bfloat16", speculative_tokens=3, drafter_layers=1)
    assert (drafted.group_size, drafted.attention_groups, drafted.gdn_groups, drafted.padding_layers) == (17, 1, 3, 3)
    # Counts within 1.5x of each other: one group each, of the larger count (vLLM's gpt-oss + eagle case).
    near = hybrid_layout(dataclasses.replace(qwen27b, full_attention_layers=12, gdn_layers=13), 2, "bfloat16")
    assert (near.group_size, near.attention_groups, near.gdn_groups, near.padding_layers) == (13, 1, 1, 1)


def test_one_request_and_the_reported_size_follow_vllms_formulas(qwen27b):
    layout = hybrid_layout(qwen27b, 2, "bfloat16", speculative_tokens=3, drafter_layers=1)
    # 262144 tokens: cdiv(262144, 800) = 328 attention blocks + 3 GDN groups x (1 + 3) state slots.
    assert layout.blocks_per_request(262144) == 328 + 12
    assert layout.bytes_per_request(262144) == 340 * 17 * 800 * 2048
    blocks = layout.num_blocks(10 * GIB)
    assert blocks == 10 * GIB // (800 * 2048) // 17 == 385
    assert layout.reported_tokens(blocks, 262144) == int(385 / 340 * 262144) == 296839
    # Prefix caching ("align"): two state slots per group besides the speculative ones.
    align = dataclasses.replace(layout, mamba_cache_mode="align")
    assert align.blocks_per_request(262144) == 328 + 15
    # The longest context is whole blocks: 385 - 12 = 373 blocks of 800 tokens, at most the cap.
    assert layout.longest_context(10 * GIB, 10**6) == 373 * 800
    assert layout.longest_context(10 * GIB, 262144) == 262144
    assert layout.longest_context(12 * 17 * 800 * 2048, 262144) == 0  # the GDN slots alone


def test_what_the_arithmetic_does_not_follow_is_one_error(qwen27b):
    with pytest.raises(KvLayoutError, match="--kv-cache-dtype fp8_inc: its bytes per value are unknown"):
        hybrid_layout(qwen27b, 2, "fp8_inc")
    with pytest.raises(KvLayoutError, match="mamba_cache_mode all: the profiles follow vLLM's GDN cache in modes"):
        hybrid_layout(qwen27b, 2, "bfloat16", mamba_cache_mode="all")


# Elastic-KV's lines


SM75 = ("auto", "fp8", "fp8_e4m3", "fp8_e5m2")


def test_the_smallest_kv_dtype_vllm_takes_wins_and_auto_wins_ties():
    line = kv_dtype_line(SM75, None, "bfloat16", (7, 5))
    assert (line.value, line.added) == ("fp8", True)
    only_auto = kv_dtype_line(("auto", "bfloat16"), None, "bfloat16", (7, 5))
    assert (only_auto.value, only_auto.added, only_auto.vllm_default) == ("auto", False, True)
    assert only_auto.render().startswith("Elastic-KV: --kv-cache-dtype auto left to vLLM's default: the smallest")
    unknown = kv_dtype_line(("nvfp4",), None, "bfloat16", (10, 0))
    assert unknown.vllm_default and "none of the KV-cache dtypes caovan knows the size of on sm_100" in unknown.render()
    kept = kv_dtype_line(SM75, "fp8_e5m2", "bfloat16", (7, 5))
    assert kept.render() == "Elastic-KV: --kv-cache-dtype fp8_e5m2 kept (yours): 1 B per cached value"


def _room(free_gib=10.0):
    gpu = Gpu(0, "NVIDIA GeForce RTX 2080 Ti", (7, 5), 22 * GIB, 22 * GIB)
    return KvRoom(gpu, 1.0, 22 * GIB - int(free_gib * GIB) - 2 * GIB, 2 * GIB)


def test_the_context_is_the_models_or_the_users_and_lowered_only_where_it_cannot_fit(qwen27b):
    layout = hybrid_layout(qwen27b, 2, "bfloat16", speculative_tokens=3, drafter_layers=1)
    line, context = context_line(layout, _room(10), model_max=262144, user_value=None)
    assert (context, line.added, line.warning) == (262144, True, None)
    line, context = context_line(layout, _room(4), model_max=262144, user_value=None)
    assert context == (4 * GIB // (800 * 2048) // 17 - 12) * 800 == 113600
    assert line.render().startswith(
        "Elastic-KV: --max-model-len 113600 added, LOWERED from the model's 262144: the model's 262144 tokens do not "
        "fit: one 262144-token sequence takes 340 blocks (328 of attention KV, 12 GDN state slots) x 17 layers x "
        "1.56 MiB = 8.82 GiB, 4.82 GiB more than the 4.00 GiB left for the KV cache on GPU 0"
    )
    kept, context = context_line(layout, _room(4), model_max=262144, user_value=100000)
    assert (context, kept.kept) == (100000, True)
    with pytest.raises(
        ProfileError, match=r"^--max-model-len 200000 \(yours\) does not fit at TP=2: .* at most 113600"
    ):
        context_line(layout, _room(4), model_max=262144, user_value=200000)
    with pytest.raises(ProfileError, match="^no context fits at TP=2: one 1-token sequence takes 13 blocks"):
        context_line(layout, _room(0.1), model_max=262144, user_value=None)


def test_sequences_are_capped_by_the_gdn_state_slots_the_pool_holds(qwen27b):
    layout = hybrid_layout(qwen27b, 2, "bfloat16", speculative_tokens=3, drafter_layers=1)
    line, seqs = num_seqs_line(layout, 385, default=256, user_value=None)
    assert seqs == 385 // 13 == 29 and line.render().endswith("vLLM's default 256 for this card would overcommit them")
    line, seqs = num_seqs_line(layout, 385 * 20, default=256, user_value=None)
    assert seqs == 256 and line.render().endswith("vLLM's default 256 for this card fits")
    kept, seqs = num_seqs_line(layout, 385, default=256, user_value=64)
    assert seqs == 64 and kept.render().endswith("; vLLM preempts past 29")


def test_batched_tokens_hold_one_decode_step_of_every_sequence(qwen27b):
    layout = hybrid_layout(qwen27b, 2, "bfloat16", speculative_tokens=3, drafter_layers=1)
    assert batched_tokens_line(layout, context=262144, num_seqs=29, default=2048, user_value=None)[1] == 2048
    line, tokens = batched_tokens_line(layout, context=262144, num_seqs=600, default=2048, user_value=None)
    assert tokens == 2400 and "raised to one decode step of 600 sequences x 4 tokens = 2400" in line.render()
    line, tokens = batched_tokens_line(layout, context=1024, num_seqs=2, default=2048, user_value=None)
    assert tokens == 1024 and "at most the context, 1024 tokens" in line.render()
    with pytest.raises(
        ProfileError, match=r"--max-num-batched-tokens 8 \(yours\) is below --max-num-seqs 29: .*21 short"
    ):
        batched_tokens_line(layout, context=262144, num_seqs=29, default=2048, user_value=8)


def test_vllms_batch_defaults_follow_the_card():
    def card(name, total_gib):
        return Gpu(0, name, (8, 0), total_gib * GIB, total_gib * GIB)

    assert vllm_batch_defaults(card("NVIDIA GeForce RTX 2080 Ti", 22)) == (256, 2048)
    assert vllm_batch_defaults(card("NVIDIA H100 80GB HBM3", 80)) == (1024, 8192)
    assert vllm_batch_defaults(card("NVIDIA A100-SXM4-80GB", 80)) == (256, 2048)


# Asking vLLM's own planning code


def test_vllms_planning_leaves_its_logger_as_it_was_and_reports_padding(qwen27b):
    import vllm.v1.core.kv_cache_utils as utils

    from caovan.profiles.vllm_kv_cache import vllm_kv_report

    logger = utils.logger
    layout = hybrid_layout(qwen27b, 2, "bfloat16", speculative_tokens=3, drafter_layers=1)
    report = vllm_kv_report(qwen27b, layout, 262144, 10 * GIB)
    assert utils.logger is logger
    assert (report.num_blocks, report.tokens, report.refusal) == (385, 296839, None)
    assert report.warnings == ("Add 3 padding layers, may waste at most 6.25% KV cache memory",)


def test_what_caovan_cannot_hand_vllms_planning_is_said(qwen27b):
    from caovan.profiles.vllm_kv_cache import VllmKvUnavailable, _build, _Config

    config = _Config({"model_config": {"max_model_len": 8}})
    config.model_config.max_model_len = 16  # vLLM's search sets it, and reads it back
    assert config.model_config.max_model_len == 16
    with pytest.raises(VllmKvUnavailable, match=r"reads vllm_config\.model_config\.hf_config, which caovan does not"):
        _ = config.model_config.hf_config

    @dataclasses.dataclass
    class FutureSpec:
        block_size: int
        page_layout: str

    with pytest.raises(VllmKvUnavailable, match="FutureSpec requires page_layout, which caovan cannot fill"):
        _build(FutureSpec, {"block_size": 16})


def test_the_kv_dtypes_are_read_from_vllms_decisions_or_why_not(monkeypatch):
    import caovan.sm75.vllm_decisions as decisions
    import caovan.sm75.vllm_questions as questions
    from caovan.serving.serve_profiles import vllm_kv_cache_dtypes

    ask = vllm_kv_cache_dtypes.__wrapped__

    def answer(entries, unanswered=()):
        doc = {"kv_cache_dtypes": entries, "unanswered": list(unanswered)}
        monkeypatch.setattr(decisions, "probe_vllm_decisions", lambda *args, **kwargs: doc)

    def installed(yes):
        said = "flashinfer-python 0.6 is installed here" if yes else "the flashinfer package is not installed here"
        monkeypatch.setattr(questions, "flashinfer_package", lambda: (yes, said))

    entries = [
        {"dtype": "auto", "accepted_by": ["TRITON_ATTN"], "refused_by": [], "auto": {"backend": "TRITON_ATTN"}},
        {"dtype": "fp8", "accepted_by": ["FLASHINFER"], "refused_by": [], "auto": {"backend": "FLASHINFER"}},
    ]
    answer(entries)
    installed(True)
    assert ask((7, 5), "x") == ("auto", "fp8")
    installed(False)  # vLLM's pick for fp8 would not import: only auto is taken
    assert ask((7, 5), "x") == ("auto",)
    answer(entries[1:])
    assert ask((7, 5), "x") == (
        "vLLM picks FLASHINFER for every KV-cache dtype it takes here, but the flashinfer package is not installed here"
    )
    answer([], [{"question": "kv_cache_dtypes", "why": "no CUDA platform"}])
    assert ask((7, 5), "x") == "kv_cache_dtypes: no CUDA platform"
