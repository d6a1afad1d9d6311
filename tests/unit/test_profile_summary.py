"""Where a decode step's GPU time goes, from a torch-profiler trace (caovan.bench.profile_summary)."""

from __future__ import annotations

import gzip
import json

import pytest

from caovan.bench import profile_summary as ps


@pytest.mark.parametrize(
    ("kernel", "category"),
    [
        ("_caovan_sm75_prepare_qk_conv_spec_decode_kernel", "GDN spec core"),
        ("fused_sigmoid_gating_delta_rule_update_kernel", "GDN spec core"),
        ("fused_recurrent_gated_delta_rule_fwd_kernel", "GDN spec core"),
        ("_causal_conv1d_update_kernel", "GDN spec core"),
        ("fused_gdn_gating_kernel", "GDN spec core"),
        ("chunk_gated_delta_rule_fwd_kernel_h_blockdim64", "GDN other"),
        ("_causal_conv1d_fwd_kernel", "GDN other"),
        ("flash_fwd_splitkv_kernel", "attention"),
        ("reshape_and_cache_flash_kernel", "attention"),
        ("nvjet_tst_128x64_64x4_1x2_h_bz_coopA_TNT", "GEMMs"),
        ("sm90_xmma_gemm_f16f16_f16f32_f32_tn_n_tilesize128x128x64", "GEMMs"),
        ("Marlin<256, 1, 8, 8, 4, 8>", "GEMMs"),
        ("triton_red_fused__to_copy_add_mean_mul_pow_rsqrt_0", "the rest"),
    ],
)
def test_kernels_land_in_their_category(kernel, category):
    assert ps.category_of(kernel) == category


def _trace(events):
    return {"traceEvents": events}


def test_shares_and_per_step_times_cover_every_kernel():
    events = [{"ph": "X", "name": ps.STEP_EVENT, "dur": 900}] * 4
    events += [{"cat": "kernel", "name": "_caovan_sm75_x", "dur": 10.0}] * 4
    events += [{"cat": "kernel", "name": "flash_fwd", "dur": 20.0}] * 4
    events += [{"cat": "kernel", "name": "triton_poi_fused_0", "dur": 10.0}] * 4
    events += [{"cat": "cpu_op", "name": "aten::mm", "dur": 999.0}, "not an event"]
    summary = ps.summarise(_trace(events))
    assert summary["steps"] == 4 and summary["gpu_us"] == 160.0
    rows = {row["category"]: row for row in summary["categories"]}
    assert rows["GDN spec core"]["share"] == 0.25 and rows["GDN spec core"]["per_step_us"] == 10.0
    assert rows["attention"]["share"] == 0.5 and rows["the rest"]["share"] == 0.25
    assert rows["GEMMs"] == {"category": "GEMMs", "gpu_us": 0.0, "share": 0.0, "per_step_us": 0.0, "top_kernels": []}
    text = ps.format_summary(summary, "t")
    assert text.splitlines()[0] == "t: 4 model steps, 40.0 µs of GPU kernels per step"


def test_a_trace_without_kernels_is_an_error():
    with pytest.raises(ps.TraceError, match="no GPU kernel"):
        ps.summarise(_trace([{"ph": "X", "name": ps.STEP_EVENT, "dur": 1}]))


def test_the_command_reads_a_gzipped_trace_and_writes_json(tmp_path, capsys):
    trace = tmp_path / "w.pt.trace.json.gz"
    trace.write_bytes(gzip.compress(json.dumps(_trace([{"cat": "kernel", "name": "gemm", "dur": 5}])).encode()))
    assert ps.main([str(trace), "--json", str(tmp_path / "s.json")]) == 0
    assert "0 model steps, steps not found" in capsys.readouterr().out
    assert json.loads((tmp_path / "s.json").read_text())["categories"][3]["share"] == 1.0


@pytest.mark.parametrize(("content", "message"), [(b"\x1f\x8bbroken", "cannot read it"), (b"[]", "no traceEvents")])
def test_an_unreadable_trace_is_one_error_naming_it(tmp_path, capsys, content, message):
    trace = tmp_path / ("t.json.gz" if content.startswith(b"\x1f") else "t.json")
    trace.write_bytes(content)
    assert ps.main([str(trace)]) == 2
    err = capsys.readouterr().err
    assert str(trace) in err and message in err


def test_a_step_range_and_its_gpu_twin_count_once():
    # With CUDA activity the profiler writes each record_function range on the host and again on the GPU stream.
    step = {"ph": "X", "name": ps.STEP_EVENT, "dur": 900}
    events = [{**step, "cat": "user_annotation"}, {**step, "cat": "gpu_user_annotation"}] * 3
    events += [{"cat": "kernel", "name": "gemm", "dur": 30.0}]
    summary = ps.summarise(_trace(events))
    assert summary["steps"] == 3 and summary["categories"][3]["per_step_us"] == 10.0


@pytest.mark.parametrize(
    ("kernel", "short"),
    [
        ("fused_sigmoid_gating_delta_rule_update_kernel", "fused_sigmoid_gating_delta_rule_update_kernel"),
        ("void vllm::reshape_and_cache_flash_kernel<unsigned short>(unsigned short const*, long)",
         "vllm::reshape_and_cache_flash_kernel<unsigned short>"),
        ("void at::native::(anonymous namespace)::vectorized_kernel<4>(int, float*)",
         "at::native::vectorized_kernel<4>"),
        ("void f<g<(lambda(int)#1)>>(x)", "f<g<(lambda(int)#1)>>"),
        ("void cutlass::device_kernel<flash::enable_sm90_or_later<flash::FlashAttnFwdSm90<flash::Collective<2>>>>(P)",
         "cutlass::device_kernel<flash::enable_sm90_or_later<flash::FlashAttnFwdSm90<flas…"),
    ],
)  # fmt: skip
def test_kernel_names_are_cut_for_the_text_table(kernel, short):
    assert ps.short_kernel_name(kernel) == short
    assert len(ps.short_kernel_name(kernel)) <= ps.KERNEL_NAME_WIDTH


def test_the_text_table_keeps_long_kernel_names_short_and_the_json_whole():
    long_name = "void cutlass::device_kernel<" + "x" * 900 + ">(Params)"
    summary = ps.summarise(_trace([{"cat": "kernel", "name": long_name, "dur": 5}]))
    assert max(len(line) for line in ps.format_summary(summary, "t").splitlines()) < 200
    assert summary["categories"][3]["top_kernels"][0][0] == long_name


def test_the_gpu_busy_share_is_the_union_of_kernel_intervals_over_their_span():
    kernels = [(0, 10), (5, 10), (30, 10), (32, 2), (90, 10)]  # (ts, dur): busy 0-15, 30-40, 90-100 of 0-100
    events = [{"cat": "kernel", "name": "gemm", "ts": ts, "dur": dur} for ts, dur in kernels]
    events += [{"ph": "X", "cat": "user_annotation", "name": ps.STEP_EVENT, "ts": 0, "dur": 100}]
    summary = ps.summarise(_trace(events))
    assert summary["span_us"] == 100.0 and summary["gpu_busy"] == 0.35
    assert ps.format_summary(summary, "t").splitlines()[0].endswith("the GPU was busy 35% of the 0.00 s profiled")


def test_kernels_without_timestamps_give_no_busy_share():
    summary = ps.summarise(_trace([{"cat": "kernel", "name": "gemm", "dur": 5}]))
    assert summary["gpu_busy"] is None and summary["span_us"] is None
    assert "busy" not in ps.format_summary(summary, "t")
