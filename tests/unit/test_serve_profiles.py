"""``caovan serve`` with its start-up profiles: flags added from (fake) measured GPUs, the user's kept, the impossible
refused before vLLM starts, and nothing added where nothing can be measured."""

from __future__ import annotations

import pytest

from caovan import cli
from caovan.bench.model_folders import write_architecture_config, write_tiny_qwen3_next
from caovan.plugin.uniform_decode_guard import FullGraphSafety
from caovan.profiles import Gpu, GpuInventoryError
from caovan.serving.serve_command import COLD_START_TIMEOUTS, plan_serve
from caovan.serving.serve_flags import ServeArgsError, find_flag

GIB = 1 << 30
TWO_22GB = [Gpu(i, "NVIDIA GeForce RTX 2080 Ti", (7, 5), 22 * GIB, int(21.5 * GIB)) for i in (0, 1)]


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
    assert f"profiles: {mode} mode" in result.notes


def test_an_unknown_profile_mode_is_one_error(tiny, capsys):
    with pytest.raises(ServeArgsError, match="--caovan-profile 'turbo': expected one of safe, normal, fast"):
        plan(tiny, [], profile_mode="turbo")
    assert cli.main(["serve", str(tiny), "--caovan-profile", "turbo", "--caovan-dry-run"]) == 2
    assert "invalid choice: 'turbo'" in capsys.readouterr().err
