"""``caovan bench prefill``: caovan's GDN prefill and the installed vLLM's Triton prefill, side by side, per case.

For every case (``prefill_cases``: a per-GPU head shape, B varlen sequences of B x L tokens in all, half of them
starting from a cached state), on one random input set laid out as vLLM's prefill branch hands it to FLA:

- errors: caovan's ``gdn_prefill`` and vLLM's prefill (``VllmPrefill``: gather, FLA, scatter), each once on fresh
  clones of the cache and the output, against the float64 oracle (``gdn_prefill_reference``, run sequence by
  sequence): max |error| of the output rows and of the batch's final states. The oracle runs token by token, so
  above ``max_reference_tokens`` tokens the errors are null, with the reason;
- time, host-inclusive and warm, of three sides: ``caovan`` (``gdn_prefill`` reading and writing the cache slots),
  ``vllm_fla`` (FLA's ``chunk_gated_delta_rule`` alone on an initial state gathered once beforehand, with the
  chunk indices vLLM's metadata builder makes once per step where the release takes them) and ``vllm_branch``
  (``VllmPrefill``: what vLLM's layer runs). After ``warmup`` calls of each, ``repeats`` rounds; in each round
  every side runs ``iters`` back-to-back calls timed with ``time.perf_counter`` around them and one synchronize at
  the end. Per side, the median over the rounds of the time per call. The rounds of the sides alternate, so a slow
  stretch of the host slows each of them alike.

Each side writes only its own copy of the output and of the state cache; the inputs they only read (q, k, v, g,
beta, the sequence table, the slot indices) are shared. Repeated calls re-run the same prefill on the states the
previous call left, which is the same work. Plain torch timing (no triton.testing), so what is measured is visible.
"""

from __future__ import annotations

import gc
import itertools
import math
import statistics
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from caovan.bench.prefill_cases import DEFAULT_MAX_REFERENCE_TOKENS, PrefillCase

SIDES = ("caovan", "vllm_fla", "vllm_branch")
#: ``gdn_prefill``'s positional tensors, in order (``VllmPrefill`` and the oracle take the same).
POSITIONAL = ("q", "k", "v", "g", "beta", "out", "ssm_state", "cu_seqlens")
#: The tensors a prefill writes: each side gets its own clone of these.
WRITTEN = ("out", "ssm_state")
TIMING_METHOD = (
    "host-inclusive: per side, ITERS back-to-back calls after WARMUP calls, time.perf_counter around them with one "
    "synchronize at the end, divided by ITERS; the median over REPEATS rounds, the sides alternating in each round"
)


@dataclass(frozen=True)
class PrefillSettings:
    warmup: int = 3
    iters: int = 10
    repeats: int = 5
    max_reference_tokens: int = DEFAULT_MAX_REFERENCE_TOKENS


@dataclass(frozen=True)
class CacheLayout:
    """The installed family's cache conventions: the state's per-head layout and its null-slot rule."""

    ssm_layout: str = "vk"
    null_slot_max: int = 0


def synchronize(device: Any) -> None:
    import torch

    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)


# --------------------------------------------------------------------------------------------------
# Inputs
# --------------------------------------------------------------------------------------------------
def build_inputs(case: PrefillCase, layout: CacheLayout, device: Any) -> dict[str, Any]:
    """The case's tensors on ``device``: q, k (T, H, K) raw (L2-normalised in kernel); v, out (T, HV, V);
    g = -exp(A_log) * softplus(a) <= 0 (float32) and beta = sigmoid(b), (T, HV); a cache of B + 2 state slots
    (slot 0 is vLLM's null block from 0.20, never one of the batch's) in the family's layout; cu_seqlens,
    state_indices (int32) and has_initial_state (bool)."""
    import torch
    import torch.nn.functional as F

    dtypes = {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32}
    act, state_dtype = dtypes[case.act_dtype], dtypes[case.state_dtype]
    h = case.head
    H, HV, K, V = h.num_k_heads, h.num_v_heads, h.head_k_dim, h.head_v_dim
    T, n = case.total_tokens, case.batch
    gen = torch.Generator(device=device).manual_seed(case.input_seed)

    def randn(*shape: int, dtype: Any = torch.float32) -> torch.Tensor:
        return torch.randn(*shape, generator=gen, device=device, dtype=dtype)

    a_log = randn(HV) * 0.5
    g = -torch.exp(a_log) * F.softplus(randn(T, HV))
    beta = torch.sigmoid(randn(T, HV)).to(act)
    per_head = (V, K) if layout.ssm_layout == "vk" else (K, V)
    slots = n + 2
    ssm_state = (randn(slots, HV, *per_head) * 0.5).to(state_dtype)
    order = torch.randperm(slots - 1, generator=gen, device=device)[:n] + 1
    cu = torch.tensor([0, *itertools.accumulate(case.seq_lens)], dtype=torch.int32, device=device)
    return {
        "q": randn(T, H, K, dtype=act),
        "k": randn(T, H, K, dtype=act),
        "v": randn(T, HV, V, dtype=act),
        "g": g.float(),
        "beta": beta,
        "out": torch.zeros(T, HV, V, dtype=act, device=device),
        "ssm_state": ssm_state,
        "cu_seqlens": cu,
        "state_indices": order.to(torch.int32),
        "has_initial_state": torch.tensor(case.has_initial_state, dtype=torch.bool, device=device),
    }


