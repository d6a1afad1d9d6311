"""The fixed greedy workload every engine of the serve tier runs (shared by the runner and the test).

Six prompts for an engine limited to four sequences, with unequal output lengths: the first four start
together, and each of the last two is admitted when an earlier one finishes, so its prefill lands in a batch
with speculative-decode sequences.  That is the "mixed" prefill + spec batch that caovan splits (its spec
tokens through caovan, the prefill through vLLM); a batch of only spec sequences is the plain "spec" case.

Token ids come from a fixed linear congruential sequence (no tokenizer in this tier) and stay below the tiny
model's vocabulary.
"""

from __future__ import annotations

#: Engine limit the workload is shaped for (passed to the runner as ``max_num_seqs``).
MAX_NUM_SEQS = 4
#: Largest token id used, exclusive; must not exceed the tiny model's vocabulary.
TOKEN_ID_LIMIT = 2000
PROMPT_LENGTHS = (5, 17, 33, 64, 9, 100)
#: Output lengths: prompts 1 and 3 finish early, which admits prompts 4 and 5 next to running spec decodes.
MAX_TOKENS = (48, 16, 48, 24, 48, 40)


def _token_ids(seed: int, length: int) -> tuple[int, ...]:
    state, ids = seed, []
    for _ in range(length):
        state = (1103515245 * state + 12345) % (1 << 31)
        ids.append(1 + state % (TOKEN_ID_LIMIT - 1))
    return tuple(ids)


PROMPT_TOKEN_IDS: tuple[tuple[int, ...], ...] = tuple(
    _token_ids(seed=1000 + i, length=n) for i, n in enumerate(PROMPT_LENGTHS)
)
