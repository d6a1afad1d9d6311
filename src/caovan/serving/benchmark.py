"""The logic of ``caovan benchmark`` that needs no server: prompts, statistics, the record, comparisons.

- Prompts are deterministic: words picked by SHA-256 from a fixed list, keyed by load, phase and request number, so
  two runs with the same settings send the same prompts; the record keeps the SHA-256 of the whole prompt set.
  Every request of a run gets its own prompt (each starts with its own tag), so vLLM's prefix cache never serves a
  repeat from an earlier one: prefill-heavy really prefills.
- Loads (after the KV-cache tutorial Turbo3 users know): ``decode-heavy`` (a tiny prompt, ``--max-tokens`` out),
  ``prefill-heavy`` (~2000 words in, 1 token out), ``mixed`` (chat-like prompts of 50 to 800 words,
  ``--max-tokens`` out). They always run in that order (:data:`LOADS`), whatever order ``--load`` names them in,
  so two runs of the same loads send the same requests in the same order.
- Per load and repeat: counts, error rate, wall time, output tokens/s, latency mean/p50/p95, time to first token
  (TTFT) p50/p95, time per output token (TPOT: per request, (latency - TTFT) / (completion tokens - 1), as
  ``vllm bench serve`` computes it; not vLLM's ITL, the gaps between stream chunks) p50/p95; percentiles by
  linear interpolation between closest ranks (numpy's default). Over the repeats: the median of the repeats' values
  with their min and max, so a single peak never decides.
- ``--compare`` refuses two records whose settings differ (Turbo3's rule: same model, flags, prompts and output
  length; the loads in any order) and only warns when the servers' vLLM versions differ.
"""

from __future__ import annotations

import hashlib
import json
import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from caovan.serving.protocol import Completion

#: Bump when the record's layout changes: --compare reads records of this schema only.
#: 2: ``itl_p50_s``/``itl_p95_s`` renamed ``tpot_p50_s``/``tpot_p95_s`` (what they always were: vLLM's TPOT).
SCHEMA = "caovan-benchmark/2"

#: Bump when the prompts change: two records with different versions never compare (their sha256 differ too).
PROMPT_SET_VERSION = 1

PREFILL_WORDS = 2000
MIXED_WORDS = (50, 100, 200, 300, 500, 800)
#: The loads, in the order a run sends them.
LOADS = {
    "decode-heavy": "a tiny prompt, --max-tokens tokens out",
    "prefill-heavy": f"a long prompt (~{PREFILL_WORDS} words), 1 token out",
    "mixed": f"chat-like prompt lengths ({min(MIXED_WORDS)} to {max(MIXED_WORDS)} words), --max-tokens tokens out",
}

PERCENTILE_METHOD = "linear interpolation between closest ranks (numpy's default 'linear')"

#: How many error messages a repeat keeps (the count of errors is always complete).
KEPT_ERRORS = 5

#: Settings two records must share to be compared, in the order differences are reported.
COMPARED_SETTINGS = ("model", "loads", "max_tokens", "requests", "concurrency", "repeats", "warmup_requests")

#: Per-repeat values summarised over the repeats (median, min, max).
SUMMARY_METRICS = (
    "output_tokens_per_s",
    "error_rate",
    "latency_mean_s",
    "latency_p50_s",
    "latency_p95_s",
    "ttft_p50_s",
    "ttft_p95_s",
    "tpot_p50_s",
    "tpot_p95_s",
)

#: What --compare shows: (label, summary metric, scale for display, True when higher is better).
COMPARE_METRICS = (
    ("output tok/s", "output_tokens_per_s", 1.0, True),
    ("latency mean (s)", "latency_mean_s", 1.0, False),
    ("latency p50 (s)", "latency_p50_s", 1.0, False),
    ("latency p95 (s)", "latency_p95_s", 1.0, False),
    ("TTFT p50 (ms)", "ttft_p50_s", 1000.0, False),
    ("TTFT p95 (ms)", "ttft_p95_s", 1000.0, False),
    ("TPOT p50 (ms)", "tpot_p50_s", 1000.0, False),
    ("TPOT p95 (ms)", "tpot_p95_s", 1000.0, False),
    ("error rate", "error_rate", 1.0, False),
)

