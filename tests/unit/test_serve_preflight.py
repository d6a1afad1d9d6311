"""``caovan serve``'s checks before it hands over to vLLM (issue 32): the CAOVAN_* environment judged as the
plugin's start-up judges it (defect 3), and a CUDA GPU to run on (defect 4)."""

from __future__ import annotations

import functools
import os
import sys
from pathlib import Path

import pytest

from caovan import cli
from caovan.bench.model_folders import write_tiny_qwen3_next
from caovan.cli import serve as serve_cli
from caovan.plugin import guards
from caovan.serving.serve_command import COLD_START_TIMEOUTS


@pytest.fixture(scope="module")
def candidate(tmp_path_factory) -> Path:
    return write_tiny_qwen3_next(tmp_path_factory.mktemp("models") / "next")


@pytest.fixture
def serve(monkeypatch, capsys):
    """``caovan serve ARGS`` without starting vLLM: (exit status, stdout, stderr, the argv it would exec or None)."""
    monkeypatch.setattr(serve_cli, "_vllm_env_names", lambda: set(COLD_START_TIMEOUTS))
    for name in [n for n in os.environ if n.upper().startswith("CAOVAN_")]:
        monkeypatch.delenv(name)
    execed = []

    def fake_execve(path, argv, env):
        execed.append(argv)
        return 0

    monkeypatch.setattr(serve_cli.os, "execve", fake_execve)

    def run(*argv: str) -> tuple[int, str, str, list[str] | None]:
        status = cli.main(["serve", *argv])
        out, err = capsys.readouterr()
        return status, out, err, execed[-1] if execed else None

    return run


def test_a_require_value_start_up_refuses_is_refused_before_vllm(serve, candidate, monkeypatch):
    monkeypatch.setenv("CAOVAN_REQUIRE_TURBO3", "maybe")
    status, out, err, execed = serve(str(candidate), "--caovan-dry-run")
    assert status == 2 and out == "" and execed is None
    assert err == (
        "caovan serve: error: environment variable CAOVAN_REQUIRE_TURBO3='maybe' is not understood: use 1 (require) "
        "or 0 (do not)\n"
    )


def test_a_setting_start_up_warns_about_is_said_before_vllm_starts(serve, candidate, monkeypatch):
    monkeypatch.setenv("CAOVAN_GDN_LEGACY_DISABLE", "1")
    status, out, err, _ = serve(str(candidate), "--caovan-dry-run")
    assert status == 0 and out.startswith("CAOVAN_SERVE_AUTOSPEC=3 ")
    # vLLM's and torch's import-time warnings (logged once per process) may come first, depending on which test
    # imported them before; caovan's warning is the first line of its own.
    ours = [line for line in err.splitlines() if line.startswith("[Caovan]")]
    assert ours[0] == (
        "[Caovan] serve: warning: environment variables caovan ignores: CAOVAN_GDN_LEGACY_DISABLE (it has no effect, "
        "caovan has no legacy bridge)"
    )


def test_help_is_given_whatever_the_environment(serve, monkeypatch):
    monkeypatch.setenv("CAOVAN_REQUIRE_TURBO3", "maybe")  # help starts no server: nothing to refuse
    status, out, _, _ = serve("--caovan-dry-run", "--help=all")
    assert status == 0 and out == "vllm serve --help=all\n"


# --- no CUDA GPU: one line before vLLM's traceback (defect 4) ----------------------------------------------------


class _NVMLError(Exception):
    pass


class _FakeNVML:
    """pynvml as a host shows it: ``gpus`` GPUs, or no driver (``init_error``)."""

    def __init__(self, gpus: int = 0, init_error: str | None = None):
        self.gpus, self.init_error, self.open = gpus, init_error, False

    def nvmlInit(self):
        if self.init_error:
            raise _NVMLError(self.init_error)
        self.open = True

    def nvmlShutdown(self):
        self.open = False

    def nvmlDeviceGetCount(self):
        return self.gpus

    def nvmlDeviceGetHandleByIndex(self, index):
        return index

    def nvmlDeviceGetUUID(self, handle):
        return f"GPU-{handle}0000000-0000-0000-0000-000000000000"


NO_DRIVER = "NVML Shared Library Not Found"


