"""Serve tier: FULL CUDA graphs with MTP decode right with caovan on (vLLM issues 49918 and 53051).

vLLM tells a uniform spec-decode batch by its shape alone, so under ``FULL_AND_PIECEWISE`` a prompt of exactly
``1 + num_speculative_tokens`` tokens replays the FULL graph captured for spec-decode and its GDN state is never
written (caovan's ``plugin/uniform_decode_guard.py`` says how it keeps such batches out).  A second class reported
upstream: padded rows of a FULL-graph decode batch whose GDN metadata is stale (vLLM issue 31649, vLLM 0.12 - 0.16;
caovan's ``plugin/graph_padding_patch.py``).  Each is reproduced with the tiny
Qwen3-Next GDN + MTP model of the tier, greedy, and judged by token agreement against an eager engine with caovan
off (vLLM's own kernels, no graphs), under the rules of ``test_engine_mtp``:

* ``draft-shaped`` workload (every prompt ``1 + k`` tokens; see ``serve_workload``), with GDN heads of long memory
  (``--weights hf-init-long-memory``: with Hugging Face's init a head forgets its state within a token, and a lost
  prompt state barely moves the logits).  The runner counts how each step was dispatched
  (``engine_observers.GraphDispatchCounts``).  Caovan off: vLLM replays the spec-decode FULL graph for steps holding
  prompts (a test that fails once vLLM stops, so the guard can go), and the tokens are reported.  Caovan on: no
  step holding prompts replays it, FULL graphs still run the decodes, and the tokens agree;
* ``mixed`` workload (no prompt of that length, batches shrinking from four requests to one): FULL_AND_PIECEWISE
  with caovan on agrees, and FULL graphs ran with padded rows; caovan off is reported beside it.

The graph sizes are set, not vLLM's: its defaults (1, 2, 4, 8, 16, ... tokens) give FULL uniform graphs only at
multiples of ``1 + k`` rounded up from those (3, 6, 9, 18 for k = 2), so a batch of four such requests (12 tokens)
runs PIECEWISE, prompts included (seen on an H100 with vLLM 0.25.0: every prompt step PIECEWISE; vLLM pull
request 53407 describes the gaps).  ``draft-shaped`` captures one FULL graph per batch size, 1 to 4 requests, so
every prompt batch has its own; ``mixed`` captures graphs for 2 and 4 requests only, so batches of 1 and 3 replay
them with padded rows.

Caovan's counters are not asserted here: graph replays run no Python, so they count only captures and the batches
outside the graphs.  The engines must really have run FULL graphs: vLLM can lower the mode it was asked for (an
attention backend without FULL-graph support), and then these comparisons would test nothing, so that fails.

Run: ``pytest -m serve tests/serve/test_full_graph_mtp.py -v`` (a CUDA GPU; caovan installed).
"""

from __future__ import annotations

import pytest
from engine_cases import PREFILL_BACKEND, Case, EngineRun, compare, start_engines, succeeded
from serve_workload import MAX_NUM_SEQS

pytestmark = pytest.mark.serve

NUM_SPECULATIVE_TOKENS = 2
FULL = "FULL_AND_PIECEWISE"
GUARD_LINE = "FULL CUDA graphs with MTP are safe with caovan on"
OFF = {**PREFILL_BACKEND, "caovan": False}
ON = {**PREFILL_BACKEND, "caovan": True}

DRAFT_SHAPED = {"workload": "draft-shaped", "weights": "hf-init-long-memory"}
#: Graph sizes in tokens: one per uniform batch of 1 to MAX_NUM_SEQS (4) requests; for 2 and 4 requests only.
EVERY_UNIFORM_BATCH = tuple((1 + NUM_SPECULATIVE_TOKENS) * n for n in range(1, MAX_NUM_SEQS + 1))
PADDED_BATCHES = ((1 + NUM_SPECULATIVE_TOKENS) * 2, (1 + NUM_SPECULATIVE_TOKENS) * MAX_NUM_SEQS)
DRAFT_SHAPED_FULL = {"cudagraph_mode": FULL, "cudagraph_capture_sizes": EVERY_UNIFORM_BATCH, **DRAFT_SHAPED}
MIXED_FULL = {"cudagraph_mode": FULL, "cudagraph_capture_sizes": PADDED_BATCHES}
#: GraphDispatchCounts keys: steps holding prompts / decodes only that replayed a FULL uniform-decode graph.
PROMPTS_IN_FULL_GRAPH = "prompt steps, full-uniform"
DECODES_IN_FULL_GRAPH = "decode steps, full-uniform"
DECODES_PADDED_IN_FULL_GRAPH = "decode steps, full-uniform with padded rows"

