from dataclasses import replace

from caovan.bench.tune import QK_WARPS, V_BV, V_WARPS, candidate_configs, combined_config, geomean
from caovan.kernels.gdn_spec_decode.launch_configs import LAUNCH_CONFIGS, QKLaunchConfig, VGdnLaunchConfig


def _aspects_changed(cfg, base):
    return [a for a in ("qk", "v_gdn", "pdl") if getattr(cfg, a) != getattr(base, a)]


def test_candidates_vary_one_aspect_at_a_time_and_start_with_the_base():
    base = LAUNCH_CONFIGS["sm90"]
    configs = candidate_configs(base)
    assert configs[0] == base
    # The V/GDN grid is swept plain (no preferred-block options): the entry's own point, which has them (register
    # cap and constant slab offsets at its BV), is a candidate of its own, timed without them.
    assert base.v_gdn.options_for(base.v_gdn.BV) != (None, False)
    expected = 1 + (len(QK_WARPS) - 1) + len(V_BV) * len(V_WARPS) + 1  # + the PDL toggle on sm90
    assert len(configs) == len(set(configs)) == expected
    for cfg in configs[1:]:
        assert len(_aspects_changed(cfg, base)) == 1, cfg
        assert not cfg.tuned
    assert sum(cfg.pdl != base.pdl for cfg in configs) == 1


def test_no_pdl_candidate_before_sm90():
    base = LAUNCH_CONFIGS["sm75"]
    assert not any(cfg.pdl for cfg in candidate_configs(base))


def _row(us):
    return {"valid": us is not None, "geomean_graph_us": us}


def test_combined_config_takes_each_aspects_winner():
    base = replace(LAUNCH_CONFIGS["sm90"], qk=QKLaunchConfig(2, 1), v_gdn=VGdnLaunchConfig(1, 1, 8), pdl=False)
    qk4 = replace(base, qk=QKLaunchConfig(4, 1))
    bv16 = replace(base, v_gdn=VGdnLaunchConfig(1, 1, 16))
    bv32 = replace(base, v_gdn=VGdnLaunchConfig(2, 1, 32))
    pdl = replace(base, pdl=True)
    configs = [base, qk4, bv16, bv32, pdl]
    combined = combined_config(base, [_row(10.0), _row(9.0), _row(11.0), _row(12.0), _row(8.0)], configs)
    assert (combined.qk, combined.v_gdn, combined.pdl) == (qk4.qk, base.v_gdn, True)  # V variants lost
    # A winner that is invalid does not count; a combination already measured is not measured again.
    assert combined_config(base, [_row(10.0), _row(None), _row(11.0), _row(12.0), _row(8.0)], configs) is None
    assert combined_config(base, [_row(None), _row(9.0), _row(8.0), _row(7.0), _row(6.0)], configs) is None


def test_geomean():
    assert abs(geomean([2.0, 8.0]) - 4.0) < 1e-12


def test_labels_name_the_options_of_the_entrys_own_block():
    from caovan.bench.tune import _label

    base = LAUNCH_CONFIGS["sm90"]
    assert _label(base) == "qk(w4) v(BV8,w1,BV8:const-offsets+r88,BV16:rows16+r152) pdl"
    unsplit = replace(base, v_gdn=replace(base.v_gdn, row_split_block=None, row_split_lanes=None))
    assert _label(unsplit) == "qk(w4) v(BV8,w1,BV8:const-offsets+r88) pdl"
    plain = replace(base, v_gdn=VGdnLaunchConfig(1, 1, 8), pdl=False)
    assert _label(plain) == "qk(w4) v(BV8,w1)"
    assert _label(replace(plain, v_gdn=VGdnLaunchConfig(2, 1, 32, maxnreg=168))) == "qk(w4) v(BV32,w2,r168)"
