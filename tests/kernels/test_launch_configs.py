"""Launch configurations as data: the SM75 values users know, and the lookup by capability."""

from __future__ import annotations

import pytest

from caovan.kernels.gdn_spec_decode.launch_configs import (
    ALL_LAUNCH_CONFIGS,
    LAUNCH_CONFIGS,
    config_for,
)


def test_sm75_values_are_turbo3s():
    sm75 = LAUNCH_CONFIGS["sm75"]
    assert (sm75.qk.num_warps, sm75.qk.num_stages) == (2, 1)
    assert (sm75.v_gdn.num_warps, sm75.v_gdn.num_stages, sm75.v_gdn.BV) == (2, 1, 32)
    assert sm75.tuned


def test_untuned_placeholders_say_so():
    for config in ALL_LAUNCH_CONFIGS:
        if not config.tuned:
            assert "untuned" in config.note


@pytest.mark.parametrize(
    "capability,arch",
    [
        ((7, 5), "sm75"),
        (75, "sm75"),
        ("sm_75", "sm75"),
        ((8, 6), "sm75"),
        ((8, 9), "sm75"),
        ((9, 0), "sm90"),
        ("sm90", "sm90"),
        ((12, 0), "sm90"),
    ],
)
def test_config_for_picks_exact_or_nearest_lower(capability, arch):
    assert config_for(capability).arch == arch


@pytest.mark.parametrize("capability", [(7, 0), 61, "sm_70"])
def test_config_for_refuses_pre_turing(capability):
    with pytest.raises(ValueError, match="no launch configuration for sm"):
        config_for(capability)


def test_config_for_rejects_garbage():
    with pytest.raises(ValueError, match="capability"):
        config_for("turing")


def test_direct_launch_hook_detection_understands_triton_hook_chains(monkeypatch):
    """Triton 3.6 stores launch hooks in a HookChain that is never None: an empty chain is no hook."""
    from caovan.kernels.gdn_spec_decode import launcher

    class Chain:
        def __init__(self, calls):
            self.calls = calls

    monkeypatch.setattr(launcher.knobs.runtime, "launch_enter_hook", Chain([]))
    monkeypatch.setattr(launcher.knobs.runtime, "launch_exit_hook", Chain([]))
    assert not launcher.launch_hooks_set()
    monkeypatch.setattr(launcher.knobs.runtime, "launch_enter_hook", Chain([print]))
    assert launcher.launch_hooks_set()
    monkeypatch.setattr(launcher.knobs.runtime, "launch_enter_hook", None)
    assert not launcher.launch_hooks_set()
    monkeypatch.setattr(launcher.knobs.runtime, "launch_exit_hook", print)
    assert launcher.launch_hooks_set()


def _write(tmp_path, entries):
    import json

    path = tmp_path / "launch_configs.json"
    path.write_text(json.dumps(entries), encoding="utf-8")
    return path


def _entry(capability, **extra):
    return {
        "capability": list(capability),
        "qk": {"num_warps": 2, "num_stages": 1},
        "v_gdn": {"num_warps": 1, "num_stages": 1, "BV": 8},
        "tuned": True,
        "note": "test",
        **extra,
    }


def test_pdl_is_read_from_the_data_and_off_by_default(tmp_path):
    from caovan.kernels.gdn_spec_decode.launch_configs import _load

    configs = _load(_write(tmp_path, {"sm75": _entry((7, 5)), "sm90": _entry((9, 0), pdl=True)}))
    assert configs["sm75"].pdl is False
    assert configs["sm90"].pdl is True


def test_pdl_on_a_pre_hopper_entry_is_one_clear_error(tmp_path):
    from caovan.kernels.gdn_spec_decode.launch_configs import _load

    path = _write(tmp_path, {"sm80": _entry((8, 0), pdl=True)})
    with pytest.raises(ValueError, match=r"launch_configs\.json: entry 'sm80': pdl: .*needs sm90 or newer"):
        _load(path)


