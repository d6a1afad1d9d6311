"""tools/run-gpu-e2e-offline.sh: bad arguments are one clear error before anything is created or installed, and the
records come back packed whatever the run's status."""

from __future__ import annotations

import os
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest
from offline_bundle_helpers import make_wheel, shim_python

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "tools" / "run-gpu-e2e-offline.sh"

pytestmark = pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")

#: A python3 for the script: pip answers, an install copies this checkout's caovan into the site, `bench
#: model-folder` makes the folder, and `bench e2e` writes a record, a server log and a profiler trace into --out,
#: then exits with $E2E_STATUS (after $E2E_SLEEP seconds). Every call is logged to $CALLS.
PYTHON = r"""
echo "$*" >> "$CALLS"
case "$1 $2 $3 $4" in
"-m pip --version "*) exit 0 ;;
"-m pip install "*) cp -r src/caovan "$CAOVAN_SITE/"; exit 0 ;;
"-m caovan bench model-folder") mkdir -p "$6"; echo '{}' > "$6/config.json"; exit 0 ;;
"-m caovan bench e2e")
    shift 4
    while [ "$1" != --out ]; do shift; done
    out=$2
    mkdir -p "$out/piecewise/baseline-trace"
    echo '{}' > "$out/piecewise/baseline-c1.json"
    echo log > "$out/piecewise/baseline-server.log"
    echo trace > "$out/piecewise/baseline-trace/w.pt.trace.json.gz"
    sleep "${E2E_SLEEP:-0}"
    exit "${E2E_STATUS:-0}" ;;
esac
exit 3
"""


@pytest.fixture
def host(tmp_path, monkeypatch):
    """A bundle, a shim python3, and where the site and the calls go."""
    make_wheel(tmp_path / "bundle" / "dist", '__version__ = "0.1.0"\n')
    for name, value in shim_python(tmp_path, PYTHON).items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("CAOVAN_SITE", str(tmp_path / "site"))
    monkeypatch.setenv("CALLS", str(tmp_path / "calls"))
    return tmp_path


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(SCRIPT), *args], cwd=REPO, env=dict(os.environ), capture_output=True, text=True, timeout=120,
        check=False,
    )  # fmt: skip


def packed(pack: Path) -> list[str]:
    with tarfile.open(pack) as archive:
        return sorted(name.removeprefix("./") for name in archive.getnames() if name not in (".", "./"))


@pytest.mark.parametrize("count", [0, 2])
def test_too_few_arguments_print_the_usage_and_exit_2(tmp_path, count):
    done = run(*["a", "b"][:count])
    assert done.returncode == 2 and done.stderr.startswith("usage: tools/run-gpu-e2e-offline.sh BUNDLE RECORDS PACK")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["{bundle}", "{records}", "{pack}"], "expected -- MODEL [caovan bench e2e options]"),
        (["{bundle}", "{records}", "{pack}", "--"], "expected -- MODEL"),
        (["{bundle}", "{records}", "{pack}", "--profile", "--", "{model}"], "unknown option '--profile' before --"),
        (["{bundle}", "{records}", "{pack}", "--time-limit", "9s", "--", "{model}"], "--time-limit needs a whole"),
        (
            ["{bundle}", "{records}", "{pack}", "--model-folder", "--", "{model}"],
            "--model-folder needs an architecture",
        ),
        (["{bundle}", "{records}", "{tmp}/perf.zip", "--", "{model}"], "PACK '{tmp}/perf.zip' must name a .tgz file"),
        (["{bundle}", "{records}", "{tmp}/no/perf.tgz", "--", "{model}"], "PACK's folder '{tmp}/no' does not exist"),
        (["{bundle}", "{pack_folder}", "{pack}", "--", "{model}"], "RECORDS '{pack_folder}' is not a folder"),
        (["{bundle}", "{records}", "{pack}", "--", "{model}", "--out", "x"], "give the records folder as RECORDS"),
        (["{bundle}", "{records}", "{pack}", "--", "{tmp}/none"], "MODEL '{tmp}/none' does not exist (--model-folder"),
        (["{tmp}/missing", "{records}", "{pack}", "--", "{model}"], "bundle folder '{tmp}/missing' does not exist"),
    ],
    ids=[
        "no-dashes",
        "no-model",
        "e2e-option-early",
        "time-limit",
        "model-folder",
        "pack-ext",
        "pack-folder",
        "records-file",
        "out",
        "no-model-folder",
        "no-bundle",
    ],  # fmt: skip
)
def test_bad_arguments_are_one_error_and_nothing_is_created(host, args, message):
    (host / "model").mkdir()
    (host / "a-file").write_text("")
    names = {
        "bundle": host / "bundle", "records": host / "perf", "pack": host / "perf.tgz", "model": host / "model",
        "tmp": host, "pack_folder": host / "a-file",
    }  # fmt: skip
    done = run(*(arg.format(**names) for arg in args))
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith("run-gpu-e2e-offline: error: " + message.format(**names))
    assert len(done.stderr.strip().splitlines()) == 1
    assert not any((host / name).exists() for name in ("site", "perf", "perf.tgz", "calls"))


def test_a_failed_run_still_comes_back_packed_without_the_traces(host, monkeypatch):
    monkeypatch.setenv("E2E_STATUS", "1")
    done = run(str(host / "bundle"), str(host / "perf"), str(host / "perf.tgz"), "--model-folder", "qwen3.6-27b",
               "--", str(host / "m"), "--only", "baseline", "--profile")  # fmt: skip
    assert done.returncode == 1, done.stderr
    assert packed(host / "perf.tgz") == ["piecewise", "piecewise/baseline-c1.json", "piecewise/baseline-server.log"]
    calls = (host / "calls").read_text().splitlines()
    assert f"-m caovan bench model-folder qwen3.6-27b {host}/m" in calls
    assert f"-m caovan bench e2e {host}/m --out {host}/perf --only baseline --profile" in calls
    assert (host / "site" / "caovan" / "__init__.py").is_file()  # the bundle's plugin, checked against src/


def test_an_existing_model_folder_is_used_as_it_is(host):
    (host / "m").mkdir()
    done = run(str(host / "bundle"), str(host / "perf"), str(host / "perf.tgz"), "--model-folder", "qwen3.6-27b",
               "--", str(host / "m"))  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert not any("model-folder" in call for call in (host / "calls").read_text().splitlines())


def test_the_time_limit_stops_the_run_and_the_records_still_come_back(host, monkeypatch):
    monkeypatch.setenv("E2E_SLEEP", "30")
    (host / "m").mkdir()
    done = run(str(host / "bundle"), str(host / "perf"), str(host / "perf.tgz"), "--time-limit", "2", "--",
               str(host / "m"))  # fmt: skip
    assert done.returncode == 124, done.stderr  # timeout's status for a command it stopped
    assert "piecewise/baseline-c1.json" in packed(host / "perf.tgz")
    assert not (host / "perf.tgz.partial").exists()
