"""tools/run-gpu-row-offline.sh: bad arguments are one clear error, found before anything is created or installed."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from offline_bundle_helpers import make_wheel, python_with_pip, shim_python

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "tools" / "run-gpu-row-offline.sh"
ROW = "vllm-0.21.0"

pytestmark = pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")


def run(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "CAOVAN_SITE": str(tmp_path / "site")}
    return subprocess.run(
        ["bash", str(SCRIPT), *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=120, check=False
    )


@pytest.fixture
def bundle(tmp_path: Path) -> Path:
    make_wheel(tmp_path / "bundle" / "dist", '__version__ = "0.1.0"\n')
    return tmp_path / "bundle"


@pytest.mark.parametrize("count", [0, 1, 3])
def test_too_few_arguments_print_the_usage_and_exit_2(tmp_path, count):
    done = run(tmp_path, *["a", "b", "c"][:count])
    assert done.returncode == 2
    assert done.stderr.startswith("usage: tools/run-gpu-row-offline.sh BUNDLE ROW RUNNER OUT")
    assert "unbound variable" not in done.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["{missing}", ROW, "cpu", "{out}"], "bundle folder '{missing}' does not exist"),
        (["{empty}", ROW, "cpu", "{out}"], "'{empty}/dist/' must hold one plugin wheel"),
        (["{foreign}", ROW, "cpu", "{out}"], "'{foreign}/dist/foo-1.0-py3-none-any.whl' is not caovan's wheel"),
        (["{bundle}", "vllm-9.9.9", "cpu", "{out}"], "row 'vllm-9.9.9' is not in matrix/*.yaml"),
        (["{bundle}", "vllm-0.21", "cpu", "{out}"], "row 'vllm-0.21' is not in matrix/*.yaml"),
        (["{bundle}", ROW, "My Box", "{out}"], "runner name 'My Box' must be a slug"),
        (["{bundle}", ROW, "cpu", "{out}", "--tiers", "kernal"], "--tiers: unknown tier 'kernal'"),
        (["{bundle}", ROW, "cpu", "{out}", "--tiers=discovery,gpu"], "--tiers: unknown tier 'gpu'"),
        (["{bundle}", ROW, "cpu", "{out}", "--tiers"], "--tiers needs a value"),
        (["{bundle}", ROW, "cpu", "{out}", "--runner", "x"], "unknown option '--runner'"),
    ],
    ids=[
        "no-bundle",
        "no-plugin-wheel",
        "foreign-wheel",
        "unknown-row",
        "row-prefix",
        "runner",
        "tier",
        "tier-eq",
        "tiers-empty",
        "opt",
    ],
)
def test_bad_arguments_are_one_error_and_nothing_is_created(tmp_path, bundle, args, message):
    (tmp_path / "empty").mkdir()
    (tmp_path / "foreign" / "dist").mkdir(parents=True)
    (tmp_path / "foreign" / "dist" / "foo-1.0-py3-none-any.whl").write_bytes(b"")
    names = {
        "missing": tmp_path / "missing",
        "empty": tmp_path / "empty",
        "foreign": tmp_path / "foreign",
        "bundle": bundle,
        "out": tmp_path / "out",
    }
    done = run(tmp_path, *(arg.format(**names) for arg in args))
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith("run-gpu-row-offline: error: " + message.format(**names))
    assert len(done.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "site").exists() and not (tmp_path / "out").exists()


def test_a_plugin_wheel_of_other_source_is_refused_after_install(tmp_path, bundle, monkeypatch):
    python = python_with_pip()
    if python is None:
        pytest.skip("no python3 with pip on this machine: the script installs the bundle with `python3 -m pip`")
    shim = tmp_path / "bin"
    shim.mkdir()
    (shim / "python3").symlink_to(python)
    monkeypatch.setenv("PATH", f"{shim}{os.pathsep}{os.environ['PATH']}")
    done = run(tmp_path, str(bundle), ROW, "cpu", str(tmp_path / "out"))
    assert done.returncode == 2
    assert "was built from other source than this checkout's src/caovan; rebuild it with uv build" in done.stderr
    assert "matrix run-here" not in done.stdout + done.stderr and not (tmp_path / "out" / f"{ROW}.json").exists()


def test_a_python_without_pip_is_one_error_before_anything_is_created(tmp_path, bundle, monkeypatch):
    # uv's venvs have no pip: say so instead of failing halfway with "No module named pip".
    for name, value in shim_python(tmp_path, 'if [ "$1 $2" = "-m pip" ]; then exit 1; fi\nexit 0').items():
        monkeypatch.setenv(name, value)
    done = run(tmp_path, str(bundle), ROW, "cpu", str(tmp_path / "out"))
    assert done.returncode == 2
    assert done.stderr.startswith("run-gpu-row-offline: error: python3 (") and "has no pip" in done.stderr
    assert not (tmp_path / "site").exists() and not (tmp_path / "out").exists()


def test_the_result_comes_back_when_run_here_fails(tmp_path, bundle, monkeypatch):
    # --strict makes run-here exit 1 on a failed tier; on a lent host only OUT comes back, so the result must be in it.
    runner = "pytest-offline-strict"
    body = f"""
