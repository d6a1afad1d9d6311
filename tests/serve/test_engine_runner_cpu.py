"""The serve tier's engine runner, in the parts that run without a GPU.

Plain tests: argument handling and the small helpers (no vLLM import).  ``discovery`` tests: the helpers that
act on vLLM's own classes (weight re-draw, GDN layer facts, the stock-kernel call counter), on a hand-built
module tree with the real vLLM classes, on CPU.
"""

import importlib.util
import json
import re
import subprocess
import sys
from types import SimpleNamespace

import engine_observers
import engine_runner
import engine_weights
import pytest
import serve_workload

from caovan.bench.model_folders import write_tiny_qwen3_next


@pytest.fixture
def model_dir(tmp_path):
    return write_tiny_qwen3_next(tmp_path / "tiny")


def test_engine_kwargs_follow_the_arguments(model_dir, tmp_path):
    args = engine_runner.parse_args(
        ["--model", str(model_dir), "--out", str(tmp_path / "r.json"), "--additional-config", '{"caovan": true}']
    )
    kwargs = engine_runner.engine_kwargs(args)
    assert kwargs == {
        "model": str(model_dir),
        "load_format": "dummy",
        "skip_tokenizer_init": True,
        "enforce_eager": True,
        "dtype": "float16",
        "additional_config": {"caovan": True},
        "gpu_memory_utilization": 0.3,
        "max_model_len": 512,
        "max_num_seqs": serve_workload.MAX_NUM_SEQS,
        "seed": 0,
        "disable_log_stats": False,
        "speculative_config": {"method": "mtp", "num_speculative_tokens": 2},
        "kv_cache_memory_bytes": 1 << 30,
    }
    no_spec = engine_runner.engine_kwargs(
        engine_runner.parse_args(
            ["--model", str(model_dir), "--out", "r", "--num-speculative-tokens", "0", "--kv-cache-memory-bytes", "0"]
        )
    )
    assert "speculative_config" not in no_spec and "kv_cache_memory_bytes" not in no_spec


def test_graph_modes_and_workloads_reach_the_engine(model_dir):
    args = engine_runner.parse_args(
        ["--model", str(model_dir), "--out", "r", "--cudagraph-mode", "FULL_AND_PIECEWISE"]
        + ["--workload", "draft-shaped", "--num-speculative-tokens", "3"]
    )
    kwargs = engine_runner.engine_kwargs(args)
    assert kwargs["enforce_eager"] is False
    assert kwargs["compilation_config"] == {"cudagraph_mode": "FULL_AND_PIECEWISE"}
    sized = engine_runner.parse_args(
        ["--model", str(model_dir), "--out", "r", "--cudagraph-mode", "PIECEWISE", "--cudagraph-capture-sizes", "6,12"]
    )
    assert engine_runner.engine_kwargs(sized)["compilation_config"] == {
        "cudagraph_mode": "PIECEWISE",
        "cudagraph_capture_sizes": [6, 12],
    }
    # Every prompt has the shape vLLM takes for a uniform spec-decode batch: 1 + num_speculative_tokens tokens.
    assert {len(ids) for ids in args.requests.prompt_token_ids} == {4}
    assert args.requests.max_tokens == serve_workload.MAX_TOKENS


def test_tensor_parallel_reaches_the_engine_only_when_asked(model_dir):
    base = ["--model", str(model_dir), "--out", "r"]
    assert "tensor_parallel_size" not in engine_runner.engine_kwargs(engine_runner.parse_args(base))
    kwargs = engine_runner.engine_kwargs(engine_runner.parse_args([*base, "--tensor-parallel-size", "2"]))
    assert kwargs["tensor_parallel_size"] == 2