def test_a_malformed_entry_names_the_file_and_entry(tmp_path):
    from caovan.kernels.gdn_spec_decode.launch_configs import _load

    broken = _entry((9, 0))
    del broken["v_gdn"]
    with pytest.raises(ValueError, match=r"launch_configs\.json: entry 'sm90': 'v_gdn'"):
        _load(_write(tmp_path, {"sm90": broken}))


@pytest.mark.parametrize(
    "pdl,device,capability,expected",
    [
        (True, "cuda:0", (9, 0), True),
        (True, "cuda:0", (10, 0), True),
        (True, "cuda:0", (8, 9), False),  # e.g. a test override on an older GPU: plain launches
        (True, "cpu", None, False),  # the interpreter
        (False, "cuda:0", (9, 0), False),
    ],
)
def test_pdl_is_used_only_where_the_gpu_has_it(monkeypatch, pdl, device, capability, expected):
    from dataclasses import replace

    import torch

    from caovan.kernels.gdn_spec_decode import launcher

    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: capability)
    config = replace(LAUNCH_CONFIGS["sm75"], pdl=pdl)
    assert launcher.use_pdl(config, torch.device(device)) is expected


def test_stagger_threshold_is_read_from_the_data(tmp_path):
    from caovan.kernels.gdn_spec_decode.launch_configs import _load

    entries = {"sm75": _entry((7, 5)), "sm90": _entry((9, 0), pdl=True, stagger_min_state_write_bytes=1000)}
    configs = _load(_write(tmp_path, entries))
    assert configs["sm75"].stagger_min_state_write_bytes is None
    assert not configs["sm75"].stagger_on(10**12)  # no threshold: never
    assert not configs["sm90"].stagger_on(999)
    assert configs["sm90"].stagger_on(1000)


@pytest.mark.parametrize(
    "extra,message",
    [
        ({"pdl": True, "stagger_min_state_write_bytes": -1}, "expected a byte count >= 0 or null, got -1"),
        ({"pdl": True, "stagger_min_state_write_bytes": "24MB"}, "expected a byte count >= 0 or null, got '24MB'"),
        ({"stagger_min_state_write_bytes": 0}, "needs pdl"),
    ],
)
def test_a_bad_stagger_threshold_is_one_clear_error(tmp_path, extra, message):
    from caovan.kernels.gdn_spec_decode.launch_configs import _load

    path = _write(tmp_path, {"sm90": _entry((9, 0), **extra)})
    with pytest.raises(ValueError, match=r"launch_configs\.json: entry 'sm90': stagger_min_state_write_bytes: "):
        _load(path)
    with pytest.raises(ValueError, match=message):
        _load(path)


def test_register_cap_is_read_from_the_data_and_off_by_default(tmp_path):
    from caovan.kernels.gdn_spec_decode.launch_configs import _load

    capped = _entry((7, 5))
    capped["v_gdn"] = dict(capped["v_gdn"], maxnreg=168)
    configs = _load(_write(tmp_path, {"sm75": capped, "sm90": _entry((9, 0))}))
    assert configs["sm75"].v_gdn.maxnreg == 168
    assert configs["sm90"].v_gdn.maxnreg is None


@pytest.mark.parametrize("maxnreg", [0, 256, "168", 168.0, True])
def test_a_bad_register_cap_is_one_clear_error(tmp_path, maxnreg):
    from caovan.kernels.gdn_spec_decode.launch_configs import _load

    entry = _entry((7, 5))
    entry["v_gdn"] = dict(entry["v_gdn"], maxnreg=maxnreg)
    with pytest.raises(
        ValueError,
        match=r"launch_configs\.json: entry 'sm75': v_gdn\.maxnreg: expected registers per thread from 16 to 255",
    ):
        _load(_write(tmp_path, {"sm75": entry}))


