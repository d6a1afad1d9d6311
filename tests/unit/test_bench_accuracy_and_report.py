"""CPU tests of the error measurement, the acceptance rules, one bench row and the JSON report.

The implementations here are the float64 reference (run on fp16/fp32 tensors it rounds like a kernel
would) and deliberately broken variants of it, so every check is shown to fire.
"""

from __future__ import annotations

import json
import math

import pytest

torch = pytest.importorskip("torch", reason="the bench's error measurement runs torch")

from caovan.bench import accuracy  # noqa: E402
from caovan.bench import kernels as kb  # noqa: E402
from caovan.bench.cases import TENSOR_ARGS, SpecDecodeCase, build_inputs  # noqa: E402
from caovan.kernels.gdn_spec_decode.naive import gdn_spec_decode_reference as reference  # noqa: E402

EDGE = SpecDecodeCase(
    "tiny", num_seqs=3, num_spec_tokens=2, ssm_dtype="float16", accepted="sweep",
    mixed_lengths=True, null_seqs=1, padded_seqs=1, padded_tokens=2, null_write_slots=True,
)  # fmt: skip


@pytest.fixture(scope="module")
def edge():
    inputs = build_inputs(EDGE)
    return inputs, accuracy.run_reference(reference, inputs)


def test_rounded_implementation_is_within_tolerance(edge):
    inputs, ref = edge
    err = accuracy.measure(reference, inputs, ref)
    assert 0 < err.out < 1e-3 and 0 < err.ssm_state < 1e-2 and err.conv_state == 0
    assert err.null_rows_zero is True and err.page_padding_intact
    assert accuracy.check_standalone(EDGE, err) == []
    assert accuracy.check_against_vllm(EDGE, err, err) == []


def _broken(mutate):
    def impl(*args, **kwargs):
        reference(*args, **kwargs)
        mutate(dict(zip(TENSOR_ARGS, args, strict=True)))

    return impl


def test_unwritten_output_row_fails(edge):
    inputs, ref = edge
    real_row = inputs.plan.rows_of("real")[0]
    err = accuracy.measure(_broken(lambda t: t["out"][real_row].fill_(math.nan)), inputs, ref)
    assert math.isnan(err.out)
    assert any(p.startswith("out:") for p in accuracy.check_standalone(EDGE, err))


def test_write_into_a_spare_block_fails(edge):
    inputs, ref = edge
    spare = inputs.plan.num_blocks - 1
    err = accuracy.measure(_broken(lambda t: t["ssm_state"][spare].add_(1)), inputs, ref)
    assert err.ssm_state >= 0.5
    assert any(p.startswith("ssm_state:") for p in accuracy.check_standalone(EDGE, err))


def test_conv_state_must_be_exact(edge):
    inputs, ref = edge
    err = accuracy.measure(_broken(lambda t: t["conv_state"][0, 0, 0].add_(1e-2)), inputs, ref)
    assert err.conv_state > 0
    assert any(p.startswith("conv_state:") for p in accuracy.check_standalone(EDGE, err))


def test_write_into_page_padding_fails(edge):
    inputs, ref = edge

    def poke_padding(t):
        s = t["ssm_state"]
        h = EDGE.head_config
        past_block0 = s.storage_offset() + h.num_v_heads * h.head_v_dim * h.head_k_dim
        torch.as_strided(s, (1,), (1,), past_block0).fill_(3.0)

    err = accuracy.measure(_broken(poke_padding), inputs, ref)
    assert not err.page_padding_intact
    assert any("page padding" in p for p in accuracy.check_standalone(EDGE, err))


def test_non_zero_null_rows_fail(edge):
    inputs, ref = edge
    null_rows = inputs.plan.rows_of("null")
    rows = torch.tensor(null_rows)
    err = accuracy.measure(_broken(lambda t: t["out"].index_fill_(0, rows, 1.0)), inputs, ref)
    assert err.null_rows_zero is False
    assert any("null-slot" in p for p in accuracy.check_standalone(EDGE, err))


def _report(out, ssm, conv=0.0, out_max=1.0, ssm_max=2.0):
    return accuracy.ErrorReport(out, ssm, conv, out_max, ssm_max, None, True)


def test_rule_against_vllm_uses_the_documented_floor():
    case = SpecDecodeCase("small", 1, 1, ssm_dtype="float32")  # fp16 out, fp32 state
    vllm = _report(out=1e-4, ssm=1e-3)
    floor_out = accuracy.FLOOR_ULPS * 2.0**-10 * 1.0
    floor_ssm = accuracy.FLOOR_ULPS * 2.0**-23 * 2.0
    assert accuracy.check_against_vllm(case, _report(1e-4 + floor_out, 1e-3 + floor_ssm), vllm) == []
    fails = accuracy.check_against_vllm(case, _report(1e-4 + 2 * floor_out, 1e-3), vllm)
    assert len(fails) == 1 and fails[0].startswith("out:")
    fails = accuracy.check_against_vllm(case, _report(0.0, 1e-3 + 2 * floor_ssm), vllm)
    assert len(fails) == 1 and fails[0].startswith("ssm_state:")
    assert accuracy.check_against_vllm(case, _report(math.nan, 0.0), vllm)
    assert accuracy.check_against_vllm(case, _report(0.0, 0.0, conv=1e-9), vllm)


def _fake_timer(us):
    def timer(fn, settings):
        fn()  # the call must run
        return us

    return timer


def _fake_eager_timer(us):
    def timer(fns, settings):
        for fn in fns:
            fn()
        return [us] * len(fns)

    return timer