CASES = (
    Case("draft_shaped_eager_off", OFF, NUM_SPECULATIVE_TOKENS, **DRAFT_SHAPED),
    Case("draft_shaped_full_off", OFF, NUM_SPECULATIVE_TOKENS, **DRAFT_SHAPED_FULL),
    Case("draft_shaped_full_on", ON, NUM_SPECULATIVE_TOKENS, **DRAFT_SHAPED_FULL),
    Case("mixed_eager_off", OFF, NUM_SPECULATIVE_TOKENS),
    Case("mixed_full_off", OFF, NUM_SPECULATIVE_TOKENS, **MIXED_FULL),
    Case("mixed_full_on", ON, NUM_SPECULATIVE_TOKENS, **MIXED_FULL),
)


@pytest.fixture(scope="module")
def engine_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, EngineRun]:
    return start_engines(CASES, tmp_path_factory, "full-graph")


@pytest.mark.parametrize("name", [c.name for c in CASES if c.cudagraph_mode == FULL])
def test_engines_really_ran_full_graphs(engine_runs, name):
    result = succeeded(engine_runs[name])
    assert result.get("cudagraph_mode_in_effect") == FULL, (
        f"{name}: asked for {FULL}, vLLM settled on {result.get('cudagraph_mode_in_effect')}: the FULL-graph "
        "agreement checks would test nothing"
    )


def graph_dispatch(run: EngineRun) -> dict[str, int]:
    counts = succeeded(run).get("graph_dispatch")
    assert isinstance(counts, dict) and "error" not in counts, f"{run.case.name}: no dispatch counts: {counts}"
    print(f"[serve] {run.case.name} graph dispatch: {counts}")
    print(f"[serve] {run.case.name} by batch size: {succeeded(run).get('graph_dispatch_by_size')}")
    return counts


def test_caovan_keeps_draft_shaped_prompts_right_under_full_graphs(engine_runs):
    run = engine_runs["draft_shaped_full_on"]
    succeeded(run)
    assert GUARD_LINE in run.log, f"caovan's uniform-decode guard was not installed\n{run.describe()}"
    counts = graph_dispatch(run)
    assert counts.get(PROMPTS_IN_FULL_GRAPH, 0) == 0, f"caovan on, prompts replayed the spec-decode graph: {counts}"
    assert counts.get(DECODES_IN_FULL_GRAPH, 0) > 0, f"caovan on, no decode replayed a FULL graph: {counts}"
    agreement = compare(run, engine_runs["draft_shaped_eager_off"])
    problems = agreement.problems()
    assert not problems, "FULL graphs with caovan on decode draft-shaped prompts wrong:\n" + "\n".join(
        problems + [agreement.report()]
    )


def test_vllm_alone_still_replays_the_spec_decode_graph_for_prompts(engine_runs):
    """Shows what caovan's guard is for; fails once vLLM keeps prompts out of that graph on its own."""
    counts = graph_dispatch(engine_runs["draft_shaped_full_off"])
    agreement = compare(engine_runs["draft_shaped_full_off"], engine_runs["draft_shaped_eager_off"])
    print(f"[serve] caovan off under {FULL}: {'; '.join(agreement.problems()) or 'agrees with eager'}")
    assert counts.get(PROMPTS_IN_FULL_GRAPH, 0) > 0, (
        f"with caovan off, no step holding prompts of 1 + num_speculative_tokens tokens replayed the FULL graph "
        f"captured for spec-decode ({counts}): if this vLLM fixed issues 49918 / 53051, caovan's "
        "uniform_decode_guard can go (see its 'Remove when')"
    )


def test_caovan_decodes_padded_full_graph_batches_right(engine_runs):
    counts = graph_dispatch(engine_runs["mixed_full_on"])
    assert counts.get(DECODES_PADDED_IN_FULL_GRAPH, 0) > 0, f"no FULL graph replayed with padded rows: {counts}"
    off = compare(engine_runs["mixed_full_off"], engine_runs["mixed_eager_off"])
    print(f"[serve] for comparison, caovan off under {FULL}: {'; '.join(off.problems()) or 'agrees with eager'}")
    agreement = compare(engine_runs["mixed_full_on"], engine_runs["mixed_eager_off"])
    problems = agreement.problems()
    assert not problems, "FULL graphs with caovan on decode the mixed workload wrong:\n" + "\n".join(
        problems + [agreement.report()]
    )
