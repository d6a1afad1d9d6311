"""Comparing two greedy runs of the same prompts: token agreement, and whether each disagreement is rounding.

Greedy decoding picks the arg-max token.  Two correct implementations that round differently (caovan's fused
kernels against vLLM's split ones, in fp16/bf16) produce slightly different logits, and where the two best
tokens are nearly tied the pick can flip.  From that position on the two runs decode different contexts, so
later positions are no longer comparable.  This module therefore measures:

* per sequence, the first divergence and the positions before it (shared context);
* the overall position-by-position agreement (reported; after a divergence it compares different contexts);
* per position of shared context, the difference between the runs' log-probabilities of the same tokens;
* per divergence, whether it is a near tie: both contested tokens are in both runs' top-2 and their
  log-probabilities agree across the runs within the tolerance, i.e. a rounding-size change of the logits
  explains the flip.  A divergence that is not a near tie means the runs computed different maths.

Pure Python (no vLLM, no torch): the serve test and its unit test share it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any


@dataclass(frozen=True)
class Step:
    """One generated position: the picked token and the run's best tokens with their log-probabilities."""

    token: int
    #: ``(token id, logprob)`` pairs, best first (the runner records the top 2); empty when not recorded.
    top: tuple[tuple[int, float], ...] = ()

    def logprob_of(self, token: int) -> float | None:
        for tok, logprob in self.top:
            if tok == token:
                return logprob
        return None


def steps_from_record(token_ids: Sequence[int], top: Sequence[Sequence[Sequence[Any]]] | None) -> list[Step]:
    """Build steps from the runner's JSON (``token_ids`` and per-position ``[[id, logprob], ...]`` lists)."""
    if top is not None and len(top) != len(token_ids):
        raise ValueError(f"runner record: {len(token_ids)} token ids but {len(top)} top-logprob entries")
    steps = []
    for i, token in enumerate(token_ids):
        pairs = () if top is None else tuple((int(t), float(lp)) for t, lp in top[i])
        steps.append(Step(int(token), pairs))
    return steps


@dataclass(frozen=True)
class Divergence:
    position: int
    candidate_token: int | None  # None: the candidate sequence ended here
    reference_token: int | None
    #: |logprob difference| between the runs for each contested token (None: not in a run's recorded top).
    candidate_token_delta: float | None
    reference_token_delta: float | None
    near_tie: bool


@dataclass(frozen=True)
class SequenceAgreement:
    index: int
    positions: int  # max of the two lengths
    matching_positions: int  # same token at the same position, anywhere in the sequence
    matching_prefix: int  # positions before the first divergence
    divergence: Divergence | None
    #: Largest |logprob difference| of the picked token over the shared-context positions (None: no logprobs).
    max_logprob_delta: float | None
    max_logprob_delta_position: int | None


@dataclass(frozen=True)
class Agreement:
    sequences: tuple[SequenceAgreement, ...]
    logprob_tolerance: float
    min_comparable_fraction: float

    @property
    def total_positions(self) -> int:
        return sum(s.positions for s in self.sequences)

    @property
    def positional_fraction(self) -> float:
        return sum(s.matching_positions for s in self.sequences) / self.total_positions

    @property
    def prefix_fraction(self) -> float:
        return sum(s.matching_prefix for s in self.sequences) / self.total_positions

    @property
    def divergences(self) -> list[tuple[int, Divergence]]:
        return [(s.index, s.divergence) for s in self.sequences if s.divergence is not None]

    def problems(self) -> list[str]:
        """Why the runs do not agree up to rounding; empty when they do."""
        found = []
        for seq in self.sequences:
            if seq.max_logprob_delta is not None and seq.max_logprob_delta > self.logprob_tolerance:
                found.append(
                    f"sequence {seq.index} position {seq.max_logprob_delta_position}: same context, same token, "
                    f"but the logprobs differ by {seq.max_logprob_delta:.4g} > {self.logprob_tolerance:g}"
                )
            div = seq.divergence
            if div is not None and not div.near_tie:
                found.append(
                    f"sequence {seq.index} position {div.position}: candidate picked {div.candidate_token}, "
                    f"reference {div.reference_token}, and this is not a near tie "
                    f"(logprob deltas {_fmt(div.candidate_token_delta)} / {_fmt(div.reference_token_delta)}, "
                    f"tolerance {self.logprob_tolerance:g}; None = token not in that run's top 2)"
                )
        if self.prefix_fraction < self.min_comparable_fraction:
            found.append(
                f"only {self.prefix_fraction:.1%} of positions precede the first divergence of their sequence "
                f"(need {self.min_comparable_fraction:.0%} to judge)"
            )
        return found

    def report(self) -> str:
        lines = [
            f"greedy agreement over {self.total_positions} positions in {len(self.sequences)} sequences: "
            f"{self.prefix_fraction:.2%} before the first divergence, {self.positional_fraction:.2%} position by "
            f"position overall",
        ]
        for index, div in self.divergences:
            kind = "near tie (rounding)" if div.near_tie else "NOT a near tie"
            lines.append(
                f"  sequence {index}: first divergence at position {div.position}: candidate {div.candidate_token} "
                f"vs reference {div.reference_token}, logprob deltas {_fmt(div.candidate_token_delta)} / "
                f"{_fmt(div.reference_token_delta)}: {kind}"
            )
        deltas = [s.max_logprob_delta for s in self.sequences if s.max_logprob_delta is not None]
        if deltas:
            lines.append(
                f"  largest logprob difference on shared context: {max(deltas):.4g} "
                f"(tolerance {self.logprob_tolerance:g})"
            )
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        return {
            "total_positions": self.total_positions,
            "prefix_fraction": self.prefix_fraction,
            "positional_fraction": self.positional_fraction,
            "logprob_tolerance": self.logprob_tolerance,
            "min_comparable_fraction": self.min_comparable_fraction,
            "sequences": [asdict(s) for s in self.sequences],
            "problems": self.problems(),
        }