def test_mixed_workload_has_no_draft_shaped_prompt():
    # The mixed workload is the FULL-graph tier's control: none of its prompts may hit vLLM's shape-only rule at
    # the draft lengths the tier and Turbo3 users run (1 to 3).
    lengths = {len(ids) for ids in serve_workload.workload("mixed", 2).prompt_token_ids}
    assert lengths.isdisjoint({1 + k for k in range(1, 4)})


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--workload", "draft-shaped", "--num-speculative-tokens", "0"], "needs speculative decoding"),
        (["--cudagraph-mode", "FULL"], "invalid choice: 'FULL'"),
        (["--additional-config", "[1]"], "must be a JSON object, got list"),
        (["--additional-config", "{x"], "not valid JSON"),
        (["--num-speculative-tokens", "-1"], "must be >= 0, got -1"),
        (["--gpu-memory-utilization", "0"], r"must be in \(0, 1\], got 0.0"),
        (["--max-model-len", "64"], "shorter than the workload's longest request"),
        (["--dtype", "float32"], "invalid choice: 'float32'"),
        (["--cudagraph-capture-sizes", "6,12"], "eager mode captures no graphs"),
        (["--cudagraph-mode", "PIECEWISE", "--cudagraph-capture-sizes", "6,0"], "must be > 0"),
        (["--cudagraph-mode", "PIECEWISE", "--cudagraph-capture-sizes", "12,6"], "must be increasing"),
        (["--cudagraph-mode", "PIECEWISE", "--cudagraph-capture-sizes", "6,x"], "not an integer: 'x'"),
    ],
)
def test_bad_arguments_are_usage_errors(model_dir, capsys, extra, message):
    with pytest.raises(SystemExit) as exit_info:
        engine_runner.parse_args(["--model", str(model_dir), "--out", "r.json", *extra])
    assert exit_info.value.code == 2
    assert re.search(message, capsys.readouterr().err)


def test_missing_model_folder_is_a_usage_error(tmp_path, capsys):
    with pytest.raises(SystemExit):
        engine_runner.parse_args(["--model", str(tmp_path / "none"), "--out", "r.json"])
    assert "no config.json there" in capsys.readouterr().err