case "$1 $2 $3" in
"-m pip --version") exit 0 ;;
"-m pip install") mkdir -p "$CAOVAN_SITE" && cp -r src/caovan "$CAOVAN_SITE/"; exit 0 ;;
"-m caovan.matrix run-here")
    mkdir -p matrix/results/{runner} && echo '{{"tier": "fail"}}' > matrix/results/{runner}/{ROW}.json; exit 1 ;;
esac
exit 3"""
    for name, value in shim_python(tmp_path, body).items():
        monkeypatch.setenv(name, value)
    try:
        done = run(tmp_path, str(bundle), ROW, runner, str(tmp_path / "out"), "--tiers", "discovery", "--strict")
        assert done.returncode == 1, done.stderr
        assert (tmp_path / "out" / f"{ROW}.json").read_text() == '{"tier": "fail"}\n'
    finally:
        shutil.rmtree(REPO / "matrix" / "results" / runner, ignore_errors=True)


def test_a_plugin_wheel_in_the_wheelhouse_does_not_stand_in_for_dist(tmp_path, bundle, monkeypatch):
    # `nox -s wheelhouse` copies a plugin wheel into the wheelhouse: installing both would make pip refuse.
    python = python_with_pip()
    if python is None:
        pytest.skip("no python3 with pip on this machine: the script installs the bundle with `python3 -m pip`")
    make_wheel(bundle / "wheels", '__version__ = "0.1.0"  # the wheelhouse copy\n')
    shim = tmp_path / "bin"
    shim.mkdir()
    (shim / "python3").symlink_to(python)
    monkeypatch.setenv("PATH", f"{shim}{os.pathsep}{os.environ['PATH']}")
    done = run(tmp_path, str(bundle), ROW, "cpu", str(tmp_path / "out"))
    # pip installed dist/'s wheel alone and the source check judged it (a stand-in wheel: other source)
    assert done.returncode == 2, done.stderr
    assert "was built from other source than this checkout's src/caovan" in done.stderr
    assert (tmp_path / "site" / "caovan" / "__init__.py").read_text() == '__version__ = "0.1.0"\n'


def _site_parts(bundle: Path, files: dict[str, str], parts: int = 2) -> str:
    """Write ``files`` as site.tgz.0 .. site.tgz.<parts-1> plus site.tgz.sha256 into ``bundle``; returns the digest."""
    import hashlib
    import io
    import tarfile

    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for name, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    archive = buffer.getvalue()
    step = -(-len(archive) // parts)
    for i in range(parts):
        (bundle / f"site.tgz.{i}").write_bytes(archive[i * step : (i + 1) * step])
    digest = hashlib.sha256(archive).hexdigest()
    (bundle / "site.tgz.sha256").write_text(f"{digest}  site.tgz\n")
    return digest


@pytest.mark.parametrize(
    ("spoil", "message"),
    [
        ("sha", "do not make the archive site.tgz.sha256 names"),
        ("gap", "has 2 site.tgz parts but not site.tgz.1"),
        ("no-sha", "has site.tgz parts but no site.tgz.sha256"),
        ("bad-sha", "does not hold a sha256 digest"),
        ("python-files", "vLLM's Python files alone cannot run the tiers"),
    ],
)
def test_bad_site_parts_are_one_error_and_nothing_is_created(tmp_path, bundle, spoil, message):
    _site_parts(bundle, {"pkg/__init__.py": "x = 1\n"}, parts=3)
    if spoil == "sha":
        (bundle / "site.tgz.sha256").write_text("0" * 64 + "  site.tgz\n")
    elif spoil == "gap":
        (bundle / "site.tgz.1").unlink()
    elif spoil == "no-sha":
        (bundle / "site.tgz.sha256").unlink()
    elif spoil == "bad-sha":
        (bundle / "site.tgz.sha256").write_text("not a digest\n")
    else:
        (bundle / "vllm-py.tgz").write_bytes(b"")
    done = run(tmp_path, str(bundle), ROW, "cpu", str(tmp_path / "out"))
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith("run-gpu-row-offline: error: ") and message in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "site").exists() and not (tmp_path / "out").exists()


def test_site_parts_are_joined_and_replace_the_site_folder(tmp_path, bundle, monkeypatch):
    runner = "pytest-offline-site"
    _site_parts(bundle, {"pkg/__init__.py": "x = 1\n", "pkg/data.txt": "y" * 5000}, parts=3)
    (tmp_path / "site" / "stale").mkdir(parents=True)  # what an earlier bundle left
    body = f"""
