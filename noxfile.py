# /// script
# requires-python = ">=3.10"
# dependencies = ["nox>=2025.5.1", "pyyaml>=6", "tabulate>=0.9", "packaging>=23"]
# ///
"""caovan's development and compatibility-matrix sessions.

Runs with nothing installed: ``uv run noxfile.py -l`` (uv reads the script header above), or
``nox -l`` (nox reads the same header and builds its own environment when a dependency is missing).

    nox -l                               # all sessions; `nox -l --json -t matrix` for CI
    nox -s lint                          # ruff, workflow schema, matrix files, compat doc current
    nox -s tests                         # whole tests/ suite on vLLM 0.21.0 (GPU tests skip)
    nox -s "matrix(vllm-0.21.0)"         # one row -> matrix/results/<runner>/vllm-0.21.0.json
    nox -t matrix -- --tiers discovery   # every row, discovery tier only
    nox -s compat                        # docs/compat.md from matrix/results/
    nox -s performance                   # docs/performance.md + plot from docs/performance/*/e2e.json
    nox -s "wheelhouse(vllm-0.21.0)"     # the row's wheels, for an offline GPU host
    nox -s "fuzz(vllm-0.21.0)" -- --cases 10000 --seed 7   # fuzzed spec batches vs the row's vLLM (CPU)

Matrix options, as posargs after ``--`` or as environment variables (a posarg wins):

    --runner NAME   CAOVAN_RUNNER      default: first GPU's name from nvidia-smi as a slug
                                       (e.g. nvidia-h200), or cpu
    --tiers a,b     CAOVAN_TIERS       run only these tiers (the others keep their stored result
                                       or are recorded as not run)
    --redo          CAOVAN_REDO=1      rerun the selected tiers even where their stored results are current
    --strict        CAOVAN_STRICT=1    fail the session when a tier failed or errored (the result
                                       file is written first)
    --wheelhouse D  CAOVAN_WHEELHOUSE  install offline from D/<row>/ (made by `nox -s wheelhouse`)
                    CAOVAN_SYSTEM_SITE_PACKAGES=1   row venvs see the host's torch/triton (for
                                       wheelhouses made with --without-host-provided)
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

import nox

ROOT = Path(__file__).resolve().parent
# The matrix logic lives in the plugin package: caovan.matrix needs pyyaml, tabulate and packaging
# only (no vLLM, no torch), so the nox process imports it straight from the source tree.
sys.path.insert(0, str(ROOT / "src"))

from caovan.matrix import MatrixError  # noqa: E402
from caovan.matrix.compat import older_source_note, regenerate  # noqa: E402
from caovan.matrix.envinfo import PLUGIN_DISTRIBUTION  # noqa: E402
from caovan.matrix.fingerprint import plugin_version, source_fingerprint  # noqa: E402
from caovan.matrix.options import (  # noqa: E402
    TRUE_WORDS,
    parse_matrix_options,
    parse_wheelhouse_options,
    pip_platform_tags,
)
from caovan.matrix.results import Provenance  # noqa: E402
from caovan.matrix.row_run import Prepared, run_row  # noqa: E402
from caovan.matrix.schema import MatrixRow, load_matrix, matrix_files  # noqa: E402
from caovan.matrix.wheel_sets import matches_any, requirement_name, split_excluded  # noqa: E402

# 2025.5.1: the first nox whose CommandFailed has return_code, which the tests session reads for pytest exit 5.
nox.needs_version = ">=2025.5.1"
nox.options.default_venv_backend = "uv|virtualenv"
nox.options.error_on_missing_interpreters = True

MATRIX_DIR = ROOT / "matrix"
RESULTS_DIR = MATRIX_DIR / "results"
COMPAT_DOC = ROOT / "docs" / "compat.md"
#: What a 2080 Ti owner runs each release with: the sm75 tier's findings, regenerated beside the compat table.
SM75_DOC = ROOT / "docs" / "sm75.md"
#: `caovan bench e2e --out docs/performance` records, and the page made from them.
PERFORMANCE_RECORDS = ROOT / "docs" / "performance"
PERFORMANCE_DOC = ROOT / "docs" / "performance.md"
PERFORMANCE_PLOT = PERFORMANCE_RECORDS / "e2e-decode.png"
#: Wheels, partial row state, JUnit XML and pytest logs of matrix runs (``build/`` is git-ignored).
CACHE_DIR = Path(os.environ.get("CAOVAN_MATRIX_CACHE", ROOT / "build" / "matrix")).resolve()
#: The row whose pins the ``tests`` session uses: the release the README installs.
TESTS_ROW_ID = "vllm-0.21.0"
#: Wheelhouse folder with the plugin's build backend (the plugin wheel builds offline too) and pip
#: (which, unlike uv, counts a host's system site-packages as installed).
WHEELHOUSE_TOOLS_DIR = "_tools"
#: The lint session's tools, pinned: a new ruff release must not turn a green checkout red.
LINT_TOOLS = ("ruff==0.17.6", "check-jsonschema==0.39.0")
#: What draws docs/performance.md's plot; the tests session installs it too, so the plot's test runs in CI.
PLOT_REQUIREMENTS = ("matplotlib==3.10.7",)
#: Where ``nox -s "fuzz(<row>)"`` writes its record when not given ``--out`` (``build/`` is git-ignored).
FUZZ_DIR = ROOT / "build" / "fuzz"
#: What ``--without-host-provided`` leaves out of a wheelhouse: GPU hosts often have them.
HOST_PROVIDED = ("torch", "triton", "nvidia-*")


def _load_rows() -> dict[str, MatrixRow]:
    try:
        rows = load_matrix(matrix_files(MATRIX_DIR), base=ROOT)
    except MatrixError as exc:
        for message in exc.messages:
            print(f"noxfile: matrix error: {message}", file=sys.stderr)
        raise SystemExit(2) from None
    return {row.id: row for row in rows}


ROWS = _load_rows()
SYSTEM_SITE_PACKAGES = os.environ.get("CAOVAN_SYSTEM_SITE_PACKAGES", "").lower() in TRUE_WORDS


def _row_params(*, tagged: bool) -> list:
    # The row's Python picks the session interpreter (nox takes "python" out of the params).
    # Row-id tags go on the matrix sessions only: `nox -t vllm-0.21.0` runs that row, nothing else.
    return [nox.param(row.id, row.python, id=row.id, tags=[row.id] if tagged else []) for row in ROWS.values()]


def _run_env(session: nox.Session) -> dict[str, str]:
    """The environment session.run would use, for commands run via subprocess (exit code)."""
    env = {**os.environ, **{k: v for k, v in session.env.items() if v is not None}}
    for key, value in session.env.items():
        if value is None:
            env.pop(key, None)
    env["PATH"] = os.pathsep.join([session.bin, env.get("PATH", "")])
    return env


def plugin_wheel(session: nox.Session, wheelhouse: Path | None = None) -> Path:
    """The plugin wheel, built once per source fingerprint into the cache, reused by all rows."""
    fingerprint = source_fingerprint(ROOT)
    target = CACHE_DIR / "wheels" / fingerprint
    built = sorted(target.glob("*.whl"))
    if built:
        session.log(f"plugin wheel: reusing {built[0].relative_to(CACHE_DIR)} (source {fingerprint})")
        return built[0]
    staging = CACHE_DIR / "wheels" / f".staging-{fingerprint}-{os.getpid()}"
    shutil.rmtree(staging, ignore_errors=True)
    session.log(f"plugin wheel: building (source {fingerprint})")
    if shutil.which("uv"):
        offline = ["--no-index", "--find-links", str(wheelhouse / WHEELHOUSE_TOOLS_DIR)] if wheelhouse else []
        # run_install: the wheel is part of installing, so `nox --install-only` builds it too.
        session.run_install("uv", "build", "--wheel", "--out-dir", str(staging), *offline, str(ROOT), external=True)
    else:
        offline = ["--no-index", "--find-links", str(wheelhouse / WHEELHOUSE_TOOLS_DIR)] if wheelhouse else []
        session.install("pip", *offline)
        session.run_install("python", "-m", "pip", "wheel", "--no-deps", *offline, "-w", str(staging), str(ROOT))
    if not staging.exists():  # nox skips install commands under --no-install (-R): nothing was built
        session.error(
            f"plugin wheel: none cached for source {fingerprint}, and --no-install (-R) skips building it: "
            "run the session once without -R"
        )
    wheels = sorted(staging.glob("*.whl"))
    if len(wheels) != 1:
        session.error(f"plugin wheel: expected one wheel in {staging}, found {[w.name for w in wheels]}")
    try:
        os.replace(staging, target)
    except OSError:  # another run finished the same build first: use its wheel
        shutil.rmtree(staging, ignore_errors=True)
    return sorted(target.glob("*.whl"))[0]


def _plugin_requirement(wheel: Path) -> str:
    """The plugin wheel with its ``test`` extra (pytest, numpy<2.4) as one PEP 508 requirement."""
    return f"{PLUGIN_DISTRIBUTION}[test] @ {wheel.as_uri()}"


def _override_args(row: MatrixRow, work: Path) -> list[str]:
    """``--override FILE`` for a row with ``overrides`` (uv then replaces every requirement on those packages, the
    release's own pin included); nothing for a row without."""
    if not row.overrides:
        return []
    path = work / f"overrides-{row.id}.txt"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(f"{pin}\n" for pin in row.override_pins()))
    return ["--override", str(path)]


