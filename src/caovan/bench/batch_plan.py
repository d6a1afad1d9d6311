"""Host-side plan of a case's batch (no torch): which token rows, cache slots and accepted counts each sequence has.

``plan_batch`` is deterministic in the case's seed; byte counts and masks read the plan, so they need no device sync.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from .case_definition import NULL_BLOCK_ID, SpecDecodeCase

#: Blocks in every case's cache (more when a case needs them): B=8 at MTP=4 uses 1 + 40.
NUM_CACHE_BLOCKS = 64


@dataclass
class SeqPlan:
    kind: str  # "real", "null" (tokens but null slots) or "padded" (zero length)
    length: int
    num_accepted: int
    slots: list[int]  # T_max state indices; NULL_BLOCK_ID = no slot
    rows: list[int] = field(default_factory=list)  # rows of mixed_qkv / a / b / out


@dataclass
class BatchPlan:
    case: SpecDecodeCase
    seqs: list[SeqPlan]
    num_state_rows: int  # N' >= N rows of state_indices / num_accepted_tokens
    num_token_rows: int  # rows of mixed_qkv / a / b / out
    num_blocks: int
    token_index: list[int] | None  # spec token i -> row (mixed batches only)

    @property
    def query_start_loc(self) -> list[int]:
        qsl = [0]
        for s in self.seqs:
            qsl.append(qsl[-1] + s.length)
        return qsl

    def state_index_rows(self) -> list[list[int]]:
        extra = [[NULL_BLOCK_ID] * self.case.max_query_len] * (self.num_state_rows - len(self.seqs))
        return [s.slots for s in self.seqs] + extra

    def accepted_rows(self) -> list[int]:
        # vLLM fills padded rows with 1 (gdn_attn.py: num_accepted_tokens[...].fill_(1)).
        return [s.num_accepted for s in self.seqs] + [1] * (self.num_state_rows - len(self.seqs))

    def rows_of(self, kind: str) -> list[int]:
        return [r for s in self.seqs if s.kind == kind for r in s.rows]


def plan_batch(case: SpecDecodeCase) -> BatchPlan:
    """Sequences, slots, accepted counts and token rows of ``case`` (deterministic in its seed)."""
    rng = random.Random(f"caovan-plan-{case.seed}")
    t_max = case.max_query_len
    kinds = ["real"] * case.num_seqs + ["null"] * case.null_seqs
    rng.shuffle(kinds)  # null sequences sit among the real ones
    kinds += ["padded"] * case.padded_seqs  # vLLM pads at the back
    seqs: list[SeqPlan] = []
    for n, kind in enumerate(kinds):
        if kind == "padded":
            length = 0
        else:
            length = rng.randint(1, t_max) if case.mixed_lengths else t_max
        if kind == "padded":
            accepted = 1
        elif case.accepted == "sweep":
            accepted = 1 + n % t_max
        else:
            accepted = rng.randint(1, t_max)
        seqs.append(SeqPlan(kind=kind, length=length, num_accepted=accepted, slots=[NULL_BLOCK_ID] * t_max))

    # One distinct cache block per (real sequence, token column); block 0 is the null block and
    # spare blocks stay unused so a stray write anywhere is caught by comparing whole caches. The
    # cache has a fixed block count (like vLLM's) unless a case needs more: vLLM's conv kernel
    # takes the number of cache lines as a constexpr, so this also spares a compile per case.
    num_real = sum(s.kind == "real" for s in seqs)
    num_blocks = max(NUM_CACHE_BLOCKS, 1 + num_real * t_max + 3)
    free_blocks = list(range(1, num_blocks))
    rng.shuffle(free_blocks)
    for s in seqs:
        if s.kind != "real":
            continue
        s.slots = [free_blocks.pop() for _ in range(t_max)]
        if case.null_write_slots:
            # A column that is neither the conv column (0) nor the initial-state column.
            choices = [t for t in range(1, t_max) if t != s.num_accepted - 1]
            if choices:
                s.slots[rng.choice(choices)] = NULL_BLOCK_ID

    num_spec_tokens = sum(s.length for s in seqs)
    if case.mixed_batch_tokens:
        total = num_spec_tokens + case.mixed_batch_tokens
        token_index = sorted(rng.sample(range(total), num_spec_tokens))
    else:
        total = num_spec_tokens
        token_index = None
    i = 0
    for s in seqs:
        spec_ids = range(i, i + s.length)
        s.rows = [token_index[j] for j in spec_ids] if token_index is not None else list(spec_ids)
        i += s.length
    num_token_rows = total + case.padded_tokens
    padded = case.padded_seqs > 0 or case.padded_tokens > 0
    # Under full CUDA graphs vLLM sizes the spec state-index table by the padded token count.
    num_state_rows = max(len(seqs), num_token_rows) if padded else len(seqs)
    return BatchPlan(case, seqs, num_state_rows, num_token_rows, num_blocks, token_index)