def test_the_sm90_entry_staggers_only_large_state_writes():
    # 27B at TP=2, 8 sequences x 5 tokens, fp32 state: 63 MB (measured faster); 2 sequences x 5 tokens, fp16: 8 MB.
    per_token_head = 128 * 128
    assert LAUNCH_CONFIGS["sm90"].stagger_on(40 * 24 * per_token_head * 4)
    assert not LAUNCH_CONFIGS["sm90"].stagger_on(10 * 24 * per_token_head * 2)


def test_write_through_threshold_is_read_from_the_data_and_off_by_default(tmp_path):
    from caovan.kernels.gdn_spec_decode.launch_configs import _load

    entries = {"sm75": _entry((7, 5)), "sm90": _entry((9, 0), write_through_last_min_state_write_bytes=1000)}
    configs = _load(_write(tmp_path, entries))
    assert configs["sm75"].write_through_last_min_state_write_bytes is None
    assert not configs["sm75"].write_through_last_on(10**12)  # no threshold: never
    assert not configs["sm90"].write_through_last_on(999)
    assert configs["sm90"].write_through_last_on(1000)


@pytest.mark.parametrize("value", [-1, "48MiB", 1.5e7, True])
def test_a_bad_write_through_threshold_is_one_clear_error(tmp_path, value):
    from caovan.kernels.gdn_spec_decode.launch_configs import _load

    path = _write(tmp_path, {"sm90": _entry((9, 0), write_through_last_min_state_write_bytes=value)})
    with pytest.raises(
        ValueError,
        match=r"launch_configs\.json: entry 'sm90': write_through_last_min_state_write_bytes: "
        r"expected a byte count >= 0 or null",
    ):
        _load(path)


def test_the_sm90_entry_writes_through_only_calls_writing_most_of_l2():
    # Measured on an H200 (docs/bench/kernel-design.md): 27B at TP=2, 8 sequences, fp32 state,
    # MTP 3 (4 tokens, 48 MiB of state) and MTP 4 (5 tokens, 60 MiB) faster; Qwen3-Next-80B with 8 sequences, MTP 4,
    # fp32 (16 value heads, 40 MiB) and 27B with an fp16 state at MTP 4 (30 MiB) slower.
    slab = 128 * 128
    sm90 = LAUNCH_CONFIGS["sm90"]
    assert sm90.write_through_last_on(8 * 4 * 24 * slab * 4)
    assert sm90.write_through_last_on(8 * 5 * 24 * slab * 4)
    assert not sm90.write_through_last_on(8 * 5 * 16 * slab * 4)
    assert not sm90.write_through_last_on(8 * 5 * 24 * slab * 2)
    assert LAUNCH_CONFIGS["sm75"].write_through_last_min_state_write_bytes is None  # not measured on a 2080 Ti


def test_preferred_block_options_apply_at_the_entrys_bv_only(tmp_path):
    from caovan.kernels.gdn_spec_decode.launch_configs import _load

    entry = _entry((9, 0))
    entry["v_gdn"] = dict(
        entry["v_gdn"], BV=8, maxnreg=200, preferred_block_constant_slab_offsets=True, preferred_block_maxnreg=88
    )
    v = _load(_write(tmp_path, {"sm90": entry}))["sm90"].v_gdn
    assert v.options_for(8) == (88, True)
    assert v.options_for(16) == (200, False)  # a block the one-wave rule took: the entry's own cap, runtime strides
    assert v.at_block(16).options_for(16) == (200, False)
    assert v.at_block(8).options_for(8) == (88, True)
    plain = _load(_write(tmp_path, {"sm90": _entry((9, 0))}))["sm90"].v_gdn
    assert plain.options_for(plain.BV) == (None, False)  # off unless the entry asks


