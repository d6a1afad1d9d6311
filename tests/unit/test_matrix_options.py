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
    assert detect_runner_name(fake_nvidia_smi(two)) == "nvidia-geforce-rtx-2080-ti"
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
