"""``caovan serve`` with its start-up profiles: flags added from (fake) measured GPUs, the user's kept, the impossible
refused before vLLM starts, and nothing added where nothing can be measured."""

from __future__ import annotations

import re

import pytest

from caovan import cli
from caovan.bench.model_folders import write_architecture_config, write_tiny_qwen3_next
from caovan.plugin.uniform_decode_guard import FullGraphSafety
from caovan.profiles import Gpu, GpuInventoryError
from caovan.serving.serve_command import COLD_START_TIMEOUTS, plan_serve
from caovan.serving.serve_flags import ServeArgsError, find_flag
from caovan.serving.serve_profiles import ProfileProbes

GIB = 1 << 30
TWO_22GB = [Gpu(i, "NVIDIA GeForce RTX 2080 Ti", (7, 5), 22 * GIB, int(21.5 * GIB)) for i in (0, 1)]
ONE_22GB = TWO_22GB[:1]
#: What vLLM 0.21.0 takes on sm_75 (tests/unit/test_profiles_golden.py asks the installed vLLM); the arithmetic alone
#: predicts the KV cache (test_profiles_golden checks vLLM's own functions agree with it).
SM75_PROBES = ProfileProbes(kv_cache_dtypes=lambda gpu: ("auto", "fp8", "fp8_e4m3", "fp8_e5m2"), ask_vllm=None)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return write_tiny_qwen3_next(tmp_path_factory.mktemp("models") / "next")


@pytest.fixture(scope="module")
def qwen27b(tmp_path_factory):
    return write_architecture_config("qwen3.6-27b", tmp_path_factory.mktemp("models") / "q27")


def plan(model, args, gpus=TWO_22GB, **kwargs):
    def measure():
        if isinstance(gpus, Exception):
            raise gpus
        return list(gpus)

    kwargs.setdefault(
        "judge_full_graphs", lambda pp: FullGraphSafety(with_caovan=True, without_caovan=False, reason="")
    )
    kwargs.setdefault("profile_probes", SM75_PROBES)
    kwargs.setdefault("judge_device_settings", lambda settings: None)
    return plan_serve(str(model), args, {}, vllm_env_names=set(COLD_START_TIMEOUTS), measure_gpus=measure, **kwargs)


def _value(result, flag):
    uses = find_flag(result.vllm_args, flag)
    assert len(uses) == 1, f"{flag} given {len(uses)} times in {result.vllm_args}"
    return uses[0].value


def _notes(result, prefix):
    return [note for note in result.notes if note.startswith(prefix)]


def test_missing_sizing_flags_are_added_with_their_reasons(tiny):
    result = plan(tiny, ["--port", "8001"])
    assert _value(result, "--tensor-parallel-size") == "1"
    assert _value(result, "--gpu-memory-utilization") == "0.93"
    (tp,) = _notes(result, "DynamicTP: --tensor-parallel-size 1 added: weights ")
    assert "estimated from config.json" in tp and "vLLM gets on GPU 0" in tp
    assert _notes(result, "AutoMem: --gpu-memory-utilization 0.93 added: tightest GPU 0: 21.50 GiB free")


def test_the_users_flags_are_kept_and_only_checked(tiny):
    result = plan(tiny, ["-tp", "2", "--gpu-memory-utilization", "0.8"])
    assert [use.value for use in find_flag(result.vllm_args, "--tensor-parallel-size", "-tp")] == ["2"]
    assert _value(result, "--gpu-memory-utilization") == "0.8"
    assert _notes(result, "DynamicTP: --tensor-parallel-size 2 kept (yours)")
    assert _notes(result, "AutoMem: --gpu-memory-utilization 0.8 kept (yours)")


def test_what_cannot_be_served_stops_before_vllm(tiny, qwen27b):
    with pytest.raises(ServeArgsError, match="--gpu-memory-utilization 0.99: GPU 0 has 21.50 GiB free"):
        plan(tiny, ["--gpu-memory-utilization", "0.99"])
    with pytest.raises(ServeArgsError, match="--tensor-parallel-size 4: only 2 GPU"):
        plan(tiny, ["--tensor-parallel-size", "4"])
    with pytest.raises(
        ServeArgsError, match="q27 fits no tensor-parallel size on 2 GPU.* context of 262144 tokens: TP=1 needs"
    ):
        plan(qwen27b, [])
    # The context the user asks for is the one sized: the bf16 27B does not fit two 22 GB cards even at 4096.
    with pytest.raises(ServeArgsError, match="at a context of 4096 tokens"):
        plan(qwen27b, ["--max-model-len", "4096"])