def install_row(session: nox.Session, row: MatrixRow, wheel: Path, wheelhouse: Path | None) -> None:
    """The row's pinned vLLM and torch, plus the plugin wheel with its test extra, into the venv."""
    overrides = _override_args(row, CACHE_DIR)
    if overrides:
        # pip has no --override: a pip install would meet the release's own pin and stop.
        if SYSTEM_SITE_PACKAGES or session.venv_backend != "uv":
            session.error(f"row {row.id} has overrides ({', '.join(row.override_pins())}): installing it needs uv")
        session.log(f"install: {', '.join(row.override_pins())} in place of the release's pins (row 'overrides')")
    if wheelhouse is not None:
        row_wheels = wheelhouse / row.id
        if not row_wheels.is_dir():
            session.error(f"wheelhouse {wheelhouse}: no {row.id}/ (nox -s 'wheelhouse({row.id})')")
        offline = ["--no-index", "--find-links", str(row_wheels)]
        requirements = [*row.install_pins(), _plugin_requirement(wheel), *overrides]
        if SYSTEM_SITE_PACKAGES:
            # The host's torch/triton/nvidia-* live in its system site-packages; uv ignores those
            # when resolving, pip counts them as installed.
            session.log(f"install: offline with pip from {row_wheels} (+ host site-packages)")
            tools = ["--no-index", "--find-links", str(wheelhouse / WHEELHOUSE_TOOLS_DIR)]
            session.install(*tools, "pip")
            session.run("python", "-m", "pip", "install", *offline, *requirements)
        else:
            session.log(f"install: offline from {row_wheels}")
            session.install(*offline, *requirements)
        return
    if row.torch_index:
        # torch first from its own index; the second install finds torch==X already satisfied.
        session.log(f"install: torch=={row.torch} from {row.torch_index}")
        session.install(f"torch=={row.torch}", "--index-url", row.torch_index)
    session.log(f"install: {' '.join(row.install_pins())} + plugin wheel [test]")
    session.install(*row.install_pins(), _plugin_requirement(wheel), *overrides)


