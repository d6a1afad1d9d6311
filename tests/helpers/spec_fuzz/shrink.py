"""Shrinking a failing case to the smallest batch that still fails, greedily.

Each round tries smaller variants of the current case, biggest cut first (padding, other requests, whole sequences,
null columns, then shorter sequences, fewer accepted tokens, a shorter T, fewer and smaller heads, then the kernel
and layout options back to their plainest), and keeps the first one that still fails; it stops when no variant
fails or the tries run out. Every variant is a batch vLLM could hand the spec path (``FuzzCase.problems``) and keeps
the case's seed and index, so its tensors come from the same stream.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import replace

from .cases import FuzzCase

#: Enough for a case of 5 sequences at T 5 to reach one sequence of one token; a real failure is shrunk in well
#: under this many runs (each shrink run costs what one case costs).
DEFAULT_MAX_TRIES = 150


def _drop_sequence(case: FuzzCase, seq: int) -> FuzzCase:
    return replace(
        case,
        seq_lens=case.seq_lens[:seq] + case.seq_lens[seq + 1 :],
        num_accepted=case.num_accepted[:seq] + case.num_accepted[seq + 1 :],
        null_columns=tuple((s - (s > seq), c) for s, c in case.null_columns if s != seq),
        others=tuple((length, before - (before > seq)) for length, before in case.others),
    )


def _shorter_t(case: FuzzCase) -> FuzzCase:
    t = case.t_max - 1
    accepted = tuple(min(a, t) for a in case.num_accepted)
    return replace(
        case,
        t_max=t,
        seq_lens=tuple(min(length, t) for length in case.seq_lens),
        num_accepted=accepted,
        null_columns=tuple((s, c) for s, c in case.null_columns if c < t and c != accepted[s] - 1),
        padded_tokens=min(case.padded_tokens, case.padding_rows * t),
    )


def _with(case: FuzzCase, name: str, index: int, value: int) -> FuzzCase:
    values = list(getattr(case, name))
    values[index] = value
    return replace(case, **{name: tuple(values)})


def smaller_cases(case: FuzzCase) -> Iterator[FuzzCase]:
    """Valid variants of ``case`` that are smaller or plainer, biggest cut first."""
    if case.padding_rows or case.padded_tokens:
        yield replace(case, padding_rows=0, padded_tokens=0)
    if case.padded_tokens:
        yield replace(case, padded_tokens=0)
    if case.others:
        yield replace(case, others=(), strided_gating=False)
        for k in range(len(case.others)):
            rest = case.others[:k] + case.others[k + 1 :]
            yield replace(case, others=rest, strided_gating=case.strided_gating and bool(rest))
    for seq in range(case.num_live - 1, -1, -1):
        if case.num_live > 1:
            yield _drop_sequence(case, seq)
    if case.null_columns:
        yield replace(case, null_columns=())
        for k in range(len(case.null_columns)):
            yield replace(case, null_columns=case.null_columns[:k] + case.null_columns[k + 1 :])
    if case.padding_rows > 1:
        yield replace(case, padding_rows=case.padding_rows - 1, padded_tokens=0)
    for seq, length in enumerate(case.seq_lens):
        if length > 1:
            yield _with(case, "seq_lens", seq, 1)
            yield _with(case, "seq_lens", seq, length - 1)
    for seq, accepted in enumerate(case.num_accepted):
        for smaller in (1, accepted - 1) if accepted > 2 else (1,) if accepted > 1 else ():
            cut = _with(case, "num_accepted", seq, smaller)
            yield replace(cut, null_columns=tuple((s, c) for s, c in cut.null_columns if (s, c) != (seq, smaller - 1)))
    for k, (length, before) in enumerate(case.others):
        if length > 1:
            yield _with_other(case, k, (1, before))
    if case.t_max > 2:
        yield _shorter_t(case)
    plain = {
        "num_k_heads": 1,
        "group": 1,
        "head_k_dim": 16,
        "head_v_dim": 8,
        "extra_state_len": 0,
        "page_strided": False,
        "conv_dim_first": False,
        "has_bias": False,
        "strided_qkv": False,
        "strided_gating": False,
        "gating_scale": 1.0,
        "row_lanes": 32,
        "constant_slab_offsets": False,
        "write_through_last": False,
    }
    for name, value in plain.items():
        if getattr(case, name) != value:
            yield replace(case, **{name: value})
    if case.group == 3:
        yield replace(case, group=2)


def _with_other(case: FuzzCase, k: int, other: tuple[int, int]) -> FuzzCase:
    return replace(case, others=case.others[:k] + (other,) + case.others[k + 1 :])


def shrink(
    case: FuzzCase, still_fails: Callable[[FuzzCase], bool], max_tries: int = DEFAULT_MAX_TRIES
) -> tuple[FuzzCase, int]:
    """(the smallest failing case found, variants tried). ``still_fails`` runs one case and says whether it fails the
    way the original did."""
    current, tries = case, 0
    while tries < max_tries:
        for candidate in smaller_cases(current):
            if candidate.problems():
                continue
            tries += 1
            if still_fails(candidate):
                current = candidate
                break
            if tries >= max_tries:
                break
        else:
            break  # no variant fails: current is as small as this search gets
    return current, tries
