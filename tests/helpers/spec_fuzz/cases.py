"""One fuzzed spec-decode batch as a record, and how it is drawn from (seed, index) under a family's layout rules.

A case is drawn from its own ``random.Random`` keyed by seed and index, so case I of seed S is the same batch
whether it runs in a run of 10,000 or alone (``--replay S:I``). It holds the batch as vLLM's GDN metadata builder
lays it out: live spec sequences of 1 .. T tokens (T = num_speculative_tokens + 1; one token: a decode with no
draft), each with 1 .. T accepted tokens from the step before (0 .. T - 1 accepted drafts plus the bonus token);
CUDA-graph padding sequences at the back (no tokens, null slots, one accepted token, as the builder fills them) and
padded token rows after the last real token; or, in a mixed batch, other requests (prefills) among them.
"""

from __future__ import annotations

import random
import zlib
from dataclasses import asdict, dataclass, fields, replace

from .rules import LayoutRules, lay_out

#: Cases listed in full in a run's record where caovan's error is above vLLM's (within the floor: not a failure) or
#: vLLM's above the tolerance; the rest are counted. Here, not in ``run``, so that merging records needs no torch.
LISTED_ABOVE_VLLM = 20

SCHEMA = "caovan-spec-fuzz-case/1"


@dataclass(frozen=True)
class FuzzCase:
    seed: int
    index: int
    num_k_heads: int
    group: int  # HV / H
    head_k_dim: int
    head_v_dim: int
    width: int
    t_max: int  # state slots per sequence: num_speculative_tokens + 1
    seq_lens: tuple[int, ...]  # tokens of each live spec sequence, 1 .. t_max
    num_accepted: tuple[int, ...]  # 1 .. t_max: the initial state is column num_accepted - 1
    null_columns: tuple[tuple[int, int], ...] = ()  # (sequence, column): a null slot, never column 0 or the initial
    padding_rows: int = 0  # CUDA-graph padding sequences after the live ones
    padded_tokens: int = 0  # token rows after the last spec token (a padded num_actual_tokens)
    others: tuple[tuple[int, int], ...] = ()  # mixed batch: (tokens, spec sequences before it) per other request
    act_dtype: str = "float16"
    conv_dtype: str = "float16"
    ssm_dtype: str = "float32"
    conv_dim_first: bool = False
    page_strided: bool = False  # caches are views into larger per-block pages
    extra_state_len: int = 0  # conv state longer than width - 2 + t_max
    has_bias: bool = False
    strided_qkv: bool = False  # mixed_qkv is a column slice of a wider projection (its rows strided)
    strided_gating: bool = False  # mixed batch only: b and a are the two halves of one projection
    gating_scale: float = 1.0  # scale of `a`: 8 reaches the softplus threshold and saturated gates
    bv: int = 16  # caovan's value block
    row_lanes: int = 32  # < 32: the state slab's rows split over this many lanes
    constant_slab_offsets: bool = False
    write_through_last: bool = False
    #: A launch entry taken as shipped ("sm75", or "device": the entry caovan picks for the GPU it runs on), the
    #: launch options above then unused; None: the options above (the interpreter's cases).
    entry: str | None = None
    # The family's, set by `rules.lay_out`:
    ssm_layout: str = "vk"
    null_slot_max: int = 0
    a_log_in_act_dtype: bool = False

    @property
    def case_id(self) -> str:
        return f"{self.seed}:{self.index}"

    @property
    def data_seed(self) -> int:
        """The tensors' seed: fixed by (seed, index), so a shrunk case keeps drawing from the same stream."""
        return zlib.crc32(f"spec-fuzz-data:{self.seed}:{self.index}".encode())

    @property
    def num_live(self) -> int:
        return len(self.seq_lens)

    @property
    def mixed(self) -> bool:
        return bool(self.others)

    def problems(self) -> list[str]:
        """What makes this not a batch vLLM could hand the spec path (the shrinker only keeps valid cases)."""
        out = []
        n, t = self.num_live, self.t_max
        if n < 1:
            out.append("no live sequence")
        if len(self.num_accepted) != n:
            out.append("num_accepted does not match seq_lens")
        if any(not 1 <= length <= t for length in self.seq_lens):
            out.append(f"a sequence length outside 1..{t}")
        if any(not 1 <= a <= t for a in self.num_accepted):
            out.append(f"an accepted count outside 1..{t}")
        for seq, col in self.null_columns:
            if not (0 <= seq < n and 1 <= col < t) or col == self.num_accepted[seq] - 1:
                out.append(f"null column {(seq, col)} is not a later write column of a live sequence")
        if self.others and (self.padding_rows or self.padded_tokens):
            out.append("a mixed batch has no CUDA-graph padding")
        if any(length < 1 or not 0 <= before <= n for length, before in self.others):
            out.append("an other request out of range")
        if self.strided_gating and not self.others:
            out.append("strided a/b outside a mixed batch")
        return out

    def to_json(self) -> dict:
        return {"schema": SCHEMA, **asdict(self)}

    @classmethod
    def from_json(cls, data: dict) -> FuzzCase:
        if data.get("schema") != SCHEMA:
            raise ValueError(f"not a {SCHEMA} record: schema {data.get('schema')!r}")
        known = {f.name for f in fields(cls)}
        unknown = set(data) - known - {"schema"}
        if unknown:
            raise ValueError(f"{SCHEMA}: unknown fields {sorted(unknown)}")

        def tuples(value):
            return tuple(tuples(v) for v in value) if isinstance(value, list) else value

        return cls(**{k: tuples(v) for k, v in data.items() if k != "schema"})