# fmt: off
WORDS = (
    "river", "mountain", "garden", "window", "market", "teacher", "engine", "harbor", "winter", "summer",
    "letter", "bridge", "forest", "kitchen", "island", "village", "station", "library", "planet", "ocean",
    "candle", "mirror", "ladder", "pocket", "basket", "blanket", "button", "carpet", "castle", "circle",
    "cloud", "coffee", "copper", "cotton", "desert", "dinner", "doctor", "dragon", "farmer", "feather",
    "finger", "flower", "friend", "future", "glass", "golden", "hammer", "helmet", "honey", "hunter",
    "jacket", "jungle", "kettle", "lantern", "lemon", "lizard", "machine", "marble", "meadow", "melody",
    "monkey", "morning", "needle", "number", "orange", "paper", "pencil", "pepper", "picture", "pillow",
    "pirate", "harvest", "poem", "puzzle", "rabbit", "rocket", "saddle", "sailor", "season", "secret",
    "shadow", "silver", "singer", "sister", "spider", "spring", "stone", "story", "street", "sugar",
    "table", "thunder", "ticket", "tiger", "timber", "tower", "travel", "valley", "violin", "wagon",
    "walks", "carries", "builds", "finds", "paints", "opens", "watches", "follows", "remembers", "counts",
    "quietly", "slowly", "bright", "heavy", "ancient", "narrow", "gentle", "distant", "hidden", "simple",
    "under", "behind", "across", "toward", "beside", "through", "after", "before", "near", "around",
    "the", "a", "and", "of", "with", "from", "every", "each", "another", "their",
)
# fmt: on
NOUNS = WORDS[:100]


class RecordError(Exception):
    """A benchmark record that cannot be used; the message names the file."""


# --- prompts ---------------------------------------------------------------------------------------------------


def words(key: str, count: int, pool: Sequence[str] = WORDS) -> list[str]:
    """``count`` words picked from ``pool`` by SHA-256 of ``key`` (the same on every Python and platform)."""
    picked: list[str] = []
    block = 0
    while len(picked) < count:
        digest = hashlib.sha256(f"{key}#{block}".encode()).digest()
        picked.extend(pool[int.from_bytes(digest[i : i + 2], "big") % len(pool)] for i in range(0, 32, 2))
        block += 1
    return picked[:count]


def _lines(picked: list[str], per_line: int = 20) -> str:
    return "\n".join(" ".join(picked[i : i + per_line]) for i in range(0, len(picked), per_line))


def prompt(load: str, phase: str, index: int) -> str:
    """The prompt of request ``index`` of ``phase`` (``warmup``, ``repeat-1``, …) of ``load``."""
    tag = f"[{load} {phase} {index + 1}]"
    key = f"{load}/{phase}/{index}"
    if load == "decode-heavy":
        first, second = words(key, 2, NOUNS)
        return f"{tag} Write a long story about the {first} and the {second}."
    if load == "prefill-heavy":
        body = _lines(words(key, PREFILL_WORDS))
        return f"{tag} Read these notes, then answer with one word: which word comes first?\n\n{body}"
    if load == "mixed":
        body = _lines(words(key, MIXED_WORDS[index % len(MIXED_WORDS)]))
        return f"{tag} Here are my notes:\n\n{body}\n\nContinue them in your own words, in detail."
    raise ValueError(f"unknown load {load!r}")


def output_tokens(load: str, max_tokens: int) -> int:
    """Tokens a request of ``load`` asks for: prefill-heavy asks for 1, the others for ``max_tokens``."""
    return 1 if load == "prefill-heavy" else max_tokens


