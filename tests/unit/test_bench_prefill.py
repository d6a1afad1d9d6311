"""``caovan bench prefill``: its cases, its options, its record, and one real run under the Triton interpreter.

- CPU, no vLLM: the cases (shapes, varlen splits, initial states), the options refused with one line before any
  device is asked, the refusal on a CPU without TRITON_INTERPRET=1, and the record and table a case makes, with the
  float64 oracle standing in for both prefills and a recording stand-in for FLA.
- Triton interpreter (marker ``interpreter``, needs vLLM): the command itself, in a child process with
  TRITON_INTERPRET=1 (``bench_prefill_child.py`` applies the numerics tier's interpreter patches to vLLM's FLA
  kernels, then runs the CLI's ``main``), at the tiny shape against the installed vLLM; the record it writes.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from caovan import cli
from caovan.bench import prefill_cases as pc
from caovan.cli import bench as bench_cli

torch = pytest.importorskip("torch", reason="the bench's inputs are torch tensors")

from caovan.bench import prefill as pb  # noqa: E402
from caovan.bench import prefill_record as pr  # noqa: E402
from caovan.kernels.gdn_prefill.naive import gdn_prefill_reference  # noqa: E402

CHILD = Path(__file__).resolve().with_name("bench_prefill_child.py")
INTERPRETER_ARGS = ("--shapes", "tiny", "--lengths", "64,100", "--batches", "1,4", "--iters", "1", "--repeats", "1")


# --------------------------------------------------------------------------------------------------
# Cases
# --------------------------------------------------------------------------------------------------
def test_model_shapes_are_qwen36_27b_per_gpu():
    tp1, tp2 = pc.PREFILL_SHAPES["qwen3.6-27b-tp1"], pc.PREFILL_SHAPES["qwen3.6-27b-tp2"]
    assert (tp1.num_k_heads, tp1.num_v_heads, tp1.head_k_dim, tp1.head_v_dim) == (16, 48, 128, 128)
    assert (tp2.num_k_heads, tp2.num_v_heads, tp2.head_k_dim, tp2.head_v_dim) == (8, 24, 128, 128)
    tiny = pc.PREFILL_SHAPES["tiny"]
    assert (tiny.num_k_heads, tiny.num_v_heads, tiny.head_k_dim, tiny.head_v_dim) == (2, 4, 32, 32)
    assert pc.DEFAULT_SHAPES == ("qwen3.6-27b-tp1", "qwen3.6-27b-tp2")
    assert pc.DEFAULT_LENGTHS == (64, 256, 1024, 4096, 16384, 65536) and pc.DEFAULT_BATCHES == (1, 4)
    assert pc.DEFAULT_MAX_REFERENCE_TOKENS == 65536 * 4


@pytest.mark.parametrize("length", [2, 3, 64, 100, 255, 4096, 65536])
@pytest.mark.parametrize("batch", [1, 2, 3, 4, 5, 8])
def test_a_batch_splits_batch_times_length_tokens(length, batch):
    lens = pc.split_lengths(length, batch)
    assert len(lens) == batch and sum(lens) == batch * length and min(lens) >= 1


def test_four_sequences_are_half_three_quarters_five_quarters_and_one_and_a_half_lengths():
    assert pc.split_lengths(100, 4) == (50, 75, 125, 150)
    assert pc.split_lengths(64, 4) == (32, 48, 80, 96)
    assert pc.split_lengths(65536, 4) == (32768, 49152, 81920, 98304)
    assert len(set(pc.split_lengths(1024, 4))) == 4  # unequal
    assert pc.split_lengths(64, 1) == (64,)


def test_a_length_too_short_for_the_batch_is_refused_with_the_least_that_works():
    with pytest.raises(ValueError, match=r"length 1 with batch 4: .* leaves a sequence without tokens .* at least 2"):
        pc.split_lengths(1, 4)
    with pytest.raises(ValueError):
        pc.split_lengths(0, 1)


def test_cases_cover_shape_length_batch_in_order_with_half_the_sequences_cached():
    cases = pc.prefill_cases(("tiny", "qwen3.6-27b-tp2"), (64, 100), (1, 4))
    assert [c.id for c in cases] == [
        "tiny/L64/B1", "tiny/L64/B4", "tiny/L100/B1", "tiny/L100/B4",
        "qwen3.6-27b-tp2/L64/B1", "qwen3.6-27b-tp2/L64/B4", "qwen3.6-27b-tp2/L100/B1", "qwen3.6-27b-tp2/L100/B4",
    ]  # fmt: skip
    assert len({c.input_seed for c in cases}) == len(cases)  # every case draws its own inputs
    c = cases[3]
    assert c.seq_lens == (50, 75, 125, 150) and c.total_tokens == 400
    assert c.has_initial_state == (True, False, True, False)
    assert cases[0].has_initial_state == (True,)
    d = c.as_dict()
    assert d["seq_lens"] == [50, 75, 125, 150] and d["total_tokens"] == 400 and d["batch"] == 4
    assert (d["shape"], d["num_k_heads"], d["num_v_heads"], d["head_k_dim"]) == ("tiny", 2, 4, 32)
    assert (d["act_dtype"], d["state_dtype"]) == ("float16", "float32")
    assert len(pc.prefill_cases()) == 2 * 6 * 2


def test_a_case_id_names_dtypes_other_than_the_defaults():
    case = pc.PrefillCase("tiny", 64, 1, act_dtype="bfloat16", state_dtype="float16")
    assert case.id == "tiny/L64/B1/act-bf16/ssm-fp16"
    with pytest.raises(ValueError, match="shape must be one of"):
        pc.PrefillCase("huge", 64, 1)
    with pytest.raises(ValueError, match="act_dtype"):
        pc.PrefillCase("tiny", 64, 1, act_dtype="float32")


# --------------------------------------------------------------------------------------------------
# Options
# --------------------------------------------------------------------------------------------------
def _parse(argv):
    parser = argparse.ArgumentParser(prog="caovan bench")
    bench_cli.add_arguments(parser)
    return parser.parse_args(argv)


def test_defaults_are_the_model_shapes_lengths_and_batches():
    args = _parse(["prefill"])
    cases, settings, options = bench_cli.prefill_plan(args)
    assert options == {
        "shapes": list(pc.DEFAULT_SHAPES),
        "lengths": list(pc.DEFAULT_LENGTHS),
        "batches": list(pc.DEFAULT_BATCHES),
        "act_dtype": "float16",
        "state_dtype": "float32",
        "seed": 0,
        "launch_config": None,
    }
    assert settings == pb.PrefillSettings() and settings.max_reference_tokens == 65536 * 4
    assert len(cases) == 24 and args.json is None


def test_options_reach_the_cases_and_settings():
    args = _parse(["prefill", *INTERPRETER_ARGS, "--dtype", "bfloat16", "--state-dtype", "float16", "--warmup", "0",
                   "--max-reference-tokens", "300", "--seed", "7"])  # fmt: skip
    cases, settings, options = bench_cli.prefill_plan(args)
    assert [c.id for c in cases] == [f"tiny/L{n}/B{b}/act-bf16/ssm-fp16" for n in (64, 100) for b in (1, 4)]
    assert all(c.seed == 7 for c in cases)
    assert settings == pb.PrefillSettings(warmup=0, iters=1, repeats=1, max_reference_tokens=300)
    assert options["lengths"] == [64, 100] and options["batches"] == [1, 4] and options["shapes"] == ["tiny"]


def test_a_launch_config_is_read_as_an_entry_and_recorded():
    entry = (
        '{"capability": [9, 0], "wy": {"num_warps": 4, "num_stages": 1}, '
        '"state": {"num_warps": 8, "num_stages": 1, "BV": 64}}'
    )
    _, _, options = bench_cli.prefill_plan(_parse(["prefill", "--launch-config", entry]))
    assert options["launch_config"]["state"] == {"num_warps": 8, "num_stages": 1, "BV": 64}
    problem = bench_cli.prefill_plan(_parse(["prefill", "--launch-config", '{"capability": [9, 0]}']))
    assert problem == "--launch-config: KeyError: 'wy'"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--lengths", "64,x"], "--lengths '64,x': expected whole numbers separated by commas"),
        (["--lengths", ""], "--lengths '': expected whole numbers separated by commas"),
        (["--lengths", "0"], "--lengths '0': expected distinct numbers >= 1"),
        (["--batches", "4,4"], "--batches '4,4': expected distinct numbers >= 1"),
        (["--shapes", "tiny,huge"], "--shapes 'tiny,huge': unknown shape 'huge' (known: qwen3.6-27b-tp1, "),
        (["--shapes", "tiny,tiny"], "--shapes 'tiny,tiny': a shape is named twice"),
        (["--lengths", "1", "--batches", "4"], "--lengths/--batches: length 1 with batch 4: "),
        (["--iters", "0"], "--iters 0: at least 1"),
        (["--repeats", "0"], "--repeats 0: at least 1"),
        (["--warmup", "-1"], "--warmup -1: at least 0"),
        (["--max-reference-tokens", "-1"], "--max-reference-tokens -1: at least 0"),
    ],
)
def test_a_bad_option_is_one_line_and_exit_2_before_any_device_is_asked(monkeypatch, capsys, argv, message):
    asked = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: asked.append(1) or True)
    rc = bench_cli.run(_parse(["prefill", *argv]))
    captured = capsys.readouterr()
    assert rc == 2 and captured.out == "" and not asked
    assert len(captured.err.splitlines()) == 1
    assert captured.err.startswith(f"caovan bench: error: {message}")


def test_argparse_refuses_unknown_dtypes():
    with pytest.raises(SystemExit):
        _parse(["prefill", "--dtype", "float32"])
    with pytest.raises(SystemExit):
        _parse(["prefill", "--state-dtype", "float64"])


def test_on_a_cpu_without_the_interpreter_it_refuses_with_one_line(monkeypatch, capsys, tmp_path):
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    rc = bench_cli.run(_parse(["prefill", "--json", str(tmp_path / "r.json")]))
    captured = capsys.readouterr()
    err = captured.err.splitlines()
    assert rc == 2 and captured.out == "" and len(err) == 1
    assert err[0].startswith("caovan bench: error: no CUDA GPU visible")
    assert err[0].endswith("bench prefill runs on a GPU (on the CPU only under TRITON_INTERPRET=1, for tests)")
    assert not (tmp_path / "r.json").exists()


@pytest.mark.parametrize(
    ("value", "expected"),
    [("", "--json '': an empty file name"), ("nope/r.json", "directory nope does not exist")],
)
def test_a_json_file_that_cannot_be_written_is_refused_before_the_run(monkeypatch, capsys, tmp_path, value, expected):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)  # a run would start on a GPU: it must not
    rc = bench_cli.run(_parse(["prefill", "--shapes", "tiny", "--json", value]))
    captured = capsys.readouterr()
    assert rc == 2 and captured.out == "" and expected in captured.err and len(captured.err.splitlines()) == 1


def test_help_gives_the_exit_codes_and_the_interpreter_rule(capsys):
    with pytest.raises(SystemExit) as info:
        cli.main(["bench", "prefill", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert info.value.code == 0
    for part in ("Exit status:", "prefill: a case failed to run", "2 the bench cannot run", "TRITON_INTERPRET=1",
                 "--max-reference-tokens", "--state-dtype", "vllm_branch"):  # fmt: skip
        assert part in text


# --------------------------------------------------------------------------------------------------
# One case on the CPU: the oracle stands in for both prefills, a recorder for FLA
# --------------------------------------------------------------------------------------------------
class FakeFla:
    """FLA's ``chunk_gated_delta_rule`` as far as the bench sees it: keywords in, (o, final_state) out."""

    def __init__(self):
        self.calls = []

    def __call__(self, *, q, k, v, g, beta, initial_state, output_final_state, cu_seqlens, use_qk_l2norm_in_kernel):
        self.calls.append(
            {"q": q.shape, "initial_state": initial_state.clone(), "final": output_final_state,
             "l2norm": use_qk_l2norm_in_kernel, "cu": cu_seqlens.tolist()}
        )  # fmt: skip
        return torch.zeros_like(v), initial_state.clone()