def gather_envinfo(session: nox.Session, destination: Path) -> dict:
    """Environment facts measured inside the row venv (imports torch, and vLLM for the family)."""
    session.log("envinfo: python -m caovan.matrix.envinfo (probes the GDN adapter family; imports vLLM)")
    destination.unlink(missing_ok=True)
    session.run("python", "-m", "caovan.matrix.envinfo", "--output", str(destination))
    return json.loads(destination.read_text(encoding="utf-8"))


@nox.session(
    tags=["matrix"],
    default=False,
    venv_params=["--system-site-packages"] if SYSTEM_SITE_PACKAGES else [],
)
@nox.parametrize(("row_id", "python"), _row_params(tagged=True))
def matrix(session: nox.Session, row_id: str) -> None:
    """One matrix row: own venv with the row's pins, pytest per tier, matrix/results/ JSON."""
    row = ROWS[row_id]
    try:
        options = parse_matrix_options(session.posargs, os.environ)
    except MatrixError as exc:
        session.error(str(exc))
    provenance = Provenance(row.fingerprint(), plugin_version(ROOT), source_fingerprint(ROOT))
    session.log(
        f"row {row.id} ({row.origin}): vllm=={row.vllm} torch=={row.torch} "
        f"python {row.python} {row.cuda}; runner {options.runner}; "
        f"fingerprints: row {provenance.row_fingerprint}, plugin {provenance.plugin_version}, "
        f"source {provenance.source_fingerprint}"
    )
    if options.tiers is not None and not any(t in row.tiers for t in options.tiers):
        session.skip(f"row {row.id} has none of the selected tiers ({', '.join(options.tiers)})")

    def prepare() -> Prepared:
        wheel = plugin_wheel(session, options.wheelhouse)
        install_row(session, row, wheel, options.wheelhouse)
        env = gather_envinfo(session, CACHE_DIR / "envinfo" / options.runner / f"{row.id}.json")
        return Prepared(str(Path(session.bin) / "python"), env, {}, _run_env(session))

    try:
        outcome = run_row(
            row,
            provenance,
            runner=options.runner,
            selected_tiers=options.tiers,
            redo=options.redo,
            root=ROOT,
            results_dir=RESULTS_DIR,
            cache_dir=CACHE_DIR,
            prepare=prepare,
            log=session.log,
            install_note={"wheelhouse": str(options.wheelhouse) if options.wheelhouse else None},
        )
    except MatrixError as exc:  # its result file cannot be written
        session.error(str(exc))
    if options.strict and outcome.bad_tiers:
        session.error(
            f"--strict: tier(s) {', '.join(outcome.bad_tiers)} failed or errored "
            f"(see {outcome.result_file.relative_to(ROOT)})"
        )