@dataclass(frozen=True)
class Planned:
    load: str
    phase: str
    index: int
    prompt: str
    max_tokens: int


def phases(repeats: int, warmup_requests: int) -> list[str]:
    return (["warmup"] if warmup_requests else []) + [f"repeat-{r + 1}" for r in range(repeats)]


def plan(
    loads: Sequence[str], *, max_tokens: int, requests: int, repeats: int, warmup_requests: int
) -> dict[str, dict[str, list[Planned]]]:
    """Every request a run sends: load → phase → requests, in sending order."""
    return {
        load: {
            phase: [
                Planned(load, phase, i, prompt(load, phase, i), output_tokens(load, max_tokens))
                for i in range(warmup_requests if phase == "warmup" else requests)
            ]
            for phase in phases(repeats, warmup_requests)
        }
        for load in loads
    }


def in_run_order(loads: Sequence[str]) -> list[str]:
    """``loads`` in the order a run sends them (that of :data:`LOADS`), each once."""
    return [load for load in LOADS if load in loads]


def longest_prompts(planned: dict[str, dict[str, list[Planned]]]) -> dict[str, Planned]:
    """Per load, its request with the longest prompt in characters: a load's prompts are words of one list, so the
    longest in characters is (about) the longest in tokens, found without a tokenizer."""
    return {
        load: max((p for requests in by_phase.values() for p in requests), key=lambda p: len(p.prompt))
        for load, by_phase in planned.items()
    }


def prompt_set_sha256(planned: dict[str, dict[str, list[Planned]]]) -> str:
    """SHA-256 of every planned request (load, phase, number, output tokens, prompt), in the plan's order."""
    items = [
        [p.load, p.phase, p.index, p.max_tokens, p.prompt]
        for by_phase in planned.values()
        for requests in by_phase.values()
        for p in requests
    ]
    return hashlib.sha256(json.dumps(items, ensure_ascii=False).encode("utf-8")).hexdigest()


# --- statistics --------------------------------------------------------------------------------------------------