def test_the_sm90_entry_compiles_the_slab_strides_in_at_bv8_with_an_88_register_cap():
    # Faster on an H200 at BV 8 (docs/bench/kernel-design.md); at BV 16 (8-sequence 27B batches) neither applies.
    v = LAUNCH_CONFIGS["sm90"].v_gdn
    assert (v.BV, v.options_for(8), v.options_for(16)) == (8, (88, True), (None, False))


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("preferred_block_maxnreg", 300, r"v_gdn\.preferred_block_maxnreg: expected registers per thread from 16"),
        ("preferred_block_maxnreg", "88", r"v_gdn\.preferred_block_maxnreg: expected registers per thread from 16"),
        ("preferred_block_constant_slab_offsets", 1, r"v_gdn\.preferred_block_constant_slab_offsets: expected true"),
        ("preferred_block_constant_slab_offsets", "yes", r"v_gdn\.preferred_block_constant_slab_offsets: expected"),
    ],
)
def test_bad_preferred_block_options_are_one_clear_error(tmp_path, field, value, message):
    from caovan.kernels.gdn_spec_decode.launch_configs import _load

    entry = _entry((9, 0))
    entry["v_gdn"] = dict(entry["v_gdn"], **{field: value})
    with pytest.raises(ValueError, match=r"launch_configs\.json: entry 'sm90': " + message):
        _load(_write(tmp_path, {"sm90": entry}))


def test_larger_blocks_of_the_one_wave_rule_compile_without_the_preferred_block_options():
    from caovan.kernels.gdn_spec_decode.aot import runtime_launch_configs

    sm90 = [c for c in runtime_launch_configs() if c.arch == "sm90" and not c.v_gdn.splits_rows(c.v_gdn.BV, True)]
    assert [c.v_gdn.BV for c in sm90] == [8, 16]  # the entry, then the one-wave rule's larger block
    assert [c.v_gdn.options_for(c.v_gdn.BV) for c in sm90] == [(88, True)] + [(None, False)] * (len(sm90) - 1)


def _split(**v_gdn):
    v = {"row_split_block": 16, "row_split_lanes": 16, "row_split_maxnreg": 152, **v_gdn}
    entry = _entry((9, 0), row_split_min_state_write_bytes=1000)
    entry["v_gdn"] = dict(entry["v_gdn"], **{key: value for key, value in v.items() if value is not None})
    return entry


def test_row_split_options_apply_at_the_split_block_of_split_calls_only(tmp_path):
    from caovan.kernels.gdn_spec_decode.launch_configs import _load

    config = _load(_write(tmp_path, {"sm90": _split()}))["sm90"]
    v = config.v_gdn
    assert (v.options_for(16, True), v.row_lanes_for(16, True)) == ((152, False), 16)
    assert (v.options_for(16, False), v.row_lanes_for(16, False)) == ((None, False), 32)  # a call below threshold
    assert (v.options_for(8, True), v.row_lanes_for(8, True)) == ((None, False), 32)  # the entry's BV: no split
    folded = v.at_block(16, True)  # a configuration of its own keeps the split
    assert (folded.BV, folded.options_for(16, True), folded.row_lanes_for(16, True)) == (16, (152, False), 16)
    assert v.at_block(16).row_split_block is None
    assert config.row_split_on(1000, 4) and not config.row_split_on(999, 4)
    assert not config.row_split_on(10**9, 2)  # 16-bit states never split: they were slower (and spill at the cap)
    plain = _load(_write(tmp_path, {"sm90": _entry((9, 0))}))["sm90"]
    assert not plain.row_split_on(10**12, 4) and plain.v_gdn.row_lanes_for(16, True) == 32


