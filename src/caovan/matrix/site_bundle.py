"""``python -m caovan.matrix.site_bundle WHEELS OUT --python-version X.Y``: a row's packages, installed, in parts.

For a GPU host with no network whose Python is not this machine's (a lent cloud GPU), where the row's
torch and Triton are already installed: the wheels of ``nox -s "wheelhouse(<row>)" -- --without-host-provided
--python-version X.Y`` are installed here with ``uv pip install --target`` for that Python and platform, files the
host cannot use are dropped (``--drop``, e.g. vLLM's FlashAttention 2 library where only FA3 runs), and the
folder is packed as one ``site.tgz`` cut into parts of at most ``--part-mib`` MiB, one folder per part
(``OUT/part-0/site.tgz.0`` ...): a host that takes a limited upload per call gets one part folder per call.
``part-0/`` also holds ``site.tgz.sha256`` (the whole archive's digest, in ``sha256sum`` format) and
``site-bundle.json`` (what went in). ``tools/run-gpu-row-offline.sh`` joins the parts, checks the digest and
unpacks them as its ``CAOVAN_SITE``.

The plugin's own wheel is left out (the run script installs it from ``BUNDLE/dist/``, built from the checkout
it runs), and so are console scripts (their shebangs name this machine's interpreter). OUT must not exist: the
parts are written beside it and renamed into place once complete, so a failed run leaves nothing half-made.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Sequence
from pathlib import Path, PurePosixPath

from . import MatrixError
from .envinfo import PLUGIN_DISTRIBUTION
from .options import DEFAULT_HOST_PLATFORM, check_host_target, uv_python_platform

SCHEMA = "caovan-site-bundle/1"
ARCHIVE = "site.tgz"
#: Folders pip writes into a --target install that are of no use on another host.
NOT_CARRIED = ("bin",)


def _plugin_wheel(path: Path) -> bool:
    return path.name.startswith(PLUGIN_DISTRIBUTION.replace("-", "_") + "-")


def _check_drop(entry: str) -> PurePosixPath:
    path = PurePosixPath(entry)
    if not entry or path.is_absolute() or ".." in path.parts:
        raise MatrixError(
            f"site bundle: --drop {entry!r}: expected a path inside the installed folder (e.g. pkg/lib.so)"
        )
    return path


def _install(wheels: list[Path], site: Path, python_version: str, platform: str) -> None:
    """``uv pip install --target`` for another interpreter: these wheels only, no resolution against an index.

    uv rather than pip: it installs for a ``--python-version``/``--python-platform`` it does not run, and the
    project's venvs (nox with uv) have no pip.
    """
    uv = shutil.which("uv")
    if uv is None:
        raise MatrixError("site bundle: needs uv on PATH (pip install uv), which installs for the host's Python")
    command = [
        uv, "pip", "install", "--quiet", "--no-index", "--no-deps", "--target", str(site),
        "--python-version", python_version, "--python-platform", uv_python_platform(platform),
        *map(str, wheels),
    ]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        lines = [line.strip() for line in (done.stderr or done.stdout).splitlines() if line.strip()]
        # uv states the reason on its `cause:` line (the `error:` line above it is the generic outcome).
        why = next((line for line in lines if line.startswith("cause:")), None) or next(
            (line for line in lines if line.startswith("error:")),
            lines[-1] if lines else f"exit status {done.returncode}",
        )
        raise MatrixError(f"site bundle: installing the wheels for Python {python_version} ({platform}) failed: {why}")


def _pack(site: Path, archive: Path) -> None:
    """Gzipped tar of the folder's contents (paths relative to it)."""
    with tarfile.open(archive, "w:gz", compresslevel=6) as tar:
        for child in sorted(site.iterdir()):
            tar.add(child, arcname=child.name)


def _split(archive: Path, out: Path, part_bytes: int) -> tuple[int, str]:
    """Cut the archive into ``out/part-<i>/site.tgz.<i>``; returns the number of parts and the archive's sha256
    (hashed on the way, so the archive is read once)."""
    count, digest = 0, hashlib.sha256()
    with archive.open("rb") as handle:
        while chunk := handle.read(part_bytes):
            digest.update(chunk)
            folder = out / f"part-{count}"
            folder.mkdir(parents=True)
            (folder / f"{ARCHIVE}.{count}").write_bytes(chunk)
            count += 1
    return count, digest.hexdigest()