class FakeVllm:
    """``VllmPrefill`` around ``FakeFla``, which takes no chunk metadata (as FLA before vLLM 0.20)."""

    def __init__(self):
        self.function = FakeFla()
        self.module_name = None

    def chunk_metadata(self, cu_seqlens):
        return {}

    def __call__(self, *args, chunk_metadata=None, **kwargs):
        assert chunk_metadata == {}, "the branch must get the metadata made before the timed call"
        gdn_prefill_reference(*args, **kwargs)


def _bench(case, settings=None, ours=gdn_prefill_reference, vllm=None):
    return pb.bench_case(
        case,
        ours=ours,
        vllm=vllm or FakeVllm(),
        reference=gdn_prefill_reference,
        layout=pb.CacheLayout(),
        settings=settings or pb.PrefillSettings(warmup=0, iters=2, repeats=3),
        device="cpu",
    )


def test_inputs_are_laid_out_as_vllms_prefill_branch_hands_them_to_fla():
    case = pc.PrefillCase("tiny", 10, 4)
    t = pb.build_inputs(case, pb.CacheLayout(), "cpu")
    T = case.total_tokens
    assert t["q"].shape == t["k"].shape == (T, 2, 32) and t["v"].shape == t["out"].shape == (T, 4, 32)
    assert t["q"].dtype == torch.float16 and t["g"].dtype == torch.float32 and t["beta"].dtype == torch.float16
    assert t["g"].shape == t["beta"].shape == (T, 4)
    assert (t["g"] <= 0).all() and ((t["beta"] > 0) & (t["beta"] < 1)).all()
    assert t["ssm_state"].shape == (6, 4, 32, 32) and t["ssm_state"].dtype == torch.float32
    assert t["cu_seqlens"].tolist() == [0, 5, 13, 25, 40] and t["cu_seqlens"].dtype == torch.int32
    slots = t["state_indices"].tolist()
    assert t["state_indices"].dtype == torch.int32 and len(set(slots)) == 4 and min(slots) >= 1 and max(slots) <= 5
    assert t["has_initial_state"].tolist() == [True, False, True, False]
    again = pb.build_inputs(case, pb.CacheLayout(), "cpu")
    assert all(torch.equal(t[name], again[name]) for name in t)  # seeded