def test_nothing_is_added_where_nothing_can_be_measured(tiny):
    result = plan(tiny, [], gpus=GpuInventoryError("NVML does not start (Driver Not Loaded): no NVIDIA driver"))
    assert not find_flag(result.vllm_args, "--tensor-parallel-size", "-tp")
    assert _notes(result, "profiles: not applied, vLLM's defaults stand: no GPU measured (NVML does not start")
    remote = plan("org/not-here", [], locate=lambda model, revision: None, autospec=False)
    assert _notes(remote, "profiles: not applied, vLLM's defaults stand: the model is not a local folder")


def test_no_profile_turns_them_off(tiny, capsys):
    result = plan(tiny, [], profiles=False)
    assert not find_flag(result.vllm_args, "--gpu-memory-utilization")
    assert _notes(result, "profiles: off (--caovan-no-profile)")
    status = cli.main(["serve", str(tiny), "--caovan-no-profile", "--caovan-dry-run"])
    assert status == 0
    assert "[Caovan] serve: profiles: off (--caovan-no-profile)" in capsys.readouterr().err


@pytest.mark.parametrize(("mode", "share"), [("safe", "0.88"), ("normal", "0.93"), ("fast", "0.95")])
def test_the_profile_mode_sets_how_much_is_kept_back(tiny, mode, share):
    result = plan(tiny, [], profile_mode=mode)
    assert _value(result, "--gpu-memory-utilization") == share
    assert f"profiles: {mode} mode (--caovan-profile)" in result.notes


def test_an_unknown_profile_mode_is_one_error(tiny, capsys):
    with pytest.raises(ServeArgsError, match="--caovan-profile 'turbo': expected one of safe, normal, fast"):
        plan(tiny, [], profile_mode="turbo")
    assert cli.main(["serve", str(tiny), "--caovan-profile", "turbo", "--caovan-dry-run"]) == 2
    assert "invalid choice: 'turbo'" in capsys.readouterr().err


# Elastic-KV and the KV prediction, through plan_serve


@pytest.fixture(scope="module")
def awq27b(tmp_path_factory):
    """Qwen3.6-27B-AWQ's architecture at its released context, weights estimated (dummy weights)."""
    return write_architecture_config("qwen3.6-27b-awq", tmp_path_factory.mktemp("models") / "awq")


def _golden(case):
    import json
    from pathlib import Path

    return json.loads((Path(__file__).with_name("data") / "profiles_golden.json").read_text())[case]


def test_no_sizing_flags_on_two_22gb_cards_build_the_turbo3_command_for_the_awq_27b(awq27b):
    result = plan(awq27b, [])
    added = {flag: _value(result, flag) for flag in (
        "--tensor-parallel-size", "--gpu-memory-utilization", "--kv-cache-dtype", "--max-model-len", "--max-num-seqs",
        "--max-num-batched-tokens",
    )}  # fmt: skip
    assert added == {
        "--tensor-parallel-size": "2",
        "--gpu-memory-utilization": "0.93",
        "--kv-cache-dtype": "fp8",
        "--max-model-len": "262144",
        "--max-num-seqs": "29",
        "--max-num-batched-tokens": "2048",
    }
    assert _value(result, "--speculative-config") == '{"method":"mtp","num_speculative_tokens":3}'
    # Every profile line, and the prediction, as the golden data keeps them for this model and inventory.
    start = result.notes.index("profiles: normal mode (default)")
    assert result.notes[start + 1 : start + 8] == _golden("qwen3.6-27b-awq-262k on 2x22GB")


def test_a_context_that_cannot_fit_is_lowered_and_said_loudly(awq27b):
    result = plan(awq27b, [], gpus=ONE_22GB)
    assert _value(result, "--max-model-len") == "33600"
    (line,) = _notes(result, "Elastic-KV: --max-model-len 33600 added, LOWERED from the model's 262144: ")
    assert "the model's 262144 tokens do not fit: one 262144-token sequence takes 176 blocks" in line
    assert "= 9.13 GiB, 7.40 GiB more than the 1.74 GiB left for the KV cache on GPU 0" in line
    assert "33600 tokens (21 blocks of 1600) is the longest that fits" in line
    (prediction,) = _notes(result, "KV prediction: ")
    assert '"GPU KV cache size: 33,600 tokens"' in prediction


def test_the_same_model_with_the_users_tp_gets_its_context_lowered_too(awq27b):
    result = plan(awq27b, ["-tp", "1"])
    assert [use.value for use in find_flag(result.vllm_args, "--tensor-parallel-size", "-tp")] == ["1"]
    assert _notes(result, "Elastic-KV: --max-model-len 33600 added, LOWERED from the model's 262144: ")