def _missing(monkeypatch, nvml, environ=None, vllm_version="0.21.0", exists=lambda path: False):
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    return guards.cuda_gpu_missing(environ or {}, vllm_version=vllm_version, exists=exists)


@pytest.mark.parametrize(
    ("nvml", "environ", "reason"),
    [
        (
            _FakeNVML(init_error=NO_DRIVER),
            {},
            f"no CUDA GPU here (NVML, which vLLM asks for GPUs, cannot start: {NO_DRIVER})",
        ),
        (_FakeNVML(gpus=0), {}, "no CUDA GPU here (the NVIDIA driver lists none)"),
        (
            _FakeNVML(gpus=2),
            {"CUDA_VISIBLE_DEVICES": ""},
            "no CUDA GPU visible (CUDA_VISIBLE_DEVICES='' hides all 2 of this host's)",
        ),
        (
            _FakeNVML(gpus=2),
            {"CUDA_VISIBLE_DEVICES": "-1"},
            "no CUDA GPU visible (CUDA_VISIBLE_DEVICES='-1' hides all 2",
        ),
        (_FakeNVML(gpus=1), {"CUDA_VISIBLE_DEVICES": "3"}, "no CUDA GPU visible (CUDA_VISIBLE_DEVICES='3' hides all 1"),
    ],
)
def test_no_cuda_gpu_is_named(monkeypatch, nvml, environ, reason):
    assert _missing(monkeypatch, nvml, environ).startswith(reason)
    assert not nvml.open  # NVML is shut down again


@pytest.mark.parametrize("environ", [{}, {"CUDA_VISIBLE_DEVICES": "1"}, {"CUDA_VISIBLE_DEVICES": "GPU-1"}])
def test_a_visible_gpu_is_no_problem(monkeypatch, environ):
    assert _missing(monkeypatch, _FakeNVML(gpus=2), environ) is None


def test_hosts_where_vllm_runs_without_nvml_are_left_to_vllm(monkeypatch):
    no_driver = _FakeNVML(init_error=NO_DRIVER)
    assert _missing(monkeypatch, no_driver, vllm_version="0.21.0+cpu") is None  # vLLM's CPU build
    for marker in ("/etc/nv_tegra_release", "/dev/kfd"):  # a Jetson; an AMD GPU (ROCm)
        assert _missing(monkeypatch, no_driver, exists=lambda path, marker=marker: path == marker) is None
    monkeypatch.setitem(sys.modules, "pynvml", None)  # no pynvml to ask: import fails
    assert guards.cuda_gpu_missing({}, vllm_version="0.21.0", exists=lambda path: False) is None


@pytest.fixture
def host(monkeypatch):
    """The host serve sees: set ``host(FakeNVML)``; nothing of this machine's own GPUs or files counts."""
    check = guards.cuda_gpu_missing

    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)

    def set_host(nvml):
        monkeypatch.setitem(sys.modules, "pynvml", nvml)
        monkeypatch.setattr(
            guards,
            "cuda_gpu_missing",
            functools.partial(check, vllm_version="0.21.0", exists=lambda path: False),
        )

    return set_host


def test_serve_without_a_cuda_gpu_is_one_line_not_vllms_traceback(serve, host, candidate):
    host(_FakeNVML(init_error=NO_DRIVER))
    status, out, err, execed = serve(str(candidate), "--port", "8001")
    assert status == 2 and out == "" and execed is None
    assert err == (
        f"caovan serve: error: no CUDA GPU here (NVML, which vLLM asks for GPUs, cannot start: {NO_DRIVER}); vllm "
        "serve needs one (--caovan-dry-run prints the command without a GPU)\n"
    )


def test_serve_with_every_gpu_hidden_is_one_line(serve, host, candidate, monkeypatch):
    host(_FakeNVML(gpus=2))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    status, _, err, execed = serve(str(candidate))
    assert status == 2 and execed is None and len(err.splitlines()) == 1
    assert err.startswith("caovan serve: error: no CUDA GPU visible (CUDA_VISIBLE_DEVICES='' hides all 2 ")


