"""``python -m caovan.matrix.site_bundle``: a wheel set installed for another Python, packed in parts."""

from __future__ import annotations

import hashlib
import io
import json
import os
import tarfile
import zipfile
from pathlib import Path

import pytest

from caovan.matrix import MatrixError
from caovan.matrix.site_bundle import build, main


def make_wheel(folder: Path, name: str, files: dict[str, bytes], tag: str = "py3-none-any") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    wheel = folder / f"{name}-1.0-{tag}.whl"
    info = f"{name}-1.0.dist-info"
    with zipfile.ZipFile(wheel, "w") as archive:
        for path, data in files.items():
            archive.writestr(path, data)
        archive.writestr(f"{info}/METADATA", f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
        archive.writestr(f"{info}/WHEEL", f"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: {tag}\n")
        archive.writestr(f"{info}/entry_points.txt", f"[console_scripts]\n{name}-cli = {name}:main\n")
        archive.writestr(f"{info}/RECORD", "")
    return wheel


@pytest.fixture
def wheels(tmp_path: Path) -> Path:
    folder = tmp_path / "wheels"
    make_wheel(folder, "alpha", {"alpha/__init__.py": b"def main(): pass\n", "alpha/big.bin": os.urandom(3 << 19)})
    make_wheel(folder, "beta", {"beta/__init__.py": b"", "beta/unused.so": b"\0" * 100})
    make_wheel(folder, "caovan_vllm_sm75_turbo3", {"caovan/__init__.py": b""})  # the run script installs dist/'s
    return folder


def _joined(out: Path, parts: int) -> bytes:
    return b"".join((out / f"part-{i}" / f"site.tgz.{i}").read_bytes() for i in range(parts))


def test_parts_join_to_the_installed_packages_less_what_was_dropped(tmp_path, wheels):
    out = tmp_path / "bundle"
    manifest = build(wheels, out, python_version="3.12", drop=["beta/unused.so"], part_mib=1)
    # 1.5 MiB of random bytes do not compress: two 1 MiB parts
    assert manifest["parts"] == 2 == len(list(out.iterdir()))
    archive = _joined(out, 2)
    assert hashlib.sha256(archive).hexdigest() == manifest["sha256"]
    assert (out / "part-0" / "site.tgz.sha256").read_text() == f"{manifest['sha256']}  site.tgz\n"
    assert json.loads((out / "part-0" / "site-bundle.json").read_text()) == manifest
    assert manifest["wheels"] == ["alpha-1.0-py3-none-any.whl", "beta-1.0-py3-none-any.whl"]
    assert manifest["dropped"] == [{"path": "beta/unused.so", "bytes": 100}]
    with tarfile.open(fileobj=io.BytesIO(archive), mode="r:gz") as tar:
        names = set(tar.getnames())
    assert {"alpha/__init__.py", "alpha/big.bin", "beta/__init__.py"} <= names
    assert "beta/unused.so" not in names
    assert not any(n.startswith(("bin", "caovan")) for n in names)  # console scripts, the plugin
    assert {p.name for p in tmp_path.iterdir()} == {"wheels", "bundle"}  # no work folder left beside it


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"python_version": "3"}, "--python-version '3': expected 3.N"),
        ({"python_version": "3.12", "platform": "win_amd64"}, "--platform 'win_amd64': expected a manylinux tag"),
        ({"python_version": "3.12", "part_mib": 0}, "--part-mib 0: expected 1 to 4096"),
        ({"python_version": "3.12", "drop": ["../x"]}, "--drop '../x': expected a path inside the installed folder"),
        ({"python_version": "3.12", "drop": ["beta/missing.so"]}, "--drop beta/missing.so: no such file or folder"),
    ],
)
def test_bad_input_is_one_error_and_leaves_nothing(tmp_path, wheels, kwargs, message):
    with pytest.raises(MatrixError, match=message.replace(".", r"\.").replace("(", r"\(")):
        build(wheels, tmp_path / "bundle", **kwargs)
    assert {p.name for p in tmp_path.iterdir()} == {"wheels"}


def test_a_wheel_for_another_python_is_pips_reason(tmp_path, wheels):
    make_wheel(wheels, "gamma", {"gamma/__init__.py": b""}, tag="cp311-cp311-manylinux_2_28_x86_64")
    with pytest.raises(MatrixError) as caught:
        build(wheels, tmp_path / "bundle", python_version="3.12")
    assert "installing the wheels for Python 3.12 (manylinux_2_28_x86_64) failed: cause: " in str(caught.value)
    assert "gamma==1.0 has no wheels with a matching Python version tag" in str(caught.value)
    assert {p.name for p in tmp_path.iterdir()} == {"wheels"}


def test_an_existing_out_folder_is_not_overwritten(tmp_path, wheels):
    (tmp_path / "bundle").mkdir()
    with pytest.raises(MatrixError, match="already exists; give a new folder"):
        build(wheels, tmp_path / "bundle", python_version="3.12")


def test_cli_prints_one_line_either_way(tmp_path, wheels, capsys):
    assert main([str(wheels), str(tmp_path / "b"), "--python-version", "3.12"]) == 0
    assert capsys.readouterr().out.startswith("site bundle: 2 wheels for Python 3.12, ")
    assert main([str(tmp_path / "none"), str(tmp_path / "c"), "--python-version", "3.12"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("site bundle: error: wheel folder ") and len(err.strip().splitlines()) == 1