def build(
    wheels_dir: Path,
    out: Path,
    *,
    python_version: str,
    platform: str = DEFAULT_HOST_PLATFORM,
    drop: Sequence[str] = (),
    part_mib: int = 50,
) -> dict:
    """Install, drop, pack and split; returns the manifest written to ``out/part-0/site-bundle.json``."""
    check_host_target(python_version, platform, what="site bundle")
    if not 1 <= part_mib <= 4096:
        raise MatrixError(f"site bundle: --part-mib {part_mib}: expected 1 to 4096 (MiB per part)")
    drops = [_check_drop(entry) for entry in drop]
    if not wheels_dir.is_dir():
        raise MatrixError(f"site bundle: wheel folder {wheels_dir} does not exist (nox -s 'wheelhouse(ROW)' makes it)")
    wheels = sorted(p for p in wheels_dir.glob("*.whl") if not _plugin_wheel(p))
    if not wheels:
        raise MatrixError(f"site bundle: {wheels_dir} holds no wheel besides the plugin's")
    if out.exists():
        raise MatrixError(f"site bundle: {out} already exists; give a new folder (nothing is overwritten)")
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=f".{out.name}.", dir=out.parent) as work_text:
        work = Path(work_text)
        site = work / "site"
        _install(wheels, site, python_version, platform)
        for name in NOT_CARRIED:
            shutil.rmtree(site / name, ignore_errors=True)
        dropped = []
        for entry in drops:
            target = site.joinpath(*entry.parts)
            if not target.exists():
                raise MatrixError(f"site bundle: --drop {entry}: no such file or folder in the installed packages")
            size = (
                sum(f.stat().st_size for f in target.rglob("*") if f.is_file())
                if target.is_dir()
                else target.stat().st_size
            )
            shutil.rmtree(target) if target.is_dir() else target.unlink()
            dropped.append({"path": str(entry), "bytes": size})
        archive = work / ARCHIVE
        _pack(site, archive)
        staged = work / "out"
        parts, sha256 = _split(archive, staged, part_mib << 20)
        manifest = {
            "schema": SCHEMA,
            "python_version": python_version,
            "platform": platform,
            "wheels": [p.name for p in wheels],
            "dropped": dropped,
            "archive": ARCHIVE,
            "archive_bytes": archive.stat().st_size,
            "sha256": sha256,
            "parts": parts,
            "part_bytes_max": part_mib << 20,
        }
        (staged / "part-0" / f"{ARCHIVE}.sha256").write_text(f"{sha256}  {ARCHIVE}\n")
        (staged / "part-0" / "site-bundle.json").write_text(json.dumps(manifest, indent=2) + "\n")
        staged.rename(out)
    return manifest


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m caovan.matrix.site_bundle",
        description="Install a row's wheels for another host's Python and pack them in parts.",
    )
    parser.add_argument("wheels", type=Path, help="wheel folder (nox -s 'wheelhouse(ROW)' -- --python-version X.Y)")
    parser.add_argument("out", type=Path, help="new folder for part-0/, part-1/, ...")
    parser.add_argument("--python-version", required=True, help="the host's Python, e.g. 3.12")
    parser.add_argument("--platform", default=DEFAULT_HOST_PLATFORM, help=f"default {DEFAULT_HOST_PLATFORM}")
    parser.add_argument("--drop", action="append", default=[], help="path in the installed folder to leave out")
    parser.add_argument("--part-mib", type=int, default=50, help="size of each part in MiB (2**20 bytes; default 50)")
    args = parser.parse_args(argv)
    try:
        manifest = build(
            args.wheels,
            args.out,
            python_version=args.python_version,
            platform=args.platform,
            drop=args.drop,
            part_mib=args.part_mib,
        )
    except MatrixError as exc:
        print(f"site bundle: error: {str(exc).removeprefix('site bundle: ')}", file=sys.stderr)
        return 2
    print(
        f"site bundle: {len(manifest['wheels'])} wheels for Python {manifest['python_version']}, "
        f"{manifest['archive_bytes'] / 2**20:.1f} MiB in {manifest['parts']} parts under {args.out}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