def test_without_a_gpu_dry_run_and_help_still_work(serve, host, candidate, capsys):
    host(_FakeNVML(init_error=NO_DRIVER))
    status, out, _, execed = serve(str(candidate), "--caovan-dry-run")
    assert status == 0 and f"vllm serve {candidate} " in out and execed is None
    status, _, _, execed = serve(str(candidate), "--help")  # vLLM's own help needs no GPU: run as written
    assert status == 0 and execed[-2:] == [str(candidate), "--help"]
    with pytest.raises(SystemExit) as stop:  # caovan serve's own
        cli.main(["serve", "--help"])
    assert stop.value.code == 0 and "MODEL [VLLM_ARGS ...]" in capsys.readouterr().out


def test_serve_with_a_gpu_runs_vllm(serve, host, candidate):
    host(_FakeNVML(gpus=1))
    status, _, _, execed = serve(str(candidate))
    assert status == 0 and execed[1:5] == ["-m", "vllm.entrypoints.cli.main", "serve", str(candidate)]


# --- a setting the installed vLLM refuses on this GPU: one line before vLLM starts ---------------------------------

KV_REFUSAL = "No valid attention backend found for cuda. Reasons: {TRITON_ATTN: [kv_cache_dtype not supported]}."


def _decisions(capability, **kwargs) -> dict:
    """What the probe of the installed vLLM gives (stand-in): fp8 KV refused on the device, bfloat16 taken."""
    return {
        "capability": list(capability),
        "attention_backends": [{"name": "TRITON_ATTN", "valid": True, "reason": None}],
        "attention": {"candidates": ["TRITON_ATTN"], "auto": {"backend": "TRITON_ATTN"}},
        "kv_cache_dtypes": [
            {"dtype": "auto", "accepted_by": ["TRITON_ATTN"], "refused_by": [], "auto": {"backend": "TRITON_ATTN"}},
            {"dtype": "fp8", "accepted_by": [], "refused_by": [], "auto": {"backend": None, "refusal": KV_REFUSAL}},
        ],
        "model_dtypes": [{"dtype": "bfloat16", "ok": True, "message": None}],
        "unanswered": [],
    }


@pytest.fixture
def turing_gpu(monkeypatch):
    """A 2080 Ti is the visible GPU, and the installed vLLM's decisions for it are :func:`_decisions`."""
    from caovan.serving import device_refusals

    asked = []

    def probe(capability, **kwargs):
        asked.append((capability, kwargs))
        return _decisions(capability, **kwargs)

    monkeypatch.setattr(device_refusals, "visible_gpu", lambda: ((7, 5), "NVIDIA GeForce RTX 2080 Ti"))
    monkeypatch.setattr(device_refusals.vllm_decisions, "probe_vllm_decisions", probe)
    monkeypatch.setattr(guards, "cuda_gpu_missing", lambda environ=None: None)
    return asked


@pytest.mark.parametrize("dry_run", [True, False])
def test_a_setting_vllm_refuses_on_this_gpu_stops_serve_in_one_line(serve, candidate, turing_gpu, dry_run):
    argv = [str(candidate), "--kv-cache-dtype", "fp8", *(["--caovan-dry-run"] if dry_run else [])]
    status, out, err, execed = serve(*argv)
    assert status == 2 and out == "" and execed is None
    assert err == (
        f"caovan serve: error: --kv-cache-dtype fp8: vLLM refuses it on this GPU (sm_75): {KV_REFUSAL[:-1]}; use "
        "--kv-cache-dtype auto instead (auto: the model dtype, fp16 with --dtype half)\n"
    )
    ((capability, kwargs),) = turing_gpu
    assert capability == (7, 5) and kwargs["kv_cache_dtypes"] == ["fp8"] and kwargs["real_device"] is True


def test_settings_vllm_takes_on_this_gpu_pass_as_written(serve, candidate, turing_gpu):
    status, out, _, _ = serve(str(candidate), "--caovan-dry-run", "--dtype", "bfloat16", "--kv-cache-dtype", "auto")
    assert status == 0 and " --dtype bfloat16 --kv-cache-dtype auto " in out  # never rewritten
    assert len(turing_gpu) == 1


def test_serve_asks_nothing_of_vllm_when_no_setting_is_judged_per_gpu(serve, candidate, turing_gpu):
    status, _, _, _ = serve(str(candidate), "--caovan-dry-run", "--port", "8001")
    assert status == 0 and turing_gpu == []