@nox.session(
    python=ROWS[TESTS_ROW_ID].python if TESTS_ROW_ID in ROWS else "3.11",
    default=False,
    tags=["tests"],
)
def tests(session: nox.Session) -> None:
    """README test command: all of tests/ on vLLM 0.21.0 + its torch, plugin as a wheel."""
    if TESTS_ROW_ID not in ROWS:
        session.error(f"the tests session takes its pins from matrix row {TESTS_ROW_ID!r}: missing")
    row = ROWS[TESTS_ROW_ID]
    wheel = plugin_wheel(session)
    install_row(session, row, wheel, None)
    session.install(*PLOT_REQUIREMENTS)
    session.log("pytest tests (all markers; GPU tests skip with their reasons; exit 5 = no tests = failure)")
    try:
        session.run("python", "-m", "pytest", "tests", *session.posargs)
    except nox.command.CommandFailed as exc:
        if exc.return_code == 5:
            session.error("pytest collected no tests (exit 5): an empty suite is a failure")
        raise


@nox.session(
    tags=["fuzz"],
    default=False,
    venv_params=["--system-site-packages"] if SYSTEM_SITE_PACKAGES else [],
)
@nox.parametrize(("row_id", "python"), _row_params(tagged=False))
def fuzz(session: nox.Session, row_id: str) -> None:
    """Fuzzed spec-decode batches, laid out as the row's vLLM lays them out: caovan vs that vLLM vs float64 (CPU).

    Posargs go to tests/numerics/spec_fuzz_cases.py: ``--cases N`` (default 1000), ``--seed S`` (default: a random
    one, printed), ``--start I`` (first case index), ``--replay SEED:INDEX`` (that case alone, repeatable),
    ``--add-regressions`` (keep shrunk failures in tests/numerics/data/spec_fuzz_regressions.json), ``--out FILE``
    (default build/fuzz/<row>.json), ``--workers N`` (N processes, one record), ``--device cuda`` (compiled kernels
    at the real models' shapes on a GPU, instead of the interpreter). The session fails when a case fails; each
    failure prints its replay.
    """
    row = ROWS[row_id]
    install_row(session, row, plugin_wheel(session), None)
    env = {"TRITON_INTERPRET": "1", "CUDA_VISIBLE_DEVICES": "", "PYTHONPATH": str(ROOT / "tests")}
    if "cuda" in session.posargs or "--device=cuda" in session.posargs:  # compiled kernels on the host's GPU
        env = {"TRITON_INTERPRET": "0", "PYTHONPATH": str(ROOT / "tests")}
    script = ROOT / "tests" / "numerics" / "spec_fuzz_cases.py"
    session.run("python", str(script), "--out", str(FUZZ_DIR / f"{row.id}.json"), *session.posargs, env=env)


@nox.session(tags=["lint"])
def lint(session: nox.Session) -> None:
    """ruff check + format --check, workflows vs GitHub's schema, matrix files, compat doc."""
    session.install(*LINT_TOOLS, "pyyaml", "tabulate", "packaging")
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")
    workflows = sorted(str(p) for p in (ROOT / ".github" / "workflows").glob("*.y*ml"))
    if workflows:
        session.run("check-jsonschema", "--builtin-schema", "vendor.github-workflows", *workflows)
    source_env = {"PYTHONPATH": str(ROOT / "src")}
    session.run("python", "-m", "caovan.matrix", "validate", env=source_env)
    session.run("python", "-m", "caovan.matrix.compat", "--check", env=source_env)
    if PERFORMANCE_DOC.exists():
        session.run(*_performance_command(), "--check", env=source_env)