def test_fla_is_called_on_a_state_gathered_and_zeroed_beforehand():
    case = pc.PrefillCase("tiny", 10, 4)
    t = pb.build_inputs(case, pb.CacheLayout(), "cpu")
    fla = FakeFla()
    call = pb.fla_call(fla, t, {})
    call()
    seen = fla.calls[0]
    assert seen["q"] == (1, 40, 2, 32) and seen["final"] is True and seen["l2norm"] is True
    assert seen["cu"] == [0, 5, 13, 25, 40]
    gathered = t["ssm_state"][t["state_indices"].long()]
    assert torch.equal(seen["initial_state"][0], gathered[0]) and torch.equal(seen["initial_state"][2], gathered[2])
    assert not seen["initial_state"][1].any() and not seen["initial_state"][3].any()


@pytest.fixture
def fla_family(monkeypatch):
    """A family record whose FLA ops package is a stand-in module, to give ``VllmPrefill`` either FLA signature."""
    import types
    from dataclasses import replace

    from caovan.adapters.families import GDN_LINEAR_ATTN_V020

    module = types.ModuleType("caovan_test_fake_fla_ops")
    monkeypatch.setitem(sys.modules, module.__name__, module)
    return module, replace(GDN_LINEAR_ATTN_V020, fla_ops_module=module.__name__)


