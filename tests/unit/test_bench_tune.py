from caovan.bench.tune import QK_WARPS, V_BV, V_WARPS, candidate_configs, geomean
from caovan.kernels.gdn_spec_decode.launch_configs import LAUNCH_CONFIGS


def test_candidates_vary_one_kernel_at_a_time_and_start_with_the_base():
    base = LAUNCH_CONFIGS["sm90"]
    configs = candidate_configs(base)
    assert configs[0] == base
    assert len(configs) == len(set(configs)) == 1 + (len(QK_WARPS) - 1) + (len(V_BV) * len(V_WARPS) - 1)
    for cfg in configs[1:]:
        assert (cfg.qk == base.qk) != (cfg.v_gdn == base.v_gdn), "exactly one kernel differs from the base"
        assert not cfg.tuned


def test_geomean():
    assert abs(geomean([2.0, 8.0]) - 4.0) < 1e-12