def test_an_impossible_user_context_stops_before_vllm_with_what_is_missing(awq27b):
    # DynamicTP finds no TP for the user's context: the refusal names each TP and how much it lacks.
    with pytest.raises(ServeArgsError) as error:
        plan(awq27b, ["--max-model-len", "262144"], gpus=ONE_22GB)
    message = str(error.value)
    assert "\n" not in message
    assert "fits no tensor-parallel size on 1 GPU(s) (GPU 0 21.50 GiB free) at a context of 262144 tokens" in message
    assert "TP=1 needs 27.86 GiB per GPU, 7.40 GiB more than the 20.46 GiB vLLM gets on GPU 0" in message
    # The user fixed the TP too: Elastic-KV's own check, in vLLM's blocks, with the longest that would fit.
    with pytest.raises(ServeArgsError) as error:
        plan(awq27b, ["--max-model-len", "64k", "-tp", "1"])
    assert str(error.value) == (
        "--max-model-len 64000 (yours) does not fit at TP=1: one 64000-token sequence takes 52 blocks (40 of "
        "attention KV, 12 GDN state slots) x 17 layers x 3.12 MiB = 2.70 GiB, 0.96 GiB more than the 1.74 GiB left "
        "for the KV cache on GPU 0 (0.93 x 22.00 GiB = 20.46 GiB, less weights 16.72 GiB and reserve 2.00 GiB); at "
        "most 33600 tokens fit"
    )


def test_the_users_elastic_kv_flags_are_kept_and_checked(awq27b):
    args = ["--kv-cache-dtype", "auto", "--max-model-len", "32K", "--max-num-seqs", "4"]
    result = plan(awq27b, [*args, "--max-num-batched-tokens=4096"])
    for flag, value in (("--kv-cache-dtype", "auto"), ("--max-model-len", "32K"), ("--max-num-seqs", "4")):
        assert _value(result, flag) == value
    assert _value(result, "--max-num-batched-tokens") == "4096"
    assert _notes(result, "Elastic-KV: --kv-cache-dtype auto kept (yours): 2 B per cached value")
    (context,) = _notes(result, "Elastic-KV: --max-model-len 32768 kept (yours): one 32768-token sequence takes ")
    assert _notes(result, "Elastic-KV: --max-num-seqs 4 kept (yours): the pool's ")
    assert _notes(result, "Elastic-KV: --max-num-batched-tokens 4096 kept (yours)")
    (prediction,) = _notes(result, "KV prediction: ")
    assert "Maximum concurrency for 32,768 tokens per request" in prediction and "blocks of 800 tokens" in prediction
    with pytest.raises(ServeArgsError, match=r"--max-num-batched-tokens 2 \(yours\) is below --max-num-seqs 4: vLLM"):
        plan(awq27b, [*args, "--max-num-batched-tokens", "2"])


def test_max_model_len_auto_is_kept_and_the_prediction_is_at_the_longest_that_fits(awq27b):
    result = plan(awq27b, ["--max-model-len", "auto"], gpus=ONE_22GB)
    assert _value(result, "--max-model-len") == "auto"
    assert _notes(result, "Elastic-KV: --max-model-len auto kept (yours): vLLM fits the longest context itself: 33600 ")
    assert '"GPU KV cache size: 33,600 tokens"' in _notes(result, "KV prediction: ")[0]


def test_where_vllm_cannot_be_asked_the_kv_dtype_is_left_to_it(awq27b):
    probes = ProfileProbes(
        kv_cache_dtypes=lambda gpu: "vLLM's CUDA platform cannot be set up: ImportError", ask_vllm=None
    )
    result = plan(awq27b, [], profile_probes=probes)
    assert not find_flag(result.vllm_args, "--kv-cache-dtype")
    (line,) = _notes(result, "Elastic-KV: --kv-cache-dtype auto left to vLLM's default: vLLM could not be asked ")
    assert "(vLLM's CUDA platform cannot be set up: ImportError)" in line
    assert _value(result, "--max-model-len") == "262144"  # sized in the model dtype: 2 B per value


def test_the_prediction_says_whose_figures_they_are(awq27b):
    from caovan.profiles.vllm_kv_cache import VllmKvReport, VllmKvUnavailable

    def unavailable(facts, layout, context, available):
        raise VllmKvUnavailable("vllm.v1.core.kv_cache_utils has no get_kv_cache_configs")

    result = plan(awq27b, [], profile_probes=ProfileProbes(SM75_PROBES.kv_cache_dtypes, unavailable))
    assert _notes(result, "KV prediction: ")[0].endswith(
        "caovan's arithmetic of vLLM 0.21.0's kv_cache_utils (vLLM 0.21.0: vllm.v1.core.kv_cache_utils has no "
        "get_kv_cache_configs)"
    )
    asked = ProfileProbes(SM75_PROBES.kv_cache_dtypes, lambda *args: VllmKvReport(389, 579397, 2.21))
    assert _notes(plan(awq27b, [], profile_probes=asked), "KV prediction: ")[0].endswith(
        "figures from vLLM 0.21.0's own get_kv_cache_configs"
    )