def test_the_baseline_makes_chunk_metadata_only_where_fla_takes_it(fla_family):
    from caovan.bench.vllm_prefill_path import VllmPrefill

    module, family = fla_family
    cu = torch.tensor([0, 5, 13, 78], dtype=torch.int32)
    module.chunk_gated_delta_rule = FakeFla()
    assert VllmPrefill(family).chunk_metadata(cu) == {}  # takes none

    def with_metadata(*, q, k, v, chunk_indices=None, chunk_offsets=None, **rest):
        return None

    module.chunk_gated_delta_rule = with_metadata
    made = VllmPrefill(family).chunk_metadata(cu)
    assert made["chunk_indices"].tolist() == [[0, 0], [1, 0], [2, 0], [2, 1]]
    assert made["chunk_offsets"].tolist() == [0, 1, 2, 4]
    assert made["chunk_indices"].dtype == made["chunk_offsets"].dtype == torch.int32


def test_a_case_row_has_times_speedups_and_errors_per_side():
    row = _bench(pc.PrefillCase("tiny", 6, 4))
    assert row["error"] is None and row["id"] == "tiny/L6/B4"
    assert row["case"]["seq_lens"] == [3, 4, 8, 9] and row["case"]["total_tokens"] == 24
    assert set(row["times_us"]) == set(pb.SIDES) == {"caovan", "vllm_fla", "vllm_branch"}
    assert all(t > 0 for t in row["times_us"].values())
    assert all(len(r) == 3 for r in row["repeats_us"].values())
    t = row["times_us"]
    assert row["speedup"]["vs_vllm_fla"] == pytest.approx(t["vllm_fla"] / t["caovan"])
    assert row["speedup"]["vs_vllm_branch"] == pytest.approx(t["vllm_branch"] / t["caovan"])
    e = row["errors"]
    assert e["skipped"] is None
    # both sides are the oracle itself, rounded to fp16 (the output) and fp32 (the state): small and non-zero
    for side in ("caovan", "vllm"):
        assert 0 < e[side]["out"] < 1e-2 and 0 <= e[side]["ssm_state"] < 1e-5
    assert row["vllm_fla_chunk_indices"] == "made by FLA in the call"