def _performance_command() -> list[str]:
    records, doc = (str(path.relative_to(ROOT)) for path in (PERFORMANCE_RECORDS, PERFORMANCE_DOC))
    return ["python", "-m", "caovan.bench.e2e_report", records, "--doc", doc]


@nox.session(default=False, tags=["docs"])
def performance(session: nox.Session) -> None:
    """Regenerate docs/performance.md's table and plot from docs/performance/*/e2e.json (caovan bench e2e)."""
    session.install(*PLOT_REQUIREMENTS, "tabulate")
    plot = str(PERFORMANCE_PLOT.relative_to(ROOT))
    session.run(*_performance_command(), "--plot", plot, env={"PYTHONPATH": str(ROOT / "src")})


@nox.session(python=False, tags=["compat"])
def compat(session: nox.Session) -> None:
    """Regenerate docs/compat.md's table and docs/sm75.md's releases from matrix/results/<runner>/<row>.json."""
    try:
        changed = regenerate(RESULTS_DIR, COMPAT_DOC, base=ROOT, sm75_doc=SM75_DOC)
    except MatrixError as exc:
        for message in exc.messages:
            session.warn(f"compat: {message}")
        session.error(f"compat: {len(exc.messages)} problem(s); {COMPAT_DOC.relative_to(ROOT)} left untouched")
    docs = f"{COMPAT_DOC.relative_to(ROOT)}, {SM75_DOC.relative_to(ROOT)}"
    session.log(f"{docs}: {'updated' if changed else 'already up to date'}")
    note = older_source_note(RESULTS_DIR, ROOT)
    if note:
        session.warn(f"compat: {note}")


def _compile(
    session: nox.Session,
    requirements: list[str],
    work: Path,
    name: str,
    index: list[str],
    target: list[str],
    overrides: list[str] | None = None,
):
    """``uv pip compile`` for ``target`` (the session's interpreter, or ``--python-version``/``--python-platform``
    of another host): pinned lines, without the plugin itself."""
    source, compiled = work / f"{name}.in", work / f"{name}.txt"
    source.write_text("\n".join(requirements) + "\n")
    session.run(
        "uv", "pip", "compile", str(source), "-o", str(compiled), *target,
        "--no-header", "--no-annotate", "--quiet", *index, *(overrides or []), external=True,
    )  # fmt: skip
    lines = [line.strip() for line in compiled.read_text().splitlines()]
    return [
        line
        for line in lines
        if line
        and not line.startswith(("#", "-"))
        and requirement_name(line) != PLUGIN_DISTRIBUTION
        and " @ file:" not in line
    ]