def test_gdn_state_slots_follow_the_speculative_config_and_prefix_caching(awq27b):
    def prediction(args):
        return _notes(plan(awq27b, args), "KV prediction: ")[0]

    assert "17 attention + 48 GDN layers" in prediction([]) and "4 state slots per GDN group" in prediction([])
    off = _notes(plan(awq27b, [], autospec=False), "KV prediction: ")[0]
    assert "16 attention + 48 GDN layers" in off and "1 state slot per GDN group per sequence;" in off
    assert "5 state slots per GDN group" in prediction(["--enable-prefix-caching"])  # mode align: 2 + 3
    assert "4 state slots per GDN group" in prediction(["--enable-prefix-caching", "--no-enable-prefix-caching"])
    ngram = plan(awq27b, ["--speculative-config", '{"method": "ngram", "num_speculative_tokens": 2}'])
    assert _notes(ngram, "speculative method ngram: its drafter's own KV cache is not counted")
    assert "16 attention + 48 GDN layers" in _notes(ngram, "KV prediction: ")[0]
    all_mode = plan(awq27b, ["--enable-prefix-caching", "--mamba-cache-mode", "all"])
    assert not find_flag(all_mode.vllm_args, "--max-model-len")
    assert _notes(all_mode, "profiles: not applied, vLLM's defaults stand: mamba_cache_mode all: the profiles follow")


def test_the_mode_comes_from_the_command_line_then_caovan_profile(tiny, monkeypatch):
    assert "profiles: safe mode (CAOVAN_PROFILE)" in plan_env(tiny, {"CAOVAN_PROFILE": "safe"}).notes
    assert "profiles: fast mode (--caovan-profile)" in plan_env(tiny, {"CAOVAN_PROFILE": "safe"}, "fast").notes
    with pytest.raises(ServeArgsError, match="CAOVAN_PROFILE 'turbo': expected one of safe, normal, fast"):
        plan_env(tiny, {"CAOVAN_PROFILE": "turbo"})


def plan_env(model, environ, mode=None):
    return plan_serve(
        str(model), [], environ, vllm_env_names=set(COLD_START_TIMEOUTS), measure_gpus=lambda: list(TWO_22GB),
        judge_full_graphs=lambda pp: FullGraphSafety(with_caovan=True, without_caovan=False, reason=""),
        judge_device_settings=lambda settings: None, profile_probes=SM75_PROBES, profile_mode=mode,
    )  # fmt: skip


def test_the_dry_run_prints_every_added_flag_and_the_prediction(awq27b, monkeypatch, capsys):
    import caovan.serving.serve_command as serve_command
    import caovan.serving.serve_profiles as serve_profiles

    monkeypatch.setattr(serve_command, "read_gpus", lambda environ: list(TWO_22GB))
    monkeypatch.setattr(serve_profiles, "VLLM_PROBES", SM75_PROBES)
    monkeypatch.setattr(serve_command, "check_serve_settings", lambda *args: None)
    assert cli.main(["serve", str(awq27b), "--caovan-dry-run", "--caovan-no-autospec"]) == 0
    out, err = capsys.readouterr()
    assert "--kv-cache-dtype fp8 --tensor-parallel-size 2 --gpu-memory-utilization 0.93 --max-model-len 262144" in out
    assert "--max-num-seqs 105 --max-num-batched-tokens 2048" in out
    # No drafter without AutoSpec: 16 attention layers, one GDN state slot per group, 4 blocks per sequence at least.
    assert "[Caovan] serve: Elastic-KV: --max-num-seqs 105 added: the pool's 422 blocks hold 105 sequences" in err
    assert '[Caovan] serve: KV prediction: vLLM will log "GPU KV cache size: 646,928 tokens"' in err


def test_token_counts_are_read_as_vllm_reads_them():
    from caovan.serving.serve_profiles import tokens_value

    assert [tokens_value(text, "--max-model-len") for text in ("32k", "32K", "1.5k", "131072", None)] == [
        32000, 32768, 1500, 131072, None,
    ]  # fmt: skip
    for bad in ("1.5K", "lots", "0"):
        with pytest.raises(ServeArgsError, match=f"--max-model-len '?{re.escape(bad)}'?: "):
            tokens_value(bad, "--max-model-len")