@dataclass(frozen=True)
class FuzzSpace:
    """The sizes and options cases are drawn from: tiny shapes, so that the interpreter runs one in about a second."""

    max_live_sequences: int = 4
    max_padding_rows: int = 3
    t_maxes: tuple[int, ...] = (2, 3, 4, 5)  # MTP / draft lengths 1 .. 4
    key_heads: tuple[int, ...] = (1, 2)
    groups: tuple[int, ...] = (1, 2, 3)  # the envelope's HV / H ratios
    head_k_dims: tuple[int, ...] = (16, 32)
    head_v_dims: tuple[int, ...] = (8, 16, 24, 32)
    value_blocks: tuple[int, ...] = (8, 16, 32)  # caovan's BV: 8 is the sm90 entry's, 32 the sm75 entry's
    #: Value blocks per head at most: two already run the masked tail and the second block's offsets, and the
    #: interpreter's time grows with every program.
    max_value_blocks: int = 2
    widths: tuple[int, ...] = (2, 3, 4, 4, 4, 5, 6)  # the envelope's widths, Qwen's 4 most often
    max_other_requests: int = 3
    max_other_tokens: int = 6
    mixed_fraction: float = 0.3
    activation_dtypes: tuple[str, ...] = ("float16", "bfloat16", "float32")
    conv_state_dtypes: tuple[str, ...] = ("float16", "bfloat16", "float32")
    ssm_state_dtypes: tuple[str, ...] = ("float16", "bfloat16", "float32")
    #: (activations, conv state, SSM state) drawn as one of these instead of one by one (None: one by one).
    dtype_sets: tuple[tuple[str, str, str], ...] | None = None
    #: Launch entries taken as shipped (FuzzCase.entry); empty: caovan's launch options are drawn one by one.
    entries: tuple[str, ...] = ()
    bias_fraction: float = 0.5

    @classmethod
    def real_shapes(cls) -> FuzzSpace:
        """The per-GPU shapes of the Qwen3.5 / 3.6 / Qwen3-Next GDN layers (K = V = 128, 16 key heads at TP 1 or 2,
        HV / H 1 - 3, conv width 4, no conv bias) in batches as large as a serving GPU hands the spec step, the
        dtypes vLLM serves them in, and caovan's shipped launch entries, for a run on a GPU.

        Few compiled variants on purpose: each distinct dtype set, head count, entry or layout is a Triton compile
        of caovan's kernel and of vLLM's (seconds each); a first GPU run (on an H200) that drew every option one by
        one spent most of its time compiling."""
        return cls(
            max_live_sequences=48,
            max_padding_rows=16,
            key_heads=(8, 16),
            head_k_dims=(128,),
            head_v_dims=(128,),
            max_value_blocks=16,
            widths=(4,),
            max_other_requests=4,
            max_other_tokens=256,
            # The model's dtype for activations and conv state; the SSM state in float32 (vLLM's
            # mamba_ssm_cache_dtype) or the model's; --mamba-cache-dtype float32 for both caches.
            dtype_sets=(
                ("float16", "float16", "float32"),
                ("float16", "float16", "float16"),
                ("bfloat16", "bfloat16", "float32"),
                ("bfloat16", "bfloat16", "bfloat16"),
                ("float16", "float32", "float32"),
            ),
            entries=("sm75", "device"),
            bias_fraction=0.0,
        )

    def without_bf16_products(self) -> FuzzSpace:
        """No bf16 activations or conv state: what vLLM's conv multiplies as bf16 x bf16 (the Triton 3.6 interpreter
        computes those products wrongly); a bf16 SSM state is only converted, so it stays."""
        return replace(
            self,
            activation_dtypes=tuple(d for d in self.activation_dtypes if d != "bfloat16"),
            conv_state_dtypes=tuple(d for d in self.conv_state_dtypes if d != "bfloat16"),
        )