def test_a_wrong_prefill_shows_in_its_error():
    def wrong(*args, **kwargs):
        gdn_prefill_reference(*args, **kwargs)
        args[5].add_(1.0)  # out

    row = _bench(pc.PrefillCase("tiny", 4, 1), ours=wrong)
    assert row["errors"]["caovan"]["out"] > 0.5 and row["errors"]["vllm"]["out"] < 1e-2


def test_above_the_reference_limit_errors_are_null_with_the_reason():
    row = _bench(pc.PrefillCase("tiny", 8, 4), settings=pb.PrefillSettings(warmup=0, iters=1, repeats=1,
                                                                          max_reference_tokens=31))  # fmt: skip
    e = row["errors"]
    assert e["caovan"] is None and e["vllm"] is None
    assert e["skipped"] == "32 tokens > --max-reference-tokens 31: the float64 oracle runs token by token"
    assert row["times_us"]["caovan"] > 0


def test_a_nan_error_is_not_lost_in_the_max():
    assert pb._worse(0.5, float("nan")) != pb._worse(0.5, float("nan"))  # NaN
    assert pb._worse(float("nan"), 0.5) != pb._worse(float("nan"), 0.5)
    assert pb._worse(0.25, 0.5) == 0.5


def test_the_record_and_table_of_a_run_with_a_failed_case(tmp_path):
    def broken(*args, **kwargs):
        if args[0].shape[0] == 4:
            raise RuntimeError("out of memory")
        gdn_prefill_reference(*args, **kwargs)

    cases = [pc.PrefillCase("tiny", 4, 1), pc.PrefillCase("tiny", 4, 2)]
    lines = []
    rows = pb.run_cases(
        cases,
        device="cpu",
        progress=lines.append,
        ours=broken,
        vllm=FakeVllm(),
        reference=gdn_prefill_reference,
        layout=pb.CacheLayout(),
        settings=pb.PrefillSettings(warmup=1, iters=1, repeats=1),
    )
    assert lines[0] == "[1/2] tiny/L4/B1" and lines[1] == "  error: RuntimeError: out of memory"
    assert rows[0]["error"] == "RuntimeError: out of memory" and rows[1]["error"] is None
    env = pr.environment("cpu", interpreted=True)
    assert env["gpu"] == {"name": "interpreter", "capability": None} and env["device"] == "cpu"
    assert env["interpreter"] is True and set(env["caovan_source"]) == {"commit", "dirty"}
    assert {"torch", "triton", "vllm", "caovan"} <= set(env["versions"])
    report = pr.build_report(
        rows,
        env=env,
        vllm_family={"family_id": "f", "label": "F0"},
        settings=pb.PrefillSettings(warmup=1, iters=1, repeats=1),
        options={"shapes": ["tiny"], "lengths": [4], "batches": [1, 2]},
        argv=["caovan", "bench", "prefill", "--shapes", "tiny"],
        timestamp="2026-01-01T00:00:00+00:00",
    )
    assert report["schema"] == pr.JSON_SCHEMA == "caovan-bench-prefill/1"
    assert report["command"] == "caovan bench prefill --shapes tiny"
    assert report["summary"]["cases"] == 2 and report["summary"]["errors"] == 1
    assert report["summary"]["geomean_speedup_vs_vllm_fla"] == pytest.approx(rows[1]["speedup"]["vs_vllm_fla"])
    assert report["settings"]["iters"] == 1 and report["settings"]["sides"] == list(pb.SIDES)
    assert report["settings"]["batches"] == [1, 2] and report["settings"]["use_qk_l2norm"] is True
    assert json.loads(json.dumps(report, allow_nan=False)) == report  # strict JSON
    table = pr.format_table(rows).splitlines()
    assert table[0].split("|")[1].strip() == "case" and len(table) == 4
    assert "ERROR: RuntimeError: out of memory" in table[2] and table[3].startswith("| tiny/L4/B2")


