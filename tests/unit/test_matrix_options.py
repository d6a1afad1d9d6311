"""Matrix run options (posargs over environment variables) and the runner name from nvidia-smi."""

from __future__ import annotations

import subprocess

import pytest

from caovan.matrix import MatrixError
from caovan.matrix.options import (
    WheelhouseOptions,
    detect_runner_name,
    parse_matrix_options,
    parse_wheelhouse_options,
    pip_platform_tags,
    slugify,
)


def no_gpu() -> str:
    return "cpu"


def fake_nvidia_smi(stdout: str, returncode: int = 0):
    def run(command, **kwargs):
        assert command[0] == "nvidia-smi"
        return subprocess.CompletedProcess(command, returncode, stdout=stdout, stderr="")

    return run


def missing_nvidia_smi(command, **kwargs):
    raise FileNotFoundError(2, "No such file or directory", command[0])


def test_slugify_gpu_names():
    assert slugify("NVIDIA H200") == "nvidia-h200"
    assert slugify("NVIDIA GeForce RTX 2080 Ti") == "nvidia-geforce-rtx-2080-ti"


def test_runner_name_comes_from_the_first_gpu_or_is_cpu():
    two = "NVIDIA GeForce RTX 2080 Ti\nNVIDIA GeForce RTX 2080 Ti\n"
    assert detect_runner_name(fake_nvidia_smi(two)) == "nvidia-geforce-rtx-2080-ti-x2"  # a TP=2 host: its own line
    assert detect_runner_name(fake_nvidia_smi("NVIDIA H200\n")) == "nvidia-h200"
    assert detect_runner_name(fake_nvidia_smi("", returncode=9)) == "cpu"
    assert detect_runner_name(missing_nvidia_smi) == "cpu"


def test_defaults_every_tier_no_redo_detected_runner():
    options = parse_matrix_options([], {}, detect_runner=no_gpu)
    assert (options.runner, options.tiers, options.redo, options.strict) == (
        "cpu",
        None,
        False,
        False,
    )
    assert options.wheelhouse is None


def test_environment_variables_are_read():
    environ = {
        "CAOVAN_RUNNER": "sm75-box",
        "CAOVAN_TIERS": "discovery, kernel",
        "CAOVAN_REDO": "1",
        "CAOVAN_STRICT": "true",
    }
    options = parse_matrix_options([], environ, detect_runner=no_gpu)
    assert options.runner == "sm75-box"
    assert options.tiers == ("discovery", "kernel")
    assert options.redo and options.strict


def test_posargs_win_over_environment_variables(tmp_path):
    environ = {"CAOVAN_RUNNER": "from-env", "CAOVAN_TIERS": "serve"}
    options = parse_matrix_options(
        [
            "--runner",
            "from-posarg",
            "--tiers",
            "discovery",
            "--redo",
            "--wheelhouse",
            str(tmp_path),
        ],
        environ,
        detect_runner=no_gpu,
    )
    assert options.runner == "from-posarg" and options.tiers == ("discovery",) and options.redo
    assert options.wheelhouse == tmp_path


@pytest.mark.parametrize(
    ("posargs", "environ", "message"),
    [
        (["--tiers", "discovery,kernal"], {}, "--tiers: unknown tier(s) kernal"),
        ([], {"CAOVAN_TIERS": "gpu"}, "CAOVAN_TIERS: unknown tier(s) gpu"),
        (["--runner", "My Box"], {}, "--runner: runner name 'My Box' must be a slug"),
        ([], {"CAOVAN_RUNNER": "cpu\n"}, "CAOVAN_RUNNER: runner name 'cpu\\n' must be a slug"),
        (["--frobnicate"], {}, "unrecognized arguments: --frobnicate"),
        (["--wheelhouse", "/no/such/folder"], {}, "folder does not exist"),
    ],
)
def test_bad_options_are_one_clear_error(posargs, environ, message):
    with pytest.raises(MatrixError) as caught:
        parse_matrix_options(posargs, environ, detect_runner=no_gpu)
    assert message in str(caught.value)


def test_wheelhouse_posargs_name_the_unknown_argument(tmp_path):
    options = parse_wheelhouse_options(["--without-host-provided"], row_id="vllm-0.21.0", default_out=tmp_path)
    assert options == WheelhouseOptions(out=tmp_path, without_host_provided=True)
    with pytest.raises(MatrixError) as caught:
        parse_wheelhouse_options(["--bogus"], row_id="vllm-0.21.0", default_out=tmp_path)
    assert str(caught.value).startswith("wheelhouse posargs: unrecognized arguments: --bogus (known: --out DIR,")
    with pytest.raises(MatrixError, match="wheelhouse posargs: argument --out: expected one argument"):
        parse_wheelhouse_options(["--out"], row_id="vllm-0.21.0", default_out=tmp_path)


def test_wheelhouse_for_another_python_defaults_its_platform(tmp_path):
    options = parse_wheelhouse_options(
        ["--python-version", "3.12", "--exclude", "flashinfer*", "--exclude", "z3-solver"],
        row_id="vllm-0.21.0",
        default_out=tmp_path,
    )
    assert (options.python_version, options.platform) == ("3.12", "manylinux_2_28_x86_64")
    assert options.exclude == ("flashinfer*", "z3-solver")
    assert options.uv_python_platform == "x86_64-manylinux_2_28"
    other = parse_wheelhouse_options(
        ["--python-version", "3.13", "--platform", "manylinux_2_34_aarch64"], row_id="r", default_out=tmp_path
    )
    assert other.uv_python_platform == "aarch64-manylinux_2_34"
    plain = parse_wheelhouse_options([], row_id="r", default_out=tmp_path)
    assert (plain.python_version, plain.platform, plain.uv_python_platform, plain.exclude) == (None, None, None, ())


@pytest.mark.parametrize(
    ("posargs", "message"),
    [
        (["--python-version", "312"], "--python-version '312': expected 3.N (e.g. 3.12)"),
        (["--platform", "manylinux_2_28_x86_64"], "--platform needs --python-version"),
        (["--python-version", "3.12", "--platform", "win_amd64"], "--platform 'win_amd64': expected a manylinux tag"),
        (["--exclude", "a b"], "--exclude 'a b': expected a package name pattern"),
    ],
)
def test_bad_wheelhouse_posargs_are_one_error(tmp_path, posargs, message):
    with pytest.raises(MatrixError) as caught:
        parse_wheelhouse_options(posargs, row_id="vllm-0.21.0", default_out=tmp_path)
    assert str(caught.value).startswith("wheelhouse posargs: ") and message in str(caught.value)


def test_pip_gets_every_older_manylinux_tag_of_the_host():
    tags = pip_platform_tags("manylinux_2_28_x86_64")
    assert tags[:2] == ["manylinux_2_28_x86_64", "manylinux_2_27_x86_64"]
    assert tags[-2:] == ["manylinux_2_5_x86_64", "manylinux1_x86_64"]
    assert {"manylinux_2_17_x86_64", "manylinux2014_x86_64", "manylinux2010_x86_64"} <= set(tags)
    assert len(tags) == 24 + 3
    arm = pip_platform_tags("manylinux_2_17_aarch64")
    assert arm == ["manylinux_2_17_aarch64", "manylinux2014_aarch64"]