case "$1 $2 $3" in
"-m pip --version") exit 0 ;;
"-m pip install") cp -r src/caovan "$CAOVAN_SITE/"; exit 0 ;;
"-m caovan.matrix run-here") mkdir -p matrix/results/{runner} && echo '{{}}' > matrix/results/{runner}/{ROW}.json ;;
esac
exit 0"""
    for name, value in shim_python(tmp_path, body).items():
        monkeypatch.setenv(name, value)
    try:
        done = run(tmp_path, str(bundle), ROW, runner, str(tmp_path / "out"), "--tiers", "discovery")
        assert done.returncode == 0, done.stderr
    finally:
        shutil.rmtree(REPO / "matrix" / "results" / runner, ignore_errors=True)
    site = tmp_path / "site"
    assert (site / "pkg" / "__init__.py").read_text() == "x = 1\n"
    assert (site / "pkg" / "data.txt").read_text() == "y" * 5000
    assert (site / "caovan" / "__init__.py").is_file() and not (site / "stale").exists()
    assert not (tmp_path / "site.unpacking").exists()
    # A second call with the same parts keeps the site it made (one tier per call on a lent host); other parts
    # replace it.
    (site / "kept").write_text("")
    try:
        assert run(tmp_path, str(bundle), ROW, runner, str(tmp_path / "out"), "--tiers", "serve").returncode == 0
        assert (site / "kept").exists()
        _site_parts(bundle, {"pkg/__init__.py": "x = 2\n"}, parts=3)
        assert run(tmp_path, str(bundle), ROW, runner, str(tmp_path / "out"), "--tiers", "serve").returncode == 0
    finally:
        shutil.rmtree(REPO / "matrix" / "results" / runner, ignore_errors=True)
    assert not (site / "kept").exists() and (site / "pkg" / "__init__.py").read_text() == "x = 2\n"


def _header_command(prefix: str) -> str:
    """The command in the script's header comment that starts with ``prefix``, continuation lines joined."""
    lines = [line.removeprefix("#").strip() for line in SCRIPT.read_text().splitlines() if line.startswith("#")]
    start = next(i for i, line in enumerate(lines) if line.startswith(prefix))
    command = []
    for line in lines[start:]:
        command.append(line.removesuffix("\\").strip())
        if not line.endswith("\\"):
            return " ".join(command)
    raise AssertionError(f"unterminated command in the header: {prefix}")


def test_the_headers_site_bundle_recipe_runs_as_written_from_the_repository_root(tmp_path):
    command = _header_command("PYTHONPATH=src python3 -m caovan.matrix.site_bundle")
    assert "--part-mib 50" in command, "the part size names its unit"
    # The recipe as a stranger types it, on an empty wheel set: caovan is found, the arguments parse, and the
    # tool's own error about the wheels is what stops it.
    (tmp_path / "wheels").mkdir()
    command = command.replace("wheelhouse/vllm-0.21.0-py3.12", str(tmp_path / "wheels"))
    command = command.replace(".bundle/site", str(tmp_path / "out"))
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    done = subprocess.run(
        ["bash", "-c", command], cwd=REPO, env=env, capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith("site bundle: error: "), done.stderr