def _draw_dtype(rng: random.Random, act: str, choices: tuple[str, ...]) -> str:
    # vLLM's cache dtypes default to the model's ("auto") and are often set to float32: half the draws take the
    # activations' dtype where it is allowed.
    return act if act in choices and rng.random() < 0.5 else rng.choice(choices)


def draw_case(rules: LayoutRules, space: FuzzSpace, seed: int, index: int) -> FuzzCase:
    """Case ``index`` of ``seed``: a batch the family's vLLM could hand its spec path, laid out as the family does."""
    if rules.refusal is not None:
        raise ValueError(f"{rules.family_id} is not served: {rules.refusal}")
    rng = random.Random(f"caovan-spec-fuzz:{seed}:{index}")
    t = rng.choice(space.t_maxes)
    n = rng.randint(1, space.max_live_sequences)
    # Most sequences carry every draft; the rest are shorter (fewer drafts proposed, or a plain decode of 1 token).
    seq_lens = tuple(t if rng.random() < 0.6 else rng.randint(1, t) for _ in range(n))
    accepted = tuple(rng.randint(1, t) for _ in range(n))
    others: tuple[tuple[int, int], ...] = ()
    padding_rows = padded_tokens = 0
    if rng.random() < space.mixed_fraction:
        picks = []
        for _ in range(rng.randint(1, space.max_other_requests)):
            # vLLM puts decodes first; a family that gathers the spec tokens' gating may also see them interleaved.
            before = rng.randint(0, n) if rules.spec_tokens_anywhere and rng.random() < 0.5 else n
            picks.append((rng.randint(1, space.max_other_tokens), before))
        others = tuple(sorted(picks, key=lambda p: p[1]))
    elif rng.random() < 0.5:
        padding_rows = rng.randint(1, space.max_padding_rows)
        padded_tokens = rng.randint(0, padding_rows * t)
    null_columns: tuple[tuple[int, int], ...] = ()
    if rules.null_write_columns:
        null_columns = tuple(
            (s, c) for s in range(n) for c in range(1, t) if c != accepted[s] - 1 and rng.random() < 0.2
        )
    # One draw where act was drawn alone, so that a space without dtype sets draws every case as before.
    dtype_set = rng.choice(space.dtype_sets) if space.dtype_sets else None
    act = dtype_set[0] if dtype_set else rng.choice(space.activation_dtypes)
    k = rng.choice(space.head_k_dims)
    bv = rng.choice(space.value_blocks)
    v = rng.choice([v for v in space.head_v_dims if -(-v // bv) <= space.max_value_blocks])
    case = FuzzCase(
        seed=seed,
        index=index,
        num_k_heads=rng.choice(space.key_heads),
        group=rng.choice(space.groups),
        head_k_dim=k,
        head_v_dim=v,
        width=rng.choice(space.widths),
        t_max=t,
        seq_lens=seq_lens,
        num_accepted=accepted,
        null_columns=null_columns,
        padding_rows=padding_rows,
        padded_tokens=padded_tokens,
        others=others,
        act_dtype=act,
        conv_dtype=dtype_set[1] if dtype_set else _draw_dtype(rng, act, space.conv_state_dtypes),
        ssm_dtype=dtype_set[2] if dtype_set else _draw_dtype(rng, act, space.ssm_state_dtypes),
        conv_dim_first=rules.conv_dim_first and rng.random() < 0.3,
        page_strided=rng.random() < 0.5,
        extra_state_len=rng.choice((0, 0, 1, 3)),
        has_bias=rng.random() < space.bias_fraction,
        strided_qkv=rng.random() < 0.3,
        # vLLM's spec branch takes a/b as they come only in a mixed batch (it gathers them, or its kernel's wrapper
        # makes them contiguous); in a pure batch the gating-first families' fused_gdn_gating reads them as
        # contiguous, and vLLM before 0.34 never hands the core strided ones.
        strided_gating=bool(others) and rng.random() < 0.5,
        gating_scale=rng.choice((1.0, 1.0, 8.0)),
        bv=bv,
        # The split rows are tested from K 32 on (tests/kernels/gdn_interpreter_cases.py).
        row_lanes=rng.choice((8, 16)) if k >= 32 and rng.random() < 0.2 else 32,
        constant_slab_offsets=rng.random() < 0.2,
        write_through_last=rng.random() < 0.2,
    )
    if space.entries:  # the shipped entry decides the launch options
        case = replace(
            case, entry=rng.choice(space.entries), bv=16, row_lanes=32, constant_slab_offsets=False,
            write_through_last=False,
        )  # fmt: skip
    return lay_out(case, rules)