def own_copy(inputs: Mapping[str, Any]) -> dict[str, Any]:
    """The inputs with fresh clones of what a prefill writes (output, state cache); the rest shared."""
    return {name: t.clone() if name in WRITTEN else t for name, t in inputs.items()}


def prefill_call(
    fn: Callable[..., None], inputs: Mapping[str, Any], layout: CacheLayout, **extra: Any
) -> Callable[[], None]:
    """``fn`` (``gdn_prefill``, ``VllmPrefill`` or the oracle) bound to ``inputs``: the timed call is exactly
    ``fn(*tensors, **keywords)``; ``extra`` keywords go to ``fn`` as they are (``VllmPrefill``'s chunk metadata)."""
    args = [inputs[name] for name in POSITIONAL]
    kwargs = {
        "state_indices": inputs["state_indices"],
        "has_initial_state": inputs["has_initial_state"],
        "use_qk_l2norm": True,
        "ssm_layout": layout.ssm_layout,
        "null_slot_max": layout.null_slot_max,
        **extra,
    }
    return lambda: fn(*args, **kwargs)


def fla_call(
    function: Callable[..., Any], inputs: Mapping[str, Any], chunk_keywords: Mapping[str, Any]
) -> Callable[[], Any]:
    """FLA's ``chunk_gated_delta_rule`` as vLLM's prefill branch calls it, on an initial state gathered (and zeroed
    where a sequence has none) once, here, not in the timed call."""
    t = inputs
    n = t["cu_seqlens"].shape[0] - 1
    index = t["state_indices"][:n]
    initial_state = t["ssm_state"][index].contiguous()
    initial_state[~t["has_initial_state"][:n], ...] = 0
    kwargs = {
        "q": t["q"].unsqueeze(0),
        "k": t["k"].unsqueeze(0),
        "v": t["v"].unsqueeze(0),
        "g": t["g"].unsqueeze(0),
        "beta": t["beta"].unsqueeze(0),
        "initial_state": initial_state,
        "output_final_state": True,
        "cu_seqlens": t["cu_seqlens"],
        "use_qk_l2norm_in_kernel": True,
        **chunk_keywords,
    }
    return lambda: function(**kwargs)


# --------------------------------------------------------------------------------------------------
# Time and errors
# --------------------------------------------------------------------------------------------------
def time_calls(calls: Mapping[str, Callable[[], Any]], settings: PrefillSettings, device: Any) -> dict[str, Any]:
    """Per side: ``{"us": median per-call time, "repeats_us": [each round's]}`` (see the module docstring)."""
    for call in calls.values():
        for _ in range(settings.warmup):
            call()
    synchronize(device)
    rounds: dict[str, list[float]] = {name: [] for name in calls}
    for _ in range(settings.repeats):
        for name, call in calls.items():
            t0 = time.perf_counter()
            for _ in range(settings.iters):
                call()
            synchronize(device)
            rounds[name].append((time.perf_counter() - t0) / settings.iters * 1e6)
    return {name: {"us": statistics.median(r), "repeats_us": r} for name, r in rounds.items()}


def _worse(a: float, b: float) -> float:
    """The larger of two errors, NaN winning (a NaN error must not vanish in a max)."""
    return math.nan if math.isnan(a) or math.isnan(b) else max(a, b)


def _max_abs(a: Any, b: Any) -> float:
    return (a.double() - b.double()).abs().max().item() if a.numel() else 0.0


