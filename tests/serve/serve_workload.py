"""The fixed greedy workloads the serve tier's engines run (shared by the runner and the tests).

``mixed``: six prompts for an engine limited to four sequences, with unequal output lengths: the first four
start together, and each of the last two is admitted when an earlier one finishes, so its prefill lands in a
batch with speculative-decode sequences.  That is the "mixed" prefill + spec batch that caovan splits (its spec
tokens through caovan, the prefill through vLLM); a batch of only spec sequences is the plain "spec" case.

``draft-shaped``: the same six requests with every prompt exactly ``1 + num_speculative_tokens`` tokens long, the
shape vLLM takes for a uniform spec-decode batch (vLLM issues 49918 and 53051).  The first four prompts form a
batch of such prefills; each of the last two is admitted next to requests decoding with the same per-request
token count, so that batch has the uniform shape too.  Under FULL CUDA graphs those batches replay the graph
captured for spec-decode unless something keeps them out; as the batch shrinks from four requests to one, the
graphs of the smaller batches run with padded rows as well.

``long-prompts``: eight prompts of 1 to 300 tokens (one token, chunk edges 63/64/65, and three longer than the
prefill chunk the prefill test engines are given), each generating 16 tokens: caovan's GDN prefill is what runs
on them, the longer ones in chunks that carry the state from one to the next.

Token ids come from a fixed linear congruential sequence (no tokenizer in this tier) and stay below the tiny
model's vocabulary.
"""

from __future__ import annotations

from dataclasses import dataclass

#: Engine limit the workloads are shaped for (passed to the runner as ``max_num_seqs``).
MAX_NUM_SEQS = 4
#: Largest token id used, exclusive; must not exceed the tiny model's vocabulary.
TOKEN_ID_LIMIT = 2000
MIXED_PROMPT_LENGTHS = (5, 17, 33, 64, 9, 100)
#: Output lengths: prompts 1 and 3 finish early, which admits prompts 4 and 5 next to running spec decodes.
MAX_TOKENS = (48, 16, 48, 24, 48, 40)


@dataclass(frozen=True)
class Workload:
    name: str
    prompt_token_ids: tuple[tuple[int, ...], ...]
    max_tokens: tuple[int, ...] = MAX_TOKENS

    @property
    def longest_request(self) -> int:
        return max(len(p) + m for p, m in zip(self.prompt_token_ids, self.max_tokens, strict=True))


def _token_ids(seed: int, length: int) -> tuple[int, ...]:
    state, ids = seed, []
    for _ in range(length):
        state = (1103515245 * state + 12345) % (1 << 31)
        ids.append(1 + state % (TOKEN_ID_LIMIT - 1))
    return tuple(ids)


def _prompts(lengths: tuple[int, ...]) -> tuple[tuple[int, ...], ...]:
    return tuple(_token_ids(seed=1000 + i, length=n) for i, n in enumerate(lengths))


LONG_PROMPT_LENGTHS = (1, 7, 63, 64, 65, 130, 257, 300)
LONG_PROMPT_MAX_TOKENS = (16,) * len(LONG_PROMPT_LENGTHS)

#: The workload names the runner takes (``--workload``).
NAMES = ("mixed", "draft-shaped", "long-prompts")


def workload(name: str, num_speculative_tokens: int) -> Workload:
    """The named workload; ``draft-shaped`` depends on the draft length (its prompts are ``1 + k`` tokens)."""
    if name == "mixed":
        return Workload(name, _prompts(MIXED_PROMPT_LENGTHS))
    if name == "draft-shaped":
        if num_speculative_tokens < 1:
            raise ValueError("the draft-shaped workload needs speculative decoding (num_speculative_tokens >= 1)")
        return Workload(name, _prompts((1 + num_speculative_tokens,) * len(MAX_TOKENS)))
    if name == "long-prompts":
        return Workload(name, _prompts(LONG_PROMPT_LENGTHS), LONG_PROMPT_MAX_TOKENS)
    raise ValueError(f"unknown workload {name!r}: expected one of {', '.join(NAMES)}")


#: The mixed workload's prompts (the one every spec-decode check of the tier runs).
PROMPT_TOKEN_IDS = workload("mixed", 0).prompt_token_ids