def _fmt(value: float | None) -> str:
    return "None" if value is None else f"{value:.4g}"


def _delta(a: Step, b: Step, token: int) -> float | None:
    la, lb = a.logprob_of(token), b.logprob_of(token)
    return None if la is None or lb is None else abs(la - lb)


def _check_run(name: str, run: Sequence[Sequence[Step]]) -> None:
    for i, seq in enumerate(run):
        for t, step in enumerate(seq):
            if not isinstance(step, Step):
                raise ValueError(f"{name}[{i}][{t}] must be a Step, got {type(step).__name__}")
            if isinstance(step.token, bool) or not isinstance(step.token, int):
                raise ValueError(f"{name}[{i}][{t}].token must be an int, got {step.token!r}")
            for pair in step.top:
                if len(pair) != 2 or not math.isfinite(pair[1]):
                    raise ValueError(f"{name}[{i}][{t}].top must hold (token, finite logprob) pairs, got {pair!r}")


def _compare_sequence(index: int, cand: Sequence[Step], ref: Sequence[Step], tol: float) -> SequenceAgreement:
    positions = max(len(cand), len(ref))
    matching = sum(1 for c, r in zip(cand, ref, strict=False) if c.token == r.token)
    prefix = 0
    while prefix < min(len(cand), len(ref)) and cand[prefix].token == ref[prefix].token:
        prefix += 1
    worst, worst_at = None, None
    for t in range(prefix):
        delta = _delta(cand[t], ref[t], ref[t].token)
        if delta is not None and (worst is None or delta > worst):
            worst, worst_at = delta, t
    divergence = None
    if prefix < positions:
        c = cand[prefix] if prefix < len(cand) else None
        r = ref[prefix] if prefix < len(ref) else None
        c_delta = r_delta = None
        if c is not None and r is not None:
            c_delta, r_delta = _delta(c, r, c.token), _delta(c, r, r.token)
        near_tie = c_delta is not None and r_delta is not None and c_delta <= tol and r_delta <= tol
        divergence = Divergence(
            position=prefix,
            candidate_token=None if c is None else c.token,
            reference_token=None if r is None else r.token,
            candidate_token_delta=c_delta,
            reference_token_delta=r_delta,
            near_tie=near_tie,
        )
    return SequenceAgreement(index, positions, matching, prefix, divergence, worst, worst_at)


def compare_greedy_runs(
    candidate: Sequence[Sequence[Step]],
    reference: Sequence[Sequence[Step]],
    *,
    logprob_tolerance: float,
    min_comparable_fraction: float = 0.5,
) -> Agreement:
    """Compare ``candidate`` (e.g. caovan on) against ``reference`` (vLLM's kernels), sequence by sequence."""
    if len(candidate) != len(reference):
        raise ValueError(f"candidate has {len(candidate)} sequences but reference has {len(reference)}")
    if not candidate:
        raise ValueError("nothing to compare: no sequences")
    if not (logprob_tolerance >= 0 and math.isfinite(logprob_tolerance)):
        raise ValueError(f"logprob_tolerance must be a finite number >= 0, got {logprob_tolerance!r}")
    if not 0 <= min_comparable_fraction <= 1:
        raise ValueError(f"min_comparable_fraction must be in [0, 1], got {min_comparable_fraction!r}")
    _check_run("candidate", candidate)
    _check_run("reference", reference)
    sequences = tuple(
        _compare_sequence(i, c, r, logprob_tolerance) for i, (c, r) in enumerate(zip(candidate, reference, strict=True))
    )
    if sum(s.positions for s in sequences) == 0:
        raise ValueError("nothing to compare: every sequence is empty")
    return Agreement(sequences, logprob_tolerance, min_comparable_fraction)


def runs_from_records(records: Sequence[Mapping[str, Any]]) -> list[list[Step]]:
    """The runner's ``sequences`` list (ordered by prompt) as steps."""
    return [steps_from_record(rec["token_ids"], rec.get("top_logprobs")) for rec in records]