def _row(case, ours=reference, vllm=reference):
    return kb.bench_case(
        case, ours=ours, vllm=vllm, reference=reference, bandwidth=1e12, settings=kb.QUICK_SETTINGS,
        device="cpu", eager_timer=_fake_eager_timer(20.0), graph_timer=_fake_timer(5.0),
    )  # fmt: skip


def test_bench_row_and_strict_json_report():
    case = SpecDecodeCase("tiny", num_seqs=2, num_spec_tokens=1, ssm_layout="kv")
    row = _row(case)
    assert row["error"] is None and row["accuracy_rule"]["passed"]
    assert row["ours"]["graph_us"] == 5.0 and row["speedup_graph"] == 1.0
    assert row["roofline_us"] == pytest.approx(row["traffic_bytes"]["total"] / 1e12 * 1e6)
    assert row["ours"]["pct_roofline_graph"] == pytest.approx(100 * row["roofline_us"] / 5.0)
    assert row["num_tokens"] == 4
    assert row["ours"]["graph_layers_us"] == 5.0 and row["speedup_graph_layers"] == 1.0
    assert row["layers"] == {"copies": 2, "l2_bytes": 0, "footprint_vs_l2": None}  # CPU: no L2 known

    def broken(*args, **kwargs):
        raise RuntimeError("kernel exploded")

    rows = kb.run_cases(
        [case, SpecDecodeCase("tiny", 1, 1)], ours=broken, vllm=reference, reference=reference,
        bandwidth=1e12, settings=kb.QUICK_SETTINGS, device="cpu",
        eager_timer=_fake_eager_timer(1.0), graph_timer=_fake_timer(1.0), progress=lambda line: None,
    )  # fmt: skip
    assert [r["error"] for r in rows] == ["RuntimeError: kernel exploded"] * 2
    rows = [row, *rows[:1]]

    env = {"gpu": {"name": "Fake GPU", "capability": "7.5"}, "versions": {"torch": "x"}}
    report = kb.build_report(
        rows, env=env, bandwidth=1e12, settings=kb.QUICK_SETTINGS, case_set="small", quick=True,
        argv=["caovan", "bench", "kernels", "--quick"], timestamp="2025-01-01T00:00:00+00:00",
    )  # fmt: skip
    text = json.dumps(report, allow_nan=False)  # strict JSON: NaN/inf must have been converted
    back = json.loads(text)
    assert back["schema"] == kb.JSON_SCHEMA
    assert back["command"] == "caovan bench kernels --quick"
    assert back["gpu"]["capability"] == "7.5" and back["bandwidth"]["gb_per_s"] == 1000.0
    assert back["settings"]["quick"] is True and back["settings"]["cases"] == "small"
    assert back["summary"] == {
        "cases": 2, "errors": 1, "accuracy_rule_failures": 0,
        "geomean_speedup_eager": 1.0, "geomean_speedup_graph": 1.0, "geomean_speedup_graph_layers": 1.0,
    }  # fmt: skip
    assert {"id", "case", "traffic_bytes", "roofline_us", "ours", "vllm"} <= set(back["cases"][0])
    assert set(back["cases"][0]["ours"]["errors"]) >= {"out", "ssm_state", "conv_state"}

    table = kb.format_table(rows)
    assert case.id in table and "ERROR: RuntimeError: kernel exploded" in table
    assert table.splitlines()[0].count("|") == len(kb.TABLE_HEADERS) + 1


def test_nan_errors_survive_as_strings_in_json():
    safe = kb._json_safe({"a": [math.nan, math.inf, 1.0]})
    assert safe == {"a": ["nan", "inf", 1.0]}


def test_environment_records_versions():
    env = kb.environment()
    assert set(env) == {"gpu", "versions"}
    assert env["versions"]["torch"] == torch.__version__
    assert set(env["versions"]) >= {"python", "torch", "triton", "vllm", "caovan"}
    if not torch.cuda.is_available():
        assert env["gpu"] == {}


def test_layers_graph_time_cycles_through_distinct_copies():
    """Each captured call of the "layers" timing works on another copy of the caches."""
    case = SpecDecodeCase("tiny", num_seqs=2, num_spec_tokens=1)
    seen: list[int] = []

    def ours(*args, **kwargs):
        seen.append(args[8].data_ptr())  # ssm_state
        reference(*args, **kwargs)

    def graph_timer(fn, settings):
        for _ in range(settings.graph_calls):
            fn()
        return 1.0

    settings = kb.BenchSettings(warmup=1, eager_iters=1, eager_blocks=1, graph_calls=3, graph_repeats=1)
    kb.bench_case(
        case, ours=ours, vllm=reference, reference=reference, bandwidth=1e12, settings=settings,
        device="cpu", eager_timer=_fake_eager_timer(1.0), graph_timer=graph_timer,
    )  # fmt: skip
    layers_calls = seen[-3:]  # the layers timing runs last: 3 captured calls over 2 copies
    assert layers_calls[0] != layers_calls[1] and layers_calls[2] == layers_calls[0]


@pytest.mark.parametrize(
    ("footprint", "copy_bytes", "l2", "expected"),
    [
        (77 << 20, 100 << 20, 60 << 20, 2),  # a large call: two copies already pass 2x L2
        (10 << 20, 20 << 20, 60 << 20, 12),  # ceil(2 * 60 / 10)
        (1 << 10, 4 << 10, 60 << 20, 64),  # tiny calls: capped at max_layers
        (10 << 20, 2 << 30, 60 << 20, 2),  # huge copies: the memory cap, but never fewer than 2
        (10 << 20, 20 << 20, 0, 2),  # unknown L2
    ],
)
def test_layer_copies(footprint, copy_bytes, l2, expected):
    assert kb.layer_copies(footprint, copy_bytes, l2, kb.BenchSettings()) == expected
