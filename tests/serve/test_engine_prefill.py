"""Serve tier: caovan's own GDN prefill in a full vLLM engine (tiny Qwen3-Next GDN + MTP model), against the same
engine with vLLM's prefill.

Two engines (``engine_runner.py``, eager, MTP with 2 draft tokens, ``gdn_prefill_backend`` triton, the same
re-drawn weights), both running caovan's spec-decode step so that only the prefill differs:

* ``prefill_on``   ``{"caovan": true, "caovan_prefill": true}``
* ``prefill_off``  ``{"caovan": true}``

on the ``long-prompts`` workload (1 to 300 tokens, chunk edges included) with 96 tokens per step, so that the three
longest prompts are prefilled in chunks and each chunk starts from the state the previous one left in vLLM's
cache. Asserted: ``prefill_on`` logs Turbo3's ``[Caovan GDNCore] ACTIVE REAL PREFILL`` line and its counters show
prefill calls through caovan and no prefill call handed back to vLLM; ``prefill_off`` has neither; the greedy
tokens agree under the rules of ``test_engine_mtp.py`` (logprobs of the picked token within tolerance before each
sequence's first divergence, every divergence a near tie, at least half of all positions compared).
"""

from __future__ import annotations

import pytest
from engine_cases import PREFILL_BACKEND, Case, EngineRun, compare, dispatch_totals, start_engines, succeeded

pytestmark = pytest.mark.serve

PREFILL_ACTIVE_LINE = "[Caovan GDNCore] ACTIVE REAL PREFILL"
#: Below the 130-, 257- and 300-token prompts: vLLM prefills them in two to four chunks.
CHUNK_TOKENS = 96
NUM_SPECULATIVE_TOKENS = 2

CASES = (
    Case(
        "prefill_on",
        {**PREFILL_BACKEND, "caovan": True, "caovan_prefill": True},
        NUM_SPECULATIVE_TOKENS,
        workload="long-prompts",
        max_num_batched_tokens=CHUNK_TOKENS,
    ),
    Case(
        "prefill_off",
        {**PREFILL_BACKEND, "caovan": True},
        NUM_SPECULATIVE_TOKENS,
        workload="long-prompts",
        max_num_batched_tokens=CHUNK_TOKENS,
    ),
)


@pytest.fixture(scope="module")
def engine_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, EngineRun]:
    return start_engines(CASES, tmp_path_factory, "serve-prefill")


def test_prefill_on_routes_every_prefill_to_caovan(engine_runs):
    run = engine_runs["prefill_on"]
    succeeded(run)
    lines = [line for line in run.log.splitlines() if PREFILL_ACTIVE_LINE in line]
    assert len(lines) == 1, f"expected one '{PREFILL_ACTIVE_LINE}' line, found {len(lines)}\n{run.describe()}"
    assert "backend=caovan_gdncore" in lines[0], lines[0]
    dispatched, fallbacks = dispatch_totals(run)
    assert dispatched.get("prefill", 0) > 0, f"no prefill call reached caovan: {run.counters_files}"
    handed_back = {reason: n for reason, n in fallbacks.items() if reason.startswith("prefill-")}
    assert not handed_back, f"caovan handed prefill calls back to vLLM: {handed_back}"
    print(f"[serve] prefill_on: caovan dispatches {dispatched}")


def test_prefill_off_leaves_the_prefill_to_vllm(engine_runs):
    run = engine_runs["prefill_off"]
    succeeded(run)
    assert PREFILL_ACTIVE_LINE not in run.log, f"prefill line logged with caovan_prefill off\n{run.describe()}"
    dispatched, _ = dispatch_totals(run)
    assert not dispatched.get("prefill"), f"caovan's prefill ran with caovan_prefill off: {dispatched}"


def test_greedy_tokens_agree_with_vllm_prefill_across_chunked_prompts(engine_runs):
    agreement = compare(engine_runs["prefill_on"], engine_runs["prefill_off"])
    assert not agreement.problems(), "\n".join(agreement.problems() + [agreement.report()])