def test_the_sm90_entry_splits_rows_at_bv16_for_large_fp32_state_writes():
    # Measured on an H200 (docs/bench/kernel-design.md): 27B TP=2, 8 sequences, fp32 state, MTP 2-4
    # (36, 48, 60 MiB) faster with rows of 16 lanes and a 152-register cap; MTP 1 (24 MiB) about even.
    slab = 128 * 128
    sm90 = LAUNCH_CONFIGS["sm90"]
    assert [sm90.row_split_on(8 * tokens * 24 * slab * 4, 4) for tokens in (2, 3, 4, 5)] == [False, True, True, True]
    assert not sm90.row_split_on(8 * 5 * 24 * slab * 2, 2)
    v = sm90.v_gdn
    assert (v.row_split_block, v.row_split_lanes, v.row_split_maxnreg) == (16, 16, 152)
    assert LAUNCH_CONFIGS["sm75"].row_split_min_state_write_bytes is None  # not measured on a 2080 Ti


def test_the_sm90_entry_reduces_its_split_rows_with_the_butterfly_there_only():
    # Measured on an H200 (docs/bench/kernel-design.md): 27B TP=2 B8 fp32 MTP 2-4 faster with the butterfly.
    v = LAUNCH_CONFIGS["sm90"].v_gdn
    assert v.row_split_butterfly
    assert v.row_butterfly_for(16, True) and v.at_block(16, True).row_butterfly_for(16, True)
    assert not v.row_butterfly_for(16, False) and not v.row_butterfly_for(8, True)  # no split, no butterfly
    assert not LAUNCH_CONFIGS["sm75"].v_gdn.row_split_butterfly


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        (_split(row_split_maxnreg=None), r"row split: expected v_gdn\.row_split_block, .* all set or all null"),
        (dict(_entry((9, 0)), row_split_min_state_write_bytes=0), r"row split: expected .* all set or all null"),
        (_split(row_split_block=12), r"v_gdn\.row_split_block: expected a power of two, got 12"),
        (_split(row_split_block=True), r"v_gdn\.row_split_block: expected a power of two, got True"),
        (_split(row_split_lanes=32), r"v_gdn\.row_split_lanes: expected 2, 4, 8 or 16 lanes per row .*got 32"),
        (_split(row_split_lanes=16.0), r"v_gdn\.row_split_lanes: expected 2, 4, 8 or 16 lanes per row .*got 16\.0"),
        (_split(row_split_block=1), r"v_gdn\.row_split_block: 1 rows of 16 lanes do not fill a warp \(need >= 2\)"),
        (_split(row_split_maxnreg=300), r"v_gdn\.row_split_maxnreg: expected registers per thread from 16 to 255"),
        (_split(num_warps=2), r"v_gdn\.row_split_\*: the split tile is laid out for one warp, not num_warps=2"),
        (dict(_split(), row_split_min_state_write_bytes=-1), r"row_split_min_state_write_bytes: expected a byte count"),
        (_split(row_split_butterfly=1), r"v_gdn\.row_split_butterfly: expected true or false, got 1"),
        (
            _split(row_split_butterfly=True, row_split_lanes=8),
            r"v_gdn\.row_split_butterfly: its PTX is written for rows of 16 lanes, 8 per thread .*row_split_lanes 8",
        ),
        (
            dict(_entry((9, 0)), v_gdn=dict(_entry((9, 0))["v_gdn"], row_split_butterfly=True)),
            r"v_gdn\.row_split_butterfly: needs the row split",
        ),
    ],
)
def test_a_bad_row_split_is_one_clear_error(tmp_path, entry, message):
    from caovan.kernels.gdn_spec_decode.launch_configs import _load

    with pytest.raises(ValueError, match=r"launch_configs\.json: entry 'sm90': " + message):
        _load(_write(tmp_path, {"sm90": entry}))


def test_the_split_block_is_a_runtime_configuration_of_its_own():
    from caovan.kernels.gdn_spec_decode.aot import runtime_launch_configs

    split = [c for c in runtime_launch_configs() if c.v_gdn.splits_rows(c.v_gdn.BV, True)]
    assert [c.arch for c in split] == ["sm90"]
    v = split[0].v_gdn
    assert (v.options_for(16, True), v.row_lanes_for(16, True)) == ((152, False), 16)