def percentile(values: Sequence[float], q: float) -> float | None:
    """The ``q``-th percentile (0–100) by linear interpolation between closest ranks; ``None`` for no values.

    Of ``[1, 2, 3, 4]``: p50 = 2.5, p95 = 3.85 (rank 0.95 * 3 = 2.85 lies between 3 and 4).
    """
    if not values:
        return None
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100.0
    low = math.floor(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def time_per_output_token(completion: Completion) -> float | None:
    """TPOT, as ``vllm bench serve`` computes it: (latency - TTFT) / (completion tokens - 1), the request's mean
    time per token after the first; ``None`` for a one-token request."""
    if completion.ttft_s is None or completion.completion_tokens < 2:
        return None
    return (completion.latency_s - completion.ttft_s) / (completion.completion_tokens - 1)


def repeat_stats(outcomes: Sequence[Completion | Exception], wall_s: float) -> dict[str, Any]:
    """One load's one repeat (or its warmup): the requests' outcomes in sending order and the wall time."""
    ok = [o for o in outcomes if isinstance(o, Completion)]
    errors = [str(o) for o in outcomes if not isinstance(o, Completion)]
    latencies = [c.latency_s for c in ok]
    ttfts = [c.ttft_s for c in ok if c.ttft_s is not None]
    tpots = [tpot for tpot in map(time_per_output_token, ok) if tpot is not None]
    out_tokens = sum(c.completion_tokens for c in ok)
    prompt_counts = [c.prompt_tokens for c in ok]
    return {
        "requests": len(outcomes),
        "ok": len(ok),
        "errors": len(errors),
        "error_rate": len(errors) / len(outcomes) if outcomes else 0.0,
        "first_errors": errors[:KEPT_ERRORS],
        "wall_s": wall_s,
        "output_tokens": out_tokens,
        "prompt_tokens": None if None in prompt_counts else sum(prompt_counts),
        "output_tokens_per_s": out_tokens / wall_s if ok and wall_s > 0 else None,
        "latency_mean_s": statistics.fmean(latencies) if latencies else None,
        "latency_p50_s": percentile(latencies, 50),
        "latency_p95_s": percentile(latencies, 95),
        "ttft_p50_s": percentile(ttfts, 50),
        "ttft_p95_s": percentile(ttfts, 95),
        "tpot_p50_s": percentile(tpots, 50),
        "tpot_p95_s": percentile(tpots, 95),
        "per_request": [
            {"error": str(o)}
            if not isinstance(o, Completion)
            else {
                "ttft_s": o.ttft_s,
                "latency_s": o.latency_s,
                "prompt_tokens": o.prompt_tokens,
                "completion_tokens": o.completion_tokens,
            }
            for o in outcomes
        ],
    }


def summarize(repeats: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Over the repeats: each metric's median with min and max (``repeats``: how many had a value), and totals."""
    summary: dict[str, Any] = {}
    for metric in SUMMARY_METRICS:
        values = [r[metric] for r in repeats if r.get(metric) is not None]
        summary[metric] = {
            "median": statistics.median(values) if values else None,
            "min": min(values) if values else None,
            "max": max(values) if values else None,
            "repeats": len(values),
        }
    requests = sum(r["requests"] for r in repeats)
    errors = sum(r["errors"] for r in repeats)
    summary["requests"] = requests
    summary["errors"] = errors
    return summary


# --- records and comparison ----------------------------------------------------------------------------------------


def validate_record(data: Any, shown: str) -> dict[str, Any]:
    """``data`` if it is a benchmark record this caovan can compare; :class:`RecordError` naming ``shown`` else."""
    if not isinstance(data, dict) or "schema" not in data:
        raise RecordError(f'{shown}: not a caovan benchmark record (no "schema": "{SCHEMA}")')
    if data["schema"] != SCHEMA:
        raise RecordError(
            f"{shown}: a record of schema {data['schema']!r}; this caovan compares {SCHEMA!r} records only (the "
            "layouts differ): run that benchmark again with this caovan"
        )
    settings = data.get("settings")
    if not isinstance(settings, dict):
        raise RecordError(f'{shown}: no "settings" object')
    for key in (*COMPARED_SETTINGS, "prompt_set"):
        if key not in settings:
            raise RecordError(f"{shown}: settings lack {key!r}")
    if not isinstance(settings["loads"], list) or not isinstance(settings["prompt_set"], dict):
        raise RecordError(f"{shown}: settings.loads is not a list or settings.prompt_set not an object")
    results = data.get("results")
    if not isinstance(results, dict):
        raise RecordError(f'{shown}: no "results" object')
    for load in settings["loads"]:
        summary = results.get(load, {}).get("summary") if isinstance(results.get(load), dict) else None
        if not isinstance(summary, dict):
            raise RecordError(f"{shown}: no results.{load}.summary (the settings name load {load!r})")
        for metric in SUMMARY_METRICS:
            entry = summary.get(metric)
            if not isinstance(entry, dict) or not all(
                key in entry and _is_number_or_none(entry[key]) for key in ("median", "min", "max")
            ):
                raise RecordError(
                    f'{shown}: results.{load}.summary.{metric} is not {{"median": number, "min": number, '
                    '"max": number, ...}'
                )
    return data


def _is_number_or_none(value: Any) -> bool:
    return value is None or (isinstance(value, (int, float)) and not isinstance(value, bool))


def _same_loads(first: list[Any], second: list[Any]) -> bool:
    # the order is not compared: runs go in LOADS' order, older records kept the order --load gave
    return sorted(map(repr, first)) == sorted(map(repr, second))


def run_order_sha256(settings: dict[str, Any]) -> Any:
    """A record's prompt-set sha256 as a run of its loads in the order of :data:`LOADS` has it.

    Older caovans sent (and hashed) the loads in the order ``--load`` gave. Such a record's plan is built again from
    its settings: when it hashes to the record's sha256, the record sent this caovan's prompts, and the same plan in
    run order gives the sha256 to compare. Otherwise the stored sha256, which then differs from a current run's.
    """
    stored = settings["prompt_set"].get("sha256")
    loads = settings["loads"]
    if not all(isinstance(load, str) and load in LOADS for load in loads) or loads == in_run_order(loads):
        return stored
    try:
        planned = plan(
            loads,
            max_tokens=settings["max_tokens"],
            requests=settings["requests"],
            repeats=settings["repeats"],
            warmup_requests=settings["warmup_requests"],
        )
    except (TypeError, ValueError):  # settings no run of this caovan writes
        return stored
    if prompt_set_sha256(planned) != stored:
        return stored
    return prompt_set_sha256({load: planned[load] for load in in_run_order(loads)})


def settings_differences(baseline: dict[str, Any], current: dict[str, Any], *, with_model: bool = True) -> list[str]:
    """What differs between two records' settings, one phrase each (``baseline`` first); the loads in any order."""
    keys = [k for k in COMPARED_SETTINGS if with_model or k != "model"]
    differences = [
        f"{k} {baseline[k]!r} vs {current[k]!r}"
        for k in keys
        if not (_same_loads(baseline[k], current[k]) if k == "loads" else baseline[k] == current[k])
    ]
    if differences:
        return differences
    base_sha, sha = run_order_sha256(baseline), run_order_sha256(current)
    if base_sha != sha:
        base_version, version = baseline["prompt_set"].get("version"), current["prompt_set"].get("version")
        differences.append(
            f"prompt set sha256 {str(base_sha)[:12]}… (prompt set version {base_version}) vs {str(sha)[:12]}… "
            f"(version {version})"
        )
    return differences


def _shown(value: float | None, scale: float) -> str:
    if value is None:
        return "-"
    scaled = value * scale
    return f"{scaled:.4f}" if abs(scaled) < 1 else f"{scaled:.2f}" if abs(scaled) < 1000 else f"{scaled:.0f}"


WITHIN_SPREAD = "within spread"


def _ranges_overlap(first: dict[str, Any], second: dict[str, Any]) -> bool:
    """Whether two summary entries' min-max ranges over the repeats overlap (``False`` when one has no range)."""
    lows, highs = (first.get("min"), second.get("min")), (first.get("max"), second.get("max"))
    if None in lows or None in highs:
        return False
    return lows[0] <= highs[1] and lows[1] <= highs[0]


def compare_rows(baseline: dict[str, Any], current: dict[str, Any], this_name: str = "this run") -> list[list[str]]:
    """Rows of load, metric, baseline median, this run's median, ratio (this / baseline), which is better
    (``"baseline"``, ``this_name``, ``"same"``; ``"within spread"`` when the medians differ but the two runs'
    min-max ranges over the repeats overlap, a difference the repeats themselves show; ``"-"`` when a value is
    missing)."""
    rows = []
    for load in current["settings"]["loads"]:
        base_summary = baseline["results"][load]["summary"]
        summary = current["results"][load]["summary"]
        for label, metric, scale, higher_better in COMPARE_METRICS:
            before, after = base_summary[metric]["median"], summary[metric]["median"]
            ratio, better = "-", "-"
            if before is not None and after is not None:
                if before != 0:
                    ratio = f"{after / before:.3f}"
                if after == before:
                    better = "same"
                elif _ranges_overlap(base_summary[metric], summary[metric]):
                    better = WITHIN_SPREAD
                else:
                    better = this_name if (after > before) == higher_better else "baseline"
            rows.append([load, label, _shown(before, scale), _shown(after, scale), ratio, better])
    return rows