def test_source_commit_names_this_checkout():
    source = pr.source_commit()
    if source["commit"] is not None:
        assert len(source["commit"]) == 40 and isinstance(source["dirty"], bool)


# --------------------------------------------------------------------------------------------------
# The command itself under the Triton interpreter, against the installed vLLM
# --------------------------------------------------------------------------------------------------
@pytest.mark.interpreter
def test_the_command_under_the_interpreter_writes_the_record(tmp_path):
    if importlib.util.find_spec("vllm") is None:
        pytest.skip("vLLM is not installed: nothing to compare with")
    import numpy

    if tuple(int(p) for p in numpy.__version__.split(".")[:2]) >= (2, 4):
        pytest.skip(f"Triton's interpreter needs numpy < 2.4, found {numpy.__version__}")
    from importlib.metadata import version

    record_file = tmp_path / "prefill.json"
    env = {**os.environ, "TRITON_INTERPRET": "1", "CUDA_VISIBLE_DEVICES": ""}  # vLLM imports without a GPU so
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)  # the same caovan, vLLM and helpers as here
    argv = [*INTERPRETER_ARGS, "--warmup", "0", "--json", str(record_file)]
    proc = subprocess.run(
        [sys.executable, str(CHILD), *argv], env=env, capture_output=True, text=True, timeout=900
    )  # fmt: skip
    log = (proc.stdout + "\n" + proc.stderr)[-6000:]
    assert proc.returncode == 0, log
    assert "wrote " + str(record_file) in proc.stderr
    record = json.loads(record_file.read_text())
    assert record["schema"] == "caovan-bench-prefill/1"
    assert record["device"] == "cpu" and record["interpreter"] is True and record["gpu"]["name"] == "interpreter"
    assert record["versions"]["vllm"] == version("vllm")
    assert "--shapes tiny --lengths 64,100 --batches 1,4 --iters 1 --repeats 1" in record["command"]
    assert record["settings"]["iters"] == 1 and record["settings"]["repeats"] == 1
    assert record["vllm_family"]["fla_ops_module"]
    assert record["summary"]["cases"] == 4 and record["summary"]["errors"] == 0
    by_id = {c["id"]: c for c in record["cases"]}
    assert list(by_id) == ["tiny/L64/B1", "tiny/L64/B4", "tiny/L100/B1", "tiny/L100/B4"]
    assert by_id["tiny/L100/B4"]["case"]["seq_lens"] == [50, 75, 125, 150]
    assert by_id["tiny/L100/B4"]["case"]["total_tokens"] == 400
    for case_id, c in by_id.items():
        assert c["error"] is None, case_id
        assert all(c["times_us"][side] > 0 for side in ("caovan", "vllm_fla", "vllm_branch")), case_id
        assert c["speedup"]["vs_vllm_fla"] > 0 and c["speedup"]["vs_vllm_branch"] > 0
        for side in ("caovan", "vllm"):  # both near float64: fp16 activations, an fp32 state
            for key in ("out", "ssm_state"):
                assert 0 < c["errors"][side][key] < 1e-2, (case_id, side, key, c["errors"])
    assert "| tiny/L100/B4" in proc.stdout and "geomean speedup of caovan" in proc.stdout


@pytest.mark.interpreter
def test_no_vllm_times_caovan_alone(tmp_path):
    import numpy

    if tuple(int(p) for p in numpy.__version__.split(".")[:2]) >= (2, 4):
        pytest.skip(f"Triton's interpreter needs numpy < 2.4, found {numpy.__version__}")
    record_file = tmp_path / "prefill.json"
    env = {**os.environ, "TRITON_INTERPRET": "1", "CUDA_VISIBLE_DEVICES": ""}
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    argv = ["--shapes", "tiny", "--lengths", "64", "--batches", "1,4", "--iters", "1", "--repeats", "1"]
    argv += ["--warmup", "0", "--no-vllm", "--json", str(record_file)]
    proc = subprocess.run([sys.executable, str(CHILD), *argv], env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    assert "caovan alone (--no-vllm)" in proc.stderr
    record = json.loads(record_file.read_text())
    assert record["vllm_family"] is None and record["settings"]["sides"] == ["caovan"]
    for c in record["cases"]:
        assert c["error"] is None and c["times_us"]["caovan"] > 0
        assert c["times_us"]["vllm_fla"] is None and c["speedup"]["vs_vllm_fla"] is None
        assert c["errors"]["vllm"] is None and 0 < c["errors"]["caovan"]["ssm_state"] < 1e-2
