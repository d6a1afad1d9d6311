"""Options of a matrix run (``nox -s "matrix(<row>)" -- [options]``) and the runner name.

Each option also has an environment variable, for CI jobs that cannot easily pass posargs through:
``CAOVAN_RUNNER``, ``CAOVAN_TIERS`` (comma-separated), ``CAOVAN_REDO=1``, ``CAOVAN_STRICT=1`` (fail
the session when a tier that ran failed or errored, after writing the result), ``CAOVAN_WHEELHOUSE``
(folder with ``<row>/`` wheel sets made by ``nox -s wheelhouse``). A posarg wins over its variable.
"""

from __future__ import annotations

import argparse
import re
import subprocess
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from . import TIERS, MatrixError
from .results import RUNNER_NAME_PATTERN

TRUE_WORDS = frozenset({"1", "true", "yes", "on"})


def slugify(text: str) -> str:
    """``NVIDIA GeForce RTX 2080 Ti`` -> ``nvidia-geforce-rtx-2080-ti``."""
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")[:64]


def nvidia_smi_gpu_names(run: Callable[..., subprocess.CompletedProcess[str]] = subprocess.run) -> list[str]:
    """GPU names from nvidia-smi; none when it is missing (OSError), hangs or fails."""
    try:
        done = run(
            ["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return []
    if done.returncode != 0:
        return []
    return [line.strip() for line in done.stdout.splitlines() if line.strip()]


def detect_runner_name(
    run: Callable[..., subprocess.CompletedProcess[str]] = subprocess.run,
) -> str:
    """Slug of the first GPU's name as nvidia-smi reports it (e.g. ``nvidia-h200``), ``-xN`` after it on a host
    with N GPUs (``nvidia-h200-x2``: its serve tier also runs tensor parallel 2, so its results are a line of
    their own beside the one-GPU host's), or ``cpu``."""
    names = nvidia_smi_gpu_names(run)
    if not names:
        return "cpu"
    slug = slugify(names[0])
    if not slug:
        return "cpu"
    return f"{slug}-x{len(names)}" if len(names) > 1 else slug


@dataclass(frozen=True)
class MatrixOptions:
    runner: str
    #: None: every tier of the row.
    tiers: tuple[str, ...] | None
    redo: bool
    wheelhouse: Path | None
    strict: bool = False


def parse_tiers(text: str, *, source: str) -> tuple[str, ...]:
    tiers = tuple(t.strip() for t in text.split(",") if t.strip())
    unknown = [t for t in tiers if t not in TIERS]
    if unknown or not tiers:
        raise MatrixError(
            f"{source}: unknown tier(s) {', '.join(unknown) or '(none given)'} (known: {', '.join(TIERS)})"
        )
    return tiers


def add_matrix_options(parser: argparse.ArgumentParser, *, wheelhouse: bool = True) -> None:
    """The matrix run options, for the nox session's posargs and ``python -m caovan.matrix run-here`` (which
    installs nothing, so it has no ``--wheelhouse``: ``wheelhouse=False``)."""
    parser.add_argument(
        "--runner", metavar="NAME", help="runner name (default: CAOVAN_RUNNER, else the GPU's name or cpu)"
    )
    parser.add_argument(
        "--tiers", metavar="A,B", help="comma-separated tiers to run (default: CAOVAN_TIERS, else the row's)"
    )
    parser.add_argument(
        "--redo",
        action="store_true",
        help="rerun the selected tiers even if their stored result is current (the others keep theirs)",
    )
    parser.add_argument("--strict", action="store_true", help="exit non-zero when a tier failed or errored")
    if wheelhouse:
        parser.add_argument("--wheelhouse", metavar="DIR", help="install offline from DIR/<row>/")


def parse_matrix_options(
    posargs: Sequence[str],
    environ: Mapping[str, str],
    *,
    detect_runner: Callable[[], str] = detect_runner_name,
) -> MatrixOptions:
    parser = argparse.ArgumentParser(prog='nox -s "matrix(<row>)" --', add_help=False, exit_on_error=False)
    add_matrix_options(parser)
    known = f"--runner NAME, --tiers {','.join(TIERS)}, --redo, --strict, --wheelhouse DIR"
    args = _parse_posargs(parser, posargs, what="matrix posargs", known=known)
    return matrix_options(args, environ, detect_runner=detect_runner)


def _parse_posargs(parser: argparse.ArgumentParser, posargs: Sequence[str], *, what: str, known: str):
    """A nox session's posargs; every problem is one MatrixError, never argparse's usage text and exit.

    (argparse's parse_args still exits on unknown arguments even with exit_on_error=False, hence
    parse_known_args.)
    """
    try:
        args, unknown = parser.parse_known_args(list(posargs))
    except argparse.ArgumentError as exc:
        raise MatrixError(f"{what}: {exc}") from None
    if unknown:
        raise MatrixError(f"{what}: unrecognized arguments: {' '.join(unknown)} (known: {known})")
    return args


def matrix_options(
    args: argparse.Namespace,
    environ: Mapping[str, str],
    *,
    detect_runner: Callable[[], str] = detect_runner_name,
) -> MatrixOptions:
    """The options from parsed :func:`add_matrix_options` arguments, with the environment variables."""
    if args.runner is not None:
        runner, source = args.runner, "--runner"
    elif environ.get("CAOVAN_RUNNER"):
        runner, source = environ["CAOVAN_RUNNER"], "CAOVAN_RUNNER"
    else:
        runner, source = detect_runner(), "nvidia-smi"
    if not RUNNER_NAME_PATTERN.match(runner):
        raise MatrixError(f"{source}: runner name {runner!r} must be a slug (lowercase letters, digits, '.', '_', '-')")

    if args.tiers is not None:
        tiers: tuple[str, ...] | None = parse_tiers(args.tiers, source="--tiers")
    elif environ.get("CAOVAN_TIERS"):
        tiers = parse_tiers(environ["CAOVAN_TIERS"], source="CAOVAN_TIERS")
    else:
        tiers = None

    redo = args.redo or environ.get("CAOVAN_REDO", "").strip().lower() in TRUE_WORDS
    strict = args.strict or environ.get("CAOVAN_STRICT", "").strip().lower() in TRUE_WORDS
    if not hasattr(args, "wheelhouse"):  # run-here installs nothing: CAOVAN_WHEELHOUSE is not its business
        wheelhouse_text = None
    elif args.wheelhouse is not None:
        wheelhouse_text = args.wheelhouse
    else:
        wheelhouse_text = environ.get("CAOVAN_WHEELHOUSE") or None
    wheelhouse = Path(wheelhouse_text) if wheelhouse_text else None
    if wheelhouse is not None and not wheelhouse.is_dir():
        raise MatrixError(f"wheelhouse {wheelhouse}: folder does not exist (make it with `nox -s wheelhouse`)")
    return MatrixOptions(runner=runner, tiers=tiers, redo=redo, wheelhouse=wheelhouse, strict=strict)


#: A glibc-based Linux wheel platform tag, as pip's ``--platform`` takes it (older glibc tags are implied).
MANYLINUX_TAG_PATTERN = re.compile(r"manylinux_(\d+)_(\d+)_(x86_64|aarch64)")
#: The platform of ``--python-version`` wheel sets when no ``--platform`` is given: glibc 2.28+ on x86_64.
DEFAULT_HOST_PLATFORM = "manylinux_2_28_x86_64"
#: PEP 600 aliases of the older manylinux tags, by glibc minor version (x86_64 and i686 for 2010 and 1).
_LEGACY_MANYLINUX = {17: "manylinux2014", 12: "manylinux2010", 5: "manylinux1"}


def check_host_target(python_version: str | None, platform: str | None, *, what: str) -> None:
    """MatrixError (``what: --option ...``) for a host Python that is not ``3.N`` or a platform that is not a
    manylinux tag; None passes (the caller decides whether the option is needed)."""
    if python_version is not None and not re.fullmatch(r"3\.\d{1,2}", python_version):
        raise MatrixError(f"{what}: --python-version {python_version!r}: expected 3.N (e.g. 3.12)")
    if platform is not None and not MANYLINUX_TAG_PATTERN.fullmatch(platform):
        raise MatrixError(f"{what}: --platform {platform!r}: expected a manylinux tag such as {DEFAULT_HOST_PLATFORM}")


def uv_python_platform(platform: str) -> str:
    """A manylinux tag the way uv's ``--python-platform`` spells it (``x86_64-manylinux_2_28``)."""
    major, minor, arch = MANYLINUX_TAG_PATTERN.fullmatch(platform).groups()
    return f"{arch}-manylinux_{major}_{minor}"


def pip_platform_tags(platform: str) -> list[str]:
    """Every platform tag a host of this manylinux tag runs, newest first, one ``pip --platform`` each.

    pip takes ``--platform manylinux_2_28_x86_64`` literally (it widens only the legacy ``manylinux2014`` and
    ``manylinux2010`` tags), so a wheel tagged ``manylinux_2_17`` alone would not be found for it.
    """
    major, minor, arch = MANYLINUX_TAG_PATTERN.fullmatch(platform).groups()
    oldest = 17 if arch == "aarch64" else 5  # the first manylinux of each architecture
    tags = []
    for glibc_minor in range(int(minor), oldest - 1, -1):
        tags.append(f"manylinux_{major}_{glibc_minor}_{arch}")
        legacy = _LEGACY_MANYLINUX.get(glibc_minor) if major == "2" else None
        if legacy and (glibc_minor == 17 or arch == "x86_64"):
            tags.append(f"{legacy}_{arch}")
    return tags


@dataclass(frozen=True)
class WheelhouseOptions:
    out: Path
    without_host_provided: bool
    #: The GPU host's Python (``3.12``) when it is not the row's: wheels are then resolved and downloaded for
    #: that Python and :attr:`platform`, binary wheels only (nothing can be built for another interpreter).
    python_version: str | None = None
    platform: str | None = None
    #: Package name patterns (fnmatch, e.g. ``flashinfer*``) left out of the set: what the host cannot use.
    exclude: tuple[str, ...] = ()

    @property
    def uv_python_platform(self) -> str | None:
        """:attr:`platform` the way ``uv pip compile --python-platform`` spells it (``x86_64-manylinux_2_28``)."""
        return None if self.platform is None else uv_python_platform(self.platform)


def parse_wheelhouse_options(posargs: Sequence[str], *, row_id: str, default_out: Path) -> WheelhouseOptions:
    """Posargs of ``nox -s "wheelhouse(<row>)"``: ``--out DIR``, ``--without-host-provided``,
    ``--python-version X.Y``, ``--platform TAG``, ``--exclude PATTERN`` (repeatable)."""
    parser = argparse.ArgumentParser(prog=f"nox -s 'wheelhouse({row_id})' --", add_help=False, exit_on_error=False)
    parser.add_argument("--out", type=Path, default=default_out)
    parser.add_argument("--without-host-provided", action="store_true")
    parser.add_argument("--python-version")
    parser.add_argument("--platform")
    parser.add_argument("--exclude", action="append", default=[])
    known = "--out DIR, --without-host-provided, --python-version X.Y, --platform TAG, --exclude PATTERN"
    args = _parse_posargs(parser, posargs, what="wheelhouse posargs", known=known)
    python_version, platform = args.python_version, args.platform
    if platform is not None and python_version is None:
        raise MatrixError("wheelhouse posargs: --platform needs --python-version (the host's Python, e.g. 3.12)")
    check_host_target(python_version, platform, what="wheelhouse posargs")
    if python_version is not None and platform is None:
        platform = DEFAULT_HOST_PLATFORM
    for pattern in args.exclude:
        if not re.fullmatch(r"[A-Za-z0-9._*?\[\]-]+", pattern):
            raise MatrixError(
                f"wheelhouse posargs: --exclude {pattern!r}: expected a package name pattern (e.g. flashinfer*)"
            )
    return WheelhouseOptions(
        out=args.out,
        without_host_provided=args.without_host_provided,
        python_version=python_version,
        platform=platform,
        exclude=tuple(args.exclude),
    )
