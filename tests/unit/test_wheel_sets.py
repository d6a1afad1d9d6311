"""Which pinned requirements go into a wheel set: names as pip normalises them, --exclude patterns."""

from __future__ import annotations

import pytest

from caovan.matrix import MatrixError
from caovan.matrix.wheel_sets import matches_any, requirement_name, split_excluded

PINS = ["flashinfer-python==0.6.8", "flashinfer_cubin==0.6.8", "Z3.Solver==4.15", "vllm==0.21.0", "numba==0.65.0"]


@pytest.mark.parametrize(
    ("line", "name"),
    [
        ("Foo_Bar[extra]==1.0 ; python_version >= '3.10'", "foo-bar"),
        ("z3.solver==4.15", "z3-solver"),
        ("pkg @ https://example.org/pkg.whl", "pkg"),
    ],
)
def test_requirement_names_are_normalised(line, name):
    assert requirement_name(line) == name


def test_patterns_match_normalised_names():
    assert matches_any("z3-solver", ["Z3_Solver"])
    assert matches_any("flashinfer-cubin", ["flashinfer*"])
    assert not matches_any("vllm", ["vllm-*"])


def test_excluded_pins_are_split_off_in_order():
    kept, left_out = split_excluded(PINS, ["flashinfer*", "z3-solver"])
    assert kept == ["vllm==0.21.0", "numba==0.65.0"]
    assert left_out == ["flashinfer-python==0.6.8", "flashinfer_cubin==0.6.8", "Z3.Solver==4.15"]
    assert split_excluded(PINS, []) == (PINS, [])


def test_a_pattern_matching_nothing_is_an_error_naming_it():
    with pytest.raises(MatrixError, match=r"--exclude 'flashnifer\*', 'tilelang' matches no package .*\(5 pins\)"):
        split_excluded(PINS, ["flashnifer*", "numba", "tilelang"])
