"""Serve tier: full vLLM engines with a tiny Qwen3-Next GDN + MTP model, caovan on, off and misconfigured.

Each case is one ``vllm.LLM`` in its own process (``engine_runner.py``; engine core in-process, eager mode,
MTP with 2 draft tokens, ``gdn_prefill_backend`` triton, dummy weights re-drawn Hugging-Face style), all
started together on the one GPU (each with a fixed 1 GiB KV cache, so they do not profile each other):

* ``enabled``   ``{"caovan": true}``
* ``disabled``  ``{"caovan": false}`` (plugin loaded, option off: vLLM's own kernels)
* ``require_mtp``  ``{"caovan_sm75_turbo3": true, "caovan_require_turbo3": true}`` (0.1.3 key + require)
* ``require_no_spec``  require mode without speculative decoding: must refuse to start
* ``require_no_gdn``  require mode on a tiny Qwen3 dense model (no GDN layer, no MTP): must refuse to start
* ``bad_option_type``  ``{"caovan": "yes"}``: must refuse to start with caovan's one error

What is asserted, and why
-------------------------
Routing (enabled): the log has ``Caovan SM75 Turbo3 ACTIVE DISPATCH confirmed`` on a line naming both
kernels; every GDN layer of the target has caovan's core bound; caovan's counters file (written at exit through
``CAOVAN_COUNTERS_FILE``) shows spec dispatches, and its fallbacks are only "no-metadata" (warm-up/profile) and
"no-spec-tokens" (prefill/plain-decode batches); the dispatch count is a multiple of the number of GDN layers
(every step reached every layer); and vLLM's own spec-decode kernels (``causal_conv1d_update`` /
``fused_sigmoid_gating_delta_rule_update`` called with ``num_accepted_tokens``) were called zero times, counted
by the runner independently of caovan.  Mixed prefill + spec batches are required separately (the workload
admits prompts while others decode).  Disabled: plugin loaded and reports the option off, no activation line,
no caovan counters with dispatches, and vLLM's spec kernels ran (so both runs really decoded speculatively).

Tokens: greedy outputs of ``enabled`` are compared with ``disabled`` (same weights, same prompts).  Target
>= 95 % agreement, but the assertion is on what rounding can and cannot explain:

1. on every position with a shared context (before each sequence's first divergence) the two runs' logprobs
   of the picked token agree within a tolerance (fp16: 0.02 nats; bf16: 0.08; ``CAOVAN_SERVE_LOGPROB_TOL``).
   Logits are N(0, 0.32^2) under the re-drawn weights (lm_head std 0.02 over hidden 256 after a unit RMSNorm),
   fp16 resolves them to ~1e-3, and a wiring bug in the GDN layers, which carry most of the residual stream,
   moves them by ~0.3;
2. every first divergence is a near tie: both contested tokens are in both runs' top-2 with logprobs that
   agree within that tolerance, i.e. a rounding-size change flips the arg-max.  After it the runs decode
   different contexts, so later positions are reported, not judged;
3. at least half of all positions precede their sequence's first divergence (enough evidence).

The raw numbers (agreement before the first divergence, and position by position overall) are printed with
every divergence and its logprob deltas.  Why ">= 95 % of positions" is reported and not asserted as such:
with random weights the top two logits of a position are often close (mean gap ~0.08 for 2048 tokens of
std 0.32), so by our estimate a few positions in ten thousand are ties at fp16 resolution; one flip early in
a 48-token sequence costs ~10 % of the 224 positions, which would fail a correct implementation now and
then, while a genuine kernel error already breaks rule 1 or 2 at the first spec step.

Why the weights are re-drawn: with vLLM's dummy weights (uniform +-1e-3, norm gains included) the GDN branch
adds ~1e-7 to a ~6e-4 residual stream, below fp16 resolution, and the logits are dominated by the current
token's embedding: the tokens would not depend on the GDN kernels and the comparison could not fail (see
``engine_runner.hf_init_weights``).  The MoE blocks keep dummy weights (their top-k routing is a discrete
choice that rounding could flip; with near-zero output a flip changes nothing).  The MTP draft keeps dummy
weights, so the acceptance rate is low and drafts are mostly rejected (num_accepted_tokens mostly 1: the
accepted > 1 state columns are the kernel tier's job); acceptance is printed, not asserted.

Require mode: ``require_mtp`` starts, dispatches, and agrees with ``enabled`` under the same rules;
``require_no_spec`` fails at start-up with CaovanRequireError saying "speculative decoding is off";
``require_no_gdn`` fails at start-up with CaovanRequireError saying the model "has no GDN layer caovan can take
over" (raised from the model loader, after vLLM built the model and found no layer to hand to caovan);
``bad_option_type`` fails at start-up with the exact CaovanConfigError ``caovan.plugin.options`` gives for it.

Environment knobs: ``CAOVAN_SERVE_DTYPE`` (float16 | bfloat16, default float16 as on SM75),
``CAOVAN_SERVE_JOBS`` (engines at once, default all), ``CAOVAN_SERVE_TIMEOUT_S`` (per engine, default 540),
``CAOVAN_SERVE_ARTIFACTS`` (keep logs/results in this folder instead of pytest's tmp dir).
Run: ``pytest -m serve tests/serve -v`` (caovan installed, e.g. ``pip install -e .``, so vLLM finds the plugin).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import serve_env
import serve_workload
import token_agreement

from caovan.bench.model_folders import write_tiny_qwen3_dense, write_tiny_qwen3_next

pytestmark = pytest.mark.serve

RUNNER = Path(__file__).resolve().with_name("engine_runner.py")
ACTIVE_LINE = serve_env.ACTIVE_LINE
KERNEL_NAMES = ("_caovan_sm75_prepare_qk_conv_spec_decode_kernel", "_caovan_sm75_fused_v_gdn_spec_decode_kernel")
INTERFACE_PASS = "GDN interface check: PASS"
ALLOWED_FALLBACKS = frozenset({"no-metadata", "no-spec-tokens"})
NUM_SPECULATIVE_TOKENS = 2
PREFILL_BACKEND = {"gdn_prefill_backend": "triton"}
DEFAULT_LOGPROB_TOL = {"float16": 0.02, "bfloat16": 0.08}
TAIL_LINES = 80


@dataclass(frozen=True)
class Case:
    name: str
    additional_config: dict[str, Any]
    num_speculative_tokens: int
    model: str = "qwen3-next"  # key of the fixture's model folders: "qwen3-next" (GDN + MTP) or "dense"


CASES = (
    Case("enabled", {**PREFILL_BACKEND, "caovan": True}, NUM_SPECULATIVE_TOKENS),
    Case("disabled", {**PREFILL_BACKEND, "caovan": False}, NUM_SPECULATIVE_TOKENS),
    Case(
        "require_mtp",
        {**PREFILL_BACKEND, "caovan_sm75_turbo3": True, "caovan_require_turbo3": True},
        NUM_SPECULATIVE_TOKENS,
    ),
    Case("require_no_spec", {**PREFILL_BACKEND, "caovan": True, "caovan_require_turbo3": True}, 0),
    Case("require_no_gdn", {"caovan": True, "caovan_require_turbo3": True}, 0, model="dense"),
    Case("bad_option_type", {**PREFILL_BACKEND, "caovan": "yes"}, NUM_SPECULATIVE_TOKENS),
)


@dataclass
class EngineRun:
    case: Case
    returncode: int | None  # None: killed at the timeout
    wall_s: float
    log: str
    result: dict[str, Any] | None
    counters_files: dict[str, dict[str, Any]] = field(default_factory=dict)

    def tail(self) -> str:
        return "\n".join(self.log.splitlines()[-TAIL_LINES:])

    def describe(self) -> str:
        error = (self.result or {}).get("error")
        ended = f"killed at the {TIMEOUT_S:.0f}s timeout" if self.returncode is None else f"rc={self.returncode}"
        return (
            f"engine case {self.case.name!r}: {ended} after {self.wall_s:.0f}s, error={error}\n"
            f"--- last {TAIL_LINES} log lines ---\n{self.tail()}"
        )


def _env_choice(name: str, default: str, choices: tuple[str, ...]) -> str:
    value = os.environ.get(name, default)
    if value not in choices:
        raise pytest.UsageError(f"{name}={value!r}: expected one of {choices}")
    return value


def _env_number(name: str, default: float, kind: type = float) -> Any:
    raw = os.environ.get(name)
    if raw is None:
        return default
    try:
        value = kind(raw)
    except ValueError:
        raise pytest.UsageError(f"{name}={raw!r}: expected a {kind.__name__}") from None
    if value <= 0:
        raise pytest.UsageError(f"{name}={raw!r}: must be > 0")
    return value


DTYPE = _env_choice("CAOVAN_SERVE_DTYPE", "float16", ("float16", "bfloat16"))
LOGPROB_TOL = _env_number("CAOVAN_SERVE_LOGPROB_TOL", DEFAULT_LOGPROB_TOL[DTYPE])
JOBS = _env_number("CAOVAN_SERVE_JOBS", len(CASES), int)
TIMEOUT_S = _env_number("CAOVAN_SERVE_TIMEOUT_S", 540.0)


def _command(case: Case, model_dirs: dict[str, Path], case_dir: Path) -> list[str]:
    return [
        sys.executable,
        str(RUNNER),
        "--model",
        str(model_dirs[case.model]),
        "--out",
        str(case_dir / "result.json"),
        "--additional-config",
        json.dumps(case.additional_config),
        "--num-speculative-tokens",
        str(case.num_speculative_tokens),
        "--dtype",
        DTYPE,
    ]


def _collect(case: Case, case_dir: Path, returncode: int | None, wall_s: float) -> EngineRun:
    result_path = case_dir / "result.json"
    result = json.loads(result_path.read_text()) if result_path.is_file() else None
    counters = {p.name: json.loads(p.read_text()) for p in sorted(case_dir.glob("counters-*.json"))}
    log = (case_dir / "engine.log").read_text(errors="replace")
    return EngineRun(case, returncode, wall_s, log, result, counters)


def _run_all(model_dirs: dict[str, Path], work_dir: Path) -> dict[str, EngineRun]:
    pending, running, done = list(CASES), {}, {}
    while pending or running:
        while pending and len(running) < JOBS:
            case = pending.pop(0)
            case_dir = work_dir / case.name
            case_dir.mkdir(parents=True, exist_ok=True)
            log = open(case_dir / "engine.log", "w")  # noqa: SIM115  (closed when the process ends)
            proc = subprocess.Popen(
                _command(case, model_dirs, case_dir),
                stdout=log,
                stderr=subprocess.STDOUT,
                env=serve_env.engine_env(case_dir, VLLM_ENABLE_V1_MULTIPROCESSING="0"),
                cwd=case_dir,
                start_new_session=True,  # its own process group, so a timeout can stop all it started
            )
            running[case.name] = (case, case_dir, proc, log, time.monotonic())
        for name, (case, case_dir, proc, log, started) in list(running.items()):
            code = proc.poll()
            elapsed = time.monotonic() - started
            if code is None and elapsed > TIMEOUT_S:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
                code = None
            elif code is None:
                continue
            log.close()
            done[name] = _collect(case, case_dir, code, elapsed)
            del running[name]
            print(f"[serve] {name}: returncode={code} after {elapsed:.0f}s", flush=True)
        time.sleep(1.0)
    return done


@pytest.fixture(scope="module")
def engine_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, EngineRun]:
    serve_env.require_cuda()
    serve_env.require_plugin_entry_point()
    artifacts = os.environ.get("CAOVAN_SERVE_ARTIFACTS")
    work_dir = Path(artifacts) if artifacts else tmp_path_factory.mktemp("serve")
    work_dir.mkdir(parents=True, exist_ok=True)
    model_dirs = {
        "qwen3-next": write_tiny_qwen3_next(work_dir / "tiny-qwen3-next", torch_dtype=DTYPE),
        "dense": write_tiny_qwen3_dense(work_dir / "tiny-qwen3-dense", torch_dtype=DTYPE),
    }
    print(f"[serve] models {model_dirs}, artifacts {work_dir}, dtype {DTYPE}, {JOBS} engines at once", flush=True)
    return _run_all(model_dirs, work_dir)


# --- helpers on one run ---------------------------------------------------------------------------------------


def _succeeded(run: EngineRun) -> dict[str, Any]:
    if run.returncode != 0 or not run.result or not run.result.get("ok"):
        pytest.fail(f"the engine run failed\n{run.describe()}")
    return run.result


def _dispatch_totals(run: EngineRun) -> tuple[dict[str, int], dict[str, int]]:
    dispatched: dict[str, int] = {}
    fallbacks: dict[str, int] = {}
    for snapshot in run.counters_files.values():
        for kind, n in snapshot.get("dispatched", {}).items():
            dispatched[kind] = dispatched.get(kind, 0) + n
        for reason, n in snapshot.get("fallbacks", {}).items():
            fallbacks[reason] = fallbacks.get(reason, 0) + n
    return dispatched, fallbacks


def _stock_spec_calls(result: dict[str, Any]) -> dict[str, int]:
    stock = result.get("stock_spec_kernel_calls") or {}
    if "spec" not in stock:
        pytest.fail(f"the runner could not count vLLM's spec-decode kernel calls: {stock}")
    return stock["spec"]


def _layer_facts(result: dict[str, Any]) -> dict[str, Any]:
    facts = result.get("layer_facts") or {}
    if "gdn_layers" not in facts:
        pytest.fail(f"the runner could not list the GDN layers: {facts}")
    if not facts["gdn_layers"]:
        pytest.fail(f"the engine built no GDN layer: {facts}")
    return facts


def _activation_lines(log: str) -> list[str]:
    return [line for line in log.splitlines() if ACTIVE_LINE in line]


def _assert_routed_to_caovan(run: EngineRun) -> dict[str, int]:
    result = _succeeded(run)
    assert INTERFACE_PASS in run.log, f"no '{INTERFACE_PASS}' status line\n{run.describe()}"
    lines = _activation_lines(run.log)
    assert lines, f"no activation line '{ACTIVE_LINE}'\n{run.describe()}"
    for kernel in KERNEL_NAMES:
        assert kernel in lines[0], f"activation line does not name {kernel}: {lines[0]}"

    facts = _layer_facts(result)
    assert facts["caovan_core_bound"] == facts["gdn_layers"], f"GDN layers without caovan's core: {facts}"

    assert run.counters_files, f"caovan wrote no counters file (CAOVAN_COUNTERS_FILE)\n{run.describe()}"
    dispatched, fallbacks = _dispatch_totals(run)
    assert dispatched.get("spec", 0) > 0, f"no pure spec-decode batch went to caovan: {run.counters_files}"
    unexpected = set(fallbacks) - ALLOWED_FALLBACKS
    assert not unexpected, f"caovan handed spec-decode work back to vLLM: fallbacks {fallbacks}"
    total = sum(dispatched.values())
    assert total % len(facts["gdn_layers"]) == 0, (
        f"{total} dispatches is not a multiple of the {len(facts['gdn_layers'])} GDN layers: "
        f"some layer missed a step ({dispatched})"
    )
    stock = _stock_spec_calls(result)
    assert not any(stock.values()), f"vLLM's own spec-decode kernels still ran with caovan on: {stock}"
    return dispatched


def _steps(result: dict[str, Any]) -> list[list[token_agreement.Step]]:
    sequences = result.get("sequences") or []
    lengths = [len(s["token_ids"]) for s in sequences]
    assert lengths == list(serve_workload.MAX_TOKENS), f"unexpected output lengths {lengths}"
    return token_agreement.runs_from_records(sequences)


def _compare(candidate: EngineRun, reference: EngineRun) -> token_agreement.Agreement:
    agreement = token_agreement.compare_greedy_runs(
        _steps(_succeeded(candidate)), _steps(_succeeded(reference)), logprob_tolerance=LOGPROB_TOL
    )
    print(f"[serve] {candidate.case.name} vs {reference.case.name}: {agreement.report()}")
    for run in (candidate, reference):
        print(f"[serve] {run.case.name} spec-decode metrics: {run.result.get('spec_decode_metrics')}")
    return agreement


def _error_in_chain(run: EngineRun, type_suffix: str) -> dict[str, str]:
    assert run.returncode not in (0, None), f"expected a start-up failure\n{run.describe()}"
    error = (run.result or {}).get("error")
    assert error, f"the runner recorded no error\n{run.describe()}"
    for link in error["chain"]:
        if link["type"].endswith(type_suffix):
            return link
    pytest.fail(f"no {type_suffix} in the exception chain {error['chain']}\n{run.describe()}")


# --- tests ----------------------------------------------------------------------------------------------------


def test_enabled_engine_routes_every_spec_decode_core_call_to_caovan(engine_runs):
    dispatched = _assert_routed_to_caovan(engine_runs["enabled"])
    print(f"[serve] enabled: caovan dispatches {dispatched}")


def test_enabled_engine_takes_mixed_prefill_and_spec_batches(engine_runs):
    run = engine_runs["enabled"]
    _succeeded(run)
    dispatched, _ = _dispatch_totals(run)
    assert dispatched.get("mixed", 0) > 0, (
        f"no mixed prefill + spec batch reached caovan ({dispatched}); the workload admits prompts 4 and 5 "
        "while others decode, so the scheduler kept prefills and spec decodes apart"
    )


def test_disabled_engine_leaves_every_call_to_vllm(engine_runs):
    run = engine_runs["disabled"]
    result = _succeeded(run)
    assert INTERFACE_PASS in run.log, f"plugin not loaded in the disabled run\n{run.describe()}"
    assert "off (caovan=false)" in run.log, f"caovan did not report the option off\n{run.describe()}"
    assert not _activation_lines(run.log), "activation line logged with caovan off"
    dispatched, _ = _dispatch_totals(run)
    assert not dispatched, f"caovan dispatched with caovan off: {run.counters_files}"
    facts = _layer_facts(result)
    assert facts["caovan_core_bound"] == [], f"caovan's core bound with caovan off: {facts}"
    stock = _stock_spec_calls(result)
    assert all(n > 0 for n in stock.values()), f"vLLM's spec-decode kernels never ran: {stock}"
    # Each spec step runs one conv update and one recurrent update in every GDN layer.
    conv, recurrent = (stock[name] for name in sorted(stock))
    assert conv == recurrent and conv % len(facts["gdn_layers"]) == 0, f"uneven stock kernel calls {stock}"


def test_greedy_tokens_agree_with_vllm_kernels(engine_runs):
    agreement = _compare(engine_runs["enabled"], engine_runs["disabled"])
    problems = agreement.problems()
    assert not problems, "caovan's greedy outputs differ from vLLM's beyond rounding:\n" + "\n".join(
        problems + [agreement.report()]
    )


def test_require_mode_with_mtp_starts_and_dispatches(engine_runs):
    _assert_routed_to_caovan(engine_runs["require_mtp"])
    agreement = _compare(engine_runs["require_mtp"], engine_runs["enabled"])
    assert not agreement.problems(), "\n".join(agreement.problems() + [agreement.report()])


def _assert_require_mode_refused(run: EngineRun, reason: str) -> None:
    link = _error_in_chain(run, "CaovanRequireError")
    assert reason in link["message"], link
    assert link["message"] in run.log, "the reason is not in the log"
    assert "sequences" not in run.result, "the engine generated despite the refusal"
    assert not _activation_lines(run.log)


def test_require_mode_without_speculative_decoding_fails_at_start_up(engine_runs):
    _assert_require_mode_refused(engine_runs["require_no_spec"], "speculative decoding is off")


def test_require_mode_on_a_model_without_gdn_layers_fails_at_start_up(engine_runs):
    _assert_require_mode_refused(engine_runs["require_no_gdn"], "has no GDN layer caovan can take over")


def test_malformed_caovan_option_fails_with_one_clear_error(engine_runs):
    from caovan.plugin.options import CaovanConfigError, parse_options

    with pytest.raises(CaovanConfigError) as expected:
        parse_options(engine_runs["bad_option_type"].case.additional_config, environ={})
    run = engine_runs["bad_option_type"]
    link = _error_in_chain(run, "CaovanConfigError")
    assert link["message"] == str(expected.value)
    assert str(expected.value) in run.log, "the error is not in the log"
    assert "sequences" not in run.result