def test_script_prints_engine_kwargs_without_importing_vllm(model_dir):
    # Run as the serve test runs it (a script by path); -X importtime lists every module imported.
    done = subprocess.run(
        [sys.executable, "-X", "importtime", engine_runner.__file__, "--model", str(model_dir), "--out", "r.json"]
        + ["--print-engine-kwargs"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["speculative_config"]["method"] == "mtp"
    assert not re.search(r"\|\s+(vllm|torch)$", done.stderr, re.MULTILINE)


def test_stock_kernel_counter_counts_only_speculative_calls():
    counter = engine_observers.StockSpecKernelCalls()
    calls = []
    wrapped = counter._counted("fused_sigmoid_gating_delta_rule_update", lambda *a, **k: calls.append((a, k)) or 7)
    assert wrapped(1, num_accepted_tokens=None) == 7
    assert wrapped(2, num_accepted_tokens=object()) == 7
    assert wrapped(3) == 7
    assert len(calls) == 3
    assert counter.total["fused_sigmoid_gating_delta_rule_update"] == 3
    assert counter.spec["fused_sigmoid_gating_delta_rule_update"] == 1


def test_exception_chain_is_recorded_outermost_first():
    try:
        try:
            raise ValueError("inner reason")
        except ValueError as inner:
            raise RuntimeError("engine failed to start") from inner
    except RuntimeError as outer:
        described = engine_runner.describe_exception(outer)
    assert described["type"] == "builtins.RuntimeError"
    assert [link["message"] for link in described["chain"]] == ["engine failed to start", "inner reason"]


def test_top_logprobs_are_best_first_and_cut_to_k():
    position = {5: SimpleNamespace(logprob=-2.0), 9: SimpleNamespace(logprob=-0.5), 3: SimpleNamespace(logprob=-1.0)}
    assert engine_runner.top_logprobs(position, 2) == [[9, -0.5], [3, -1.0]]
    assert engine_runner.top_logprobs(None, 2) == []


@pytest.mark.discovery
@pytest.mark.usefixtures("served_release")
@pytest.mark.parametrize("name", serve_workload.NAMES)
def test_workload_requests_are_valid_vllm_inputs(name):
    requests = serve_workload.workload(name, num_speculative_tokens=2)
    prompts, params = engine_runner.workload_requests(requests, logprobs=2)
    assert [p["prompt_token_ids"] for p in prompts] == [list(ids) for ids in requests.prompt_token_ids]
    assert [p.max_tokens for p in params] == list(requests.max_tokens)
    assert all(p.temperature == 0.0 and p.ignore_eos and p.logprobs == 2 and not p.detokenize for p in params)


@pytest.mark.discovery
@pytest.mark.usefixtures("served_release")
@pytest.mark.parametrize("mode", [m for m in engine_runner.CUDAGRAPH_MODES if m != "eager"])
def test_cudagraph_mode_in_effect_reads_vllms_compilation_config(mode):
    from vllm.config import CompilationConfig

    config = SimpleNamespace(compilation_config=CompilationConfig(cudagraph_mode=mode))
    llm = SimpleNamespace(llm_engine=SimpleNamespace(vllm_config=config))
    assert engine_observers.cudagraph_mode_in_effect(llm) == mode


# --- with the real vLLM classes (CPU) -------------------------------------------------------------------------


def _bare(cls, **params):
    """An instance of a vLLM layer class without its __init__ (which needs a device and a vLLM config)."""
    from torch import nn

    if getattr(cls, "__abstractmethods__", None):
        # vLLM 0.24's MoE runner interface is abstract: a subclass with nothing left abstract still isinstance()s.
        cls = type(cls.__name__, (cls,), {})
        cls.__abstractmethods__ = frozenset()  # after: ABCMeta computes it when the class is made
    module = object.__new__(cls)
    nn.Module.__init__(module)
    for name, value in params.items():
        setattr(module, name, nn.Parameter(value, requires_grad=False))
    return module


def _tree():
    import torch
    from torch import nn
    from vllm.model_executor.layers.layernorm import GemmaRMSNorm, RMSNormGated

    GatedDeltaNetAttention = engine_observers.stock_gdn_class()

    class Tree(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed_tokens = nn.Embedding(16, 8)
            self.input_layernorm = _bare(GemmaRMSNorm, weight=torch.full((8,), 5.0))
            self.mlp = nn.Module()  # a sparse-MoE block: router + experts + shared expert
            self.mlp.gate = nn.Linear(8, 2, bias=False)
            self.mlp.experts = _bare(engine_weights.moe_layer_class(), w13_weight=torch.full((2, 4, 8), 1e-3))
            self.mlp.shared_expert = nn.Linear(8, 8, bias=False)
            self.layers = nn.ModuleList()
            for bound in (True, False):
                gdn = _bare(GatedDeltaNetAttention, A_log=torch.zeros(4), dt_bias=torch.zeros(4))
                gdn.norm = _bare(RMSNormGated, weight=torch.full((8,), 5.0))
                gdn.out_proj = nn.Linear(8, 8, bias=True)
                gdn.num_spec = 2
                if bound:
                    gdn._forward_core = lambda *args: None  # what caovan's layer does when it takes over
                self.layers.append(gdn)
            self.odd_vector = nn.Parameter(torch.full((3,), 7.0))

    return Tree()


@pytest.mark.discovery
@pytest.mark.usefixtures("served_release")
def test_hf_init_redraws_by_module_kind_and_is_reproducible():
    import torch

    tree = _tree()
    summary = engine_weights.hf_init_weights(tree)
    assert summary["rules"] == {
        "matrix ~ normal(0, 0.02)": 3,
        "Gemma RMSNorm offset = 0": 1,
        "A_log = log U(0, 16)": 2,
        "dt_bias = 1": 2,
        "gated RMSNorm gain = 1": 2,
        "bias = 0": 2,
        "MoE block: kept dummy": 3,
    }
    assert summary["untouched"] == ["odd_vector"]
    assert summary["moe_blocks"] == ["mlp"]
    assert torch.all(tree.mlp.experts.w13_weight == 1e-3)  # MoE keeps the dummy values
    gdn = tree.layers[0]
    assert torch.all(gdn.dt_bias == 1) and torch.all(gdn.norm.weight == 1)
    assert torch.all(tree.input_layernorm.weight == 0)
    assert torch.all(gdn.A_log.exp() <= 16) and torch.all(gdn.A_log.exp() >= 1e-3)
    assert 0.01 < float(tree.embed_tokens.weight.detach().std()) < 0.03
    # Same names, same values: every engine of the tier gets the same weights.
    before = [p.detach().clone() for p in tree.parameters()]
    engine_weights.hf_init_weights(tree)
    assert all(torch.equal(a, b) for a, b in zip(before, tree.parameters(), strict=True))
    # Different tensors of the same shape get different values (unlike vLLM's dummy loader).
    assert not torch.equal(tree.layers[0].out_proj.weight, tree.layers[1].out_proj.weight)


@pytest.mark.discovery
@pytest.mark.usefixtures("served_release")
def test_long_memory_weights_keep_the_gdn_decay_slow():
    tree = _tree()
    summary = engine_weights.hf_init_weights(tree, engine_weights.A_LOG_RANGES["hf-init-long-memory"])
    assert summary["rules"]["A_log = log U(0.01, 0.1)"] == 2
    for gdn in tree.layers[:2]:
        rate = gdn.A_log.detach().exp()
        assert float(rate.min()) >= 0.01 - 1e-6 and float(rate.max()) <= 0.1 + 1e-6
    # The runner's choices and the ranges agree: every hf-init mode has its range.
    assert set(engine_weights.A_LOG_RANGES) == {m for m in engine_weights.WEIGHT_MODES if m != "dummy"}


@pytest.mark.discovery
@pytest.mark.usefixtures("served_release")
def test_gdn_layer_facts_tell_bound_cores_apart():
    facts = engine_observers.gdn_layer_facts(_tree())
    assert facts == {
        "gdn_layers": ["layers.0", "layers.1"],
        "classes": [engine_observers.stock_gdn_class().__qualname__],
        "caovan_core_bound": ["layers.0"],
        "num_spec": [2],
    }


@pytest.mark.discovery
@pytest.mark.usefixtures("served_release")
def test_stock_kernel_counter_wraps_the_functions_vllm_calls(monkeypatch):
    import importlib

    module = importlib.import_module(engine_observers.stock_gdn_module())
    originals = {}
    assert engine_observers.stock_spec_kernels()[0] == "causal_conv1d_update", "the conv runs first in every family"
    for name in engine_observers.stock_spec_kernels():
        originals[name] = getattr(module, name)
        monkeypatch.setattr(module, name, originals[name])  # restored at teardown
    counter = engine_observers.StockSpecKernelCalls()
    counter.install()
    for name in engine_observers.stock_spec_kernels():
        assert getattr(module, name) is not originals[name]
        assert getattr(module, name).__wrapped__ is originals[name]
    assert counter.snapshot()["module"] == engine_observers.stock_gdn_module()


def _dispatch_result(mode: str, uniform: bool, num_tokens: int = 12) -> tuple:
    return SimpleNamespace(name=mode), SimpleNamespace(uniform=uniform, num_tokens=num_tokens), False, None, None


def test_graph_dispatch_counts_tell_prompt_steps_in_full_uniform_graphs():
    counts = engine_observers.GraphDispatchCounts()
    counts.count(True, _dispatch_result("FULL", True))
    counts.count(True, _dispatch_result("PIECEWISE", False))
    counts.count(False, _dispatch_result("FULL", True))
    counts.count(False, _dispatch_result("FULL", True))
    counts.count(False, _dispatch_result("FULL", False))
    counts.count(False, (SimpleNamespace(name="NONE"), SimpleNamespace(uniform_decode=False)))  # before vLLM 0.12
    assert counts.snapshot() == {
        "decode steps, full": 1,
        "decode steps, full-uniform": 2,
        "decode steps, none": 1,
        "prompt steps, full-uniform": 1,
        "prompt steps, piecewise": 1,
    }
    assert counts.sizes_snapshot() == {}  # the batch size was not given


def test_graph_dispatch_counts_tell_padded_full_graphs_and_batch_sizes():
    counts = engine_observers.GraphDispatchCounts()
    counts.count(False, _dispatch_result("FULL", True, num_tokens=6), num_tokens=3)  # one padded request
    counts.count(False, _dispatch_result("FULL", True, num_tokens=6), num_tokens=6)
    counts.count(True, _dispatch_result("PIECEWISE", False, num_tokens=16), num_tokens=12)  # padded, not FULL
    assert counts.snapshot() == {
        "decode steps, full-uniform": 2,
        "decode steps, full-uniform with padded rows": 1,
        "prompt steps, piecewise": 1,
    }
    assert counts.sizes_snapshot() == {
        "decode steps of 3 tokens, full-uniform": 1,
        "decode steps of 6 tokens, full-uniform": 1,
        "prompt steps of 12 tokens, piecewise": 1,
    }


def _skip_without_the_counted_runner() -> None:
    """Skip, saying why, on a vLLM without the runner the counter wraps, once install() is seen to say so."""
    if importlib.util.find_spec("vllm.v1.worker.gpu_model_runner") is None:
        with pytest.raises(RuntimeError, match="not in this vLLM"):
            engine_observers.GraphDispatchCounts().install()
        pytest.skip(engine_observers.RUNNER_GONE)


@pytest.mark.discovery
@pytest.mark.usefixtures("served_release")
def test_graph_dispatch_counts_wrap_the_runner_and_count_only_engine_steps(monkeypatch):
    _skip_without_the_counted_runner()
    from vllm.v1.worker.gpu_model_runner import GPUModelRunner

    # Stand-ins for the two methods (restored at teardown): execute_model asks for the dispatch once per step.
    def execute_model(runner, scheduler_output):
        return runner._determine_batch_execution_and_padding(num_tokens=12)

    def determine(runner, num_tokens, force_uniform_decode=None):
        return _dispatch_result("FULL", force_uniform_decode is not False)

    monkeypatch.setattr(GPUModelRunner, "execute_model", execute_model)
    monkeypatch.setattr(GPUModelRunner, "_determine_batch_execution_and_padding", determine)
    counts = engine_observers.GraphDispatchCounts()
    counts.install()
    runner = GPUModelRunner.__new__(GPUModelRunner)
    runner._determine_batch_execution_and_padding(num_tokens=12)  # a capture or dummy run: not an engine step
    runner.execute_model(SimpleNamespace(scheduled_new_reqs=["new"]))
    runner.execute_model(SimpleNamespace(scheduled_new_reqs=[]))
    assert counts.snapshot() == {"prompt steps, full-uniform": 1, "decode steps, full-uniform": 1}
    assert counts.sizes_snapshot() == {
        "prompt steps of 12 tokens, full-uniform": 1,
        "decode steps of 12 tokens, full-uniform": 1,
    }
    counts.uninstall()
    assert GPUModelRunner.execute_model is execute_model
    assert GPUModelRunner._determine_batch_execution_and_padding is determine


@pytest.mark.discovery
@pytest.mark.usefixtures("served_release")
def test_graph_dispatch_counts_leave_the_guard_probes_their_answers():
    # The counter is wrapped on the class before caovan's guard probes it at model load: the probes must still read
    # vLLM's own signature and source through the wrapper.
    from caovan.plugin import uniform_decode_guard

    _skip_without_the_counted_runner()
    before = uniform_decode_guard.runner_class()
    by_shape = before and uniform_decode_guard.tells_uniform_decode_by_shape(before)
    counts = engine_observers.GraphDispatchCounts()
    counts.install()
    try:
        after = uniform_decode_guard.runner_class()
        assert after is before
        assert (after and uniform_decode_guard.tells_uniform_decode_by_shape(after)) == by_shape
    finally:
        counts.uninstall()


def test_full_graph_cases_are_commands_the_runner_accepts(model_dir, tmp_path):
    import engine_cases
    import test_full_graph_mtp

    for case in test_full_graph_mtp.CASES:
        command = engine_cases._command(case, {case.model: model_dir}, tmp_path)
        kwargs = engine_runner.engine_kwargs(engine_runner.parse_args(command[2:]))
        sizes = kwargs.get("compilation_config", {}).get("cudagraph_capture_sizes", [])
        assert sizes == list(case.cudagraph_capture_sizes), case.name
    # Every prompt batch of the draft-shaped workload has a FULL graph of its own size; the mixed one pads.
    assert test_full_graph_mtp.EVERY_UNIFORM_BATCH == (3, 6, 9, 12)
    assert test_full_graph_mtp.PADDED_BATCHES == (6, 12)