def reference_errors(
    inputs: Mapping[str, Any], results: Mapping[str, Mapping[str, Any]], reference: Callable[..., None],
    layout: CacheLayout,
) -> dict[str, dict[str, float]]:  # fmt: skip
    """Max |error| against the float64 oracle of each of ``results`` (inputs after one prefill): ``out`` over every
    row, ``ssm_state`` over the batch's live slots. The oracle runs one sequence at a time, so that its float64
    copies stay the size of one sequence."""
    import torch

    t = inputs
    starts = t["cu_seqlens"].tolist()
    n = len(starts) - 1
    ref_state = t["ssm_state"].double()
    errors = {name: {"out": 0.0, "ssm_state": 0.0} for name in results}
    for i in range(n):
        s, e = starts[i], starts[i + 1]
        ref_out = torch.zeros(e - s, *t["out"].shape[1:], dtype=torch.float64, device=t["out"].device)
        one = {
            **{name: t[name][s:e] for name in ("q", "k", "v", "g", "beta")},
            "out": ref_out,
            "ssm_state": ref_state,
            "cu_seqlens": torch.tensor([0, e - s], dtype=torch.int32, device=t["cu_seqlens"].device),
            "state_indices": t["state_indices"][i : i + 1],
            "has_initial_state": t["has_initial_state"][i : i + 1],
        }
        prefill_call(reference, one, layout)()
        for name, res in results.items():
            errors[name]["out"] = _worse(errors[name]["out"], _max_abs(res["out"][s:e], ref_out))
        del ref_out, one
    indices = t["state_indices"][:n].long()
    live = indices[indices > layout.null_slot_max]
    for name, res in results.items():
        errors[name]["ssm_state"] = _max_abs(res["ssm_state"][live], ref_state[live])
    return errors


def _ratio(slow: float | None, fast: float | None) -> float | None:
    return None if slow is None or fast is None or fast <= 0 else slow / fast


def bench_case(
    case: PrefillCase,
    *,
    ours: Callable[..., None],
    vllm: Any,
    reference: Callable[..., None],
    layout: CacheLayout,
    settings: PrefillSettings,
    device: Any,
    timer: Callable[..., dict[str, Any]] = time_calls,
) -> dict[str, Any]:
    """Errors, times and speedups of one case, as a JSON-able row. ``vllm``: a ``VllmPrefill`` (called as the
    branch; its ``function`` is FLA's ``chunk_gated_delta_rule``, its ``chunk_metadata`` vLLM's chunk indices), or None
    for caovan's side alone (``--no-vllm``: its sides, speedups and errors are then null)."""
    inputs = build_inputs(case, layout, device)
    sides = SIDES if vllm is not None else ("caovan",)
    # Made once here, as vLLM's metadata builder makes them once per step: in no timed call.
    chunk_keywords = vllm.chunk_metadata(inputs["cu_seqlens"]) if vllm is not None else {}
    if case.total_tokens > settings.max_reference_tokens:
        skipped = (
            f"{case.total_tokens} tokens > --max-reference-tokens {settings.max_reference_tokens}: "
            "the float64 oracle runs token by token"
        )
        errors: dict[str, Any] = {"caovan": None, "vllm": None, "skipped": skipped}
    else:
        results = {"caovan": own_copy(inputs), **({"vllm": own_copy(inputs)} if vllm is not None else {})}
        prefill_call(ours, results["caovan"], layout)()
        if vllm is not None:
            prefill_call(vllm, results["vllm"], layout, chunk_metadata=chunk_keywords)()
        errors = {"vllm": None, **reference_errors(inputs, results, reference, layout), "skipped": None}
        del results
    calls = {"caovan": prefill_call(ours, own_copy(inputs), layout)}
    if vllm is not None:
        calls["vllm_fla"] = fla_call(vllm.function, own_copy(inputs), chunk_keywords)
        calls["vllm_branch"] = prefill_call(vllm, own_copy(inputs), layout, chunk_metadata=chunk_keywords)
    times = timer(calls, settings, device)
    del calls, inputs
    us = {side: times[side]["us"] if side in sides else None for side in SIDES}
    return {
        "id": case.id,
        "case": case.as_dict(),
        "times_us": us,
        "repeats_us": {side: times[side]["repeats_us"] if side in sides else None for side in SIDES},
        "speedup": {
            "vs_vllm_fla": _ratio(us["vllm_fla"], us["caovan"]),
            "vs_vllm_branch": _ratio(us["vllm_branch"], us["caovan"]),
        },
        "errors": errors,
        "vllm_fla_chunk_indices": (
            None if vllm is None else "precomputed" if chunk_keywords else "made by FLA in the call"
        ),
        "error": None,
    }


def release_memory(device: Any) -> None:
    import torch

    gc.collect()
    if torch.device(device).type == "cuda":
        torch.cuda.empty_cache()


def run_cases(
    cases: Sequence[PrefillCase],
    *,
    device: Any,
    progress: Callable[[str], None] = lambda line: print(line, file=sys.stderr, flush=True),
    **kwargs: Any,
) -> list[dict[str, Any]]:
    """``bench_case`` for every case; a case that raises (out of memory, a kernel error) becomes a row with
    ``error`` set, and the memory it held is given back before the next."""
    import torch

    from caovan.bench.kernels import run_each

    def one(case: PrefillCase) -> dict[str, Any]:
        try:
            with torch.inference_mode():  # as vLLM's model runner calls its layers
                return bench_case(case, device=device, **kwargs)
        finally:
            release_memory(device)

    return run_each(cases, one, progress)