@nox.session(tags=["wheelhouse"], default=False)
@nox.parametrize(("row_id", "python"), _row_params(tagged=False))
def wheelhouse(session: nox.Session, row_id: str) -> None:
    """Every wheel a row needs in wheelhouse/<row>/, for offline `--no-index --find-links` installs.

    Posargs: ``--out DIR`` (default wheelhouse/); ``--without-host-provided`` leaves out torch and
    what torch brings (triton, nvidia-*) for hosts that have them; run the matrix there with
    CAOVAN_SYSTEM_SITE_PACKAGES=1. The wheels fit this machine's OS/architecture and the row's
    Python; sdist-only packages are built into wheels here. ``--python-version 3.12`` (with
    ``--platform TAG``, default manylinux_2_28_x86_64) resolves and downloads for a GPU host whose
    Python is not the row's, binary wheels only; ``--exclude PATTERN`` (repeatable) leaves out packages
    that host cannot use. Such a set is for `PYTHONPATH=src python3 -m caovan.matrix.site_bundle` and
    tools/run-gpu-row-offline.sh, not for a row venv.
    """
    row = ROWS[row_id]
    try:
        args = parse_wheelhouse_options(session.posargs, row_id=row_id, default_out=ROOT / "wheelhouse")
    except MatrixError as exc:
        session.error(str(exc))
    if shutil.which("uv") is None:
        session.error("wheelhouse needs uv on PATH (uv pip compile)")
    out = args.out.resolve()
    # A set for another Python has its own folder: `nox -s matrix` with CAOVAN_WHEELHOUSE reads <row>/ and
    # must not find wheels for an interpreter its venv does not have.
    set_name = f"{row.id}-py{args.python_version}" if args.python_version else row.id
    target = out / set_name
    work = CACHE_DIR / "wheelhouse" / set_name
    work.mkdir(parents=True, exist_ok=True)
    target.mkdir(parents=True, exist_ok=True)
    if not (out / ".gitignore").exists():
        (out / ".gitignore").write_text("# made by nox -s wheelhouse; never committed\n*\n")
    wheel = plugin_wheel(session)
    session.install("pip")
    index = ["--extra-index-url", row.torch_index] if row.torch_index else []
    uv_index = [*index, "--index-strategy", "unsafe-best-match"] if index else []

    if args.python_version:
        python = args.python_version
        resolve_for = ["--python-version", python, "--python-platform", args.uv_python_platform]
    else:
        python = row.python
        resolve_for = ["--python", str(Path(session.bin) / "python")]
    session.log(f"wheelhouse: resolving {row.id} for Python {python}" + (f", {args.platform}" if args.platform else ""))
    overrides = _override_args(row, work)
    pins = _compile(
        session, [*row.install_pins(), _plugin_requirement(wheel)], work, "row", uv_index, resolve_for, overrides
    )
    left_out: list[str] = []
    if args.without_host_provided:
        # What a host with this torch already has: torch and those of its dependencies that
        # match HOST_PROVIDED (vLLM's own nvidia-* packages, e.g. nvidia-ml-py, stay in).
        torch_closure = _compile(session, [f"torch=={row.torch}"], work, "torch", uv_index, resolve_for)
        provided = {
            requirement_name(line) for line in torch_closure if matches_any(requirement_name(line), HOST_PROVIDED)
        }
        left_out = [f"{line}  # host-provided" for line in pins if requirement_name(line) in provided]
        pins = [line for line in pins if requirement_name(line) not in provided]
    try:
        pins, excluded = split_excluded(pins, args.exclude)
    except MatrixError as exc:
        session.error(str(exc))
    left_out += [f"{line}  # --exclude" for line in excluded]
    wanted = work / "download.txt"
    wanted.write_text("\n".join(pins) + "\n")
    session.log(f"wheelhouse: {len(pins)} wheels to fetch into {target}")
    session.log(f"wheelhouse: left out: {', '.join(left_out) or 'nothing'}")
    if args.python_version:
        # Another interpreter: nothing can be built for it here, so binary wheels only (pip names the
        # package that has none), for the host's manylinux tag and every older one.
        session.run(
            "python", "-m", "pip", "download", "--no-deps", "--quiet", "--only-binary=:all:",
            "--python-version", python, "--implementation", "cp",
            *(arg for tag in pip_platform_tags(args.platform) for arg in ("--platform", tag)),
            "-d", str(target), "-r", str(wanted), *index,
        )  # fmt: skip
    else:
        # pip wheel: downloads wheels, and builds one for any package published as sdist only.
        session.run(
            "python", "-m", "pip", "wheel", "--no-deps", "--quiet", "-w", str(target),
            "-r", str(wanted), *index,
        )  # fmt: skip
    shutil.copy2(wheel, target / wheel.name)
    (target / "left-out.txt").write_text("".join(f"{line}\n" for line in left_out))
    if args.python_version:  # no row venv is made from it: no build backend needed
        session.log(
            f"wheelhouse: {target} ready; pack it for the GPU host with: PYTHONPATH=src python3 -m "
            f"caovan.matrix.site_bundle {target} OUT --python-version {args.python_version} --platform {args.platform}"
        )
        return
    session.log(f"wheelhouse: plugin build backend and pip into {out / WHEELHOUSE_TOOLS_DIR}")
    tools = ["-d", str(out / WHEELHOUSE_TOOLS_DIR), "hatchling>=1.24", "pip"]
    session.run("python", "-m", "pip", "download", "--quiet", *tools)
    session.log(
        f"wheelhouse: {target} ready; on the GPU host: CAOVAN_WHEELHOUSE={out}"
        + (" CAOVAN_SYSTEM_SITE_PACKAGES=1" if args.without_host_provided else "")
        + f" nox -s 'matrix({row.id})'"
    )


if __name__ == "__main__":
    nox.main()
