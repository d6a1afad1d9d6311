"""DynamicTP, AutoMem and Elastic-KV together, as ``caovan serve`` runs them: one rule for what vLLM is given.

1. Elastic-KV's KV-cache dtype first: the smaller it is, the smaller the TP the context fits.
2. DynamicTP and AutoMem: the tensor-parallel size must fit in what vLLM will be given on each GPU it uses, which is
   AutoMem's share of that GPU's total memory (or the user's ``--gpu-memory-utilization``); AutoMem then sets that
   share for the first TP visible GPUs, the ones vLLM's workers take. The context they size is the user's, else the
   model's own; where the model's own fits no TP (and the user fixed neither context nor TP), the TP that holds the
   longest context in vLLM's layout is taken and Elastic-KV lowers the context to it.
3. Elastic-KV's context, sequences and batched tokens in what is left for the KV cache, and the prediction of the
   KV cache vLLM will report.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from .auto_mem import auto_mem, auto_share
from .dynamic_tp import ProfileError, ProfileLine, dynamic_tp, gib
from .elastic_kv import (
    KvRoom,
    batched_tokens_line,
    context_line,
    kv_dtype_line,
    kv_room,
    num_seqs_line,
    vllm_batch_defaults,
)
from .gpus import Gpu
from .kv_layout import KvCacheLayout, KvLayoutError, hybrid_layout, kv_dtype_bytes
from .kv_prediction import AskVllm, KvPrediction, predict_kv_cache
from .memory import tp_problems, weights_per_gpu
from .model_facts import ModelFacts
from .modes import DEFAULT_MODE, MODES, ProfileMode


@dataclass(frozen=True)
class ServeRequest:
    """What the user fixed (None: left to the profiles) and what the rest of the command sets."""

    tp: int | None = None
    share: float | None = None
    kv_dtype: str | None = None
    max_model_len: int | None = None
    #: The user's ``--max-model-len -1`` / ``auto``: vLLM fits the longest itself.
    max_model_len_auto: bool = False
    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None
    block_size: int | None = None
    mamba_cache_mode: str = "none"
    #: The speculative config's tokens per step, and the attention layers its drafter adds (MTP: the model's).
    speculative_tokens: int = 0
    drafter_layers: int = 0


@dataclass(frozen=True)
class ServerSizing:
    lines: tuple[ProfileLine, ...]
    prediction: KvPrediction

    @property
    def added_args(self) -> list[str]:
        return [token for line in self.lines if line.added for token in (line.flag, line.value)]


def size_tp_and_share(
    facts: ModelFacts,
    gpus: Sequence[Gpu],
    *,
    kv_dtype: str,
    request: ServeRequest = ServeRequest(),
    mode: ProfileMode = MODES[DEFAULT_MODE],
) -> tuple[ProfileLine, ProfileLine]:
    """(DynamicTP's line, AutoMem's line) at ``facts.max_positions``; ProfileError where no TP fits it."""
    user_share = request.share

    def usable(gpu: Gpu) -> int:
        share = user_share if user_share is not None else auto_share(gpu, mode.margin_bytes, mode.max_share)
        return int(share * gpu.total_bytes)

    tp_line = dynamic_tp(
        facts,
        gpus,
        user_tp=request.tp,
        kv_dtype=kv_dtype,
        reserve=mode.reserve,
        usable=usable,
        layout_for=lambda tp: _layout(facts, tp, kv_dtype, request),
    )
    mem_line = auto_mem(
        gpus[: int(tp_line.value)], user_value=user_share, margin_bytes=mode.margin_bytes, max_share=mode.max_share
    )
    return tp_line, mem_line


def _layout(facts: ModelFacts, tp: int, kv_dtype: str, request: ServeRequest) -> KvCacheLayout:
    return hybrid_layout(
        facts,
        tp,
        kv_dtype,
        speculative_tokens=request.speculative_tokens,
        drafter_layers=request.drafter_layers,
        block_size=request.block_size,
        mamba_cache_mode=request.mamba_cache_mode,
    )


def _share(gpus: Sequence[Gpu], request: ServeRequest, mode: ProfileMode) -> float:
    tightest = min(gpus, key=lambda gpu: gpu.free_bytes)
    return request.share if request.share is not None else auto_share(tightest, mode.margin_bytes, mode.max_share)


def _longest_context_tp(
    facts: ModelFacts, gpus: Sequence[Gpu], kv_dtype: str, request: ServeRequest, mode: ProfileMode, refusal: str
) -> tuple[ProfileLine, ProfileLine]:
    """Where the model's own context fits no TP: the TP whose GPUs hold the longest context, ties to the smaller."""
    best: tuple[int, int] | None = None
    closest: tuple[int, int, KvRoom, int] | None = None  # (bytes missing, tp, room, one block and the GDN state)
    for tp in range(1, len(gpus) + 1):
        if tp_problems(facts, tp):
            continue
        room = kv_room(gpus[:tp], _share(gpus[:tp], request, mode), weights_per_gpu(facts, tp), mode.reserve.total)
        layout = _layout(facts, tp, kv_dtype, request)
        longest = layout.longest_context(room.bytes, facts.max_positions)
        smallest = layout.bytes_per_request(1)
        if longest and (best is None or longest > best[1]):
            best = (tp, longest)
        elif not longest and (closest is None or smallest - room.bytes < closest[0]):
            closest = (smallest - room.bytes, tp, room, smallest)
    if best is None:
        missing, tp, room, smallest = closest  # type: ignore[misc]  (a TP without head problems was tried)
        raise ProfileError(
            f"{refusal}; no shorter context fits either: at TP={tp}, the closest, one block and the GDN state take "
            f"{gib(smallest)}, {gib(missing)} more than the {room.describe()}"
        )
    tp, longest = best
    reasons = (
        f"no TP fits the model's {facts.max_positions} tokens ({refusal.split(' tokens: ', 1)[-1]})",
        f"TP={tp} holds the longest context, {longest} tokens (Elastic-KV)",
        f"weights {gib(weights_per_gpu(facts, tp))} per GPU ({facts.weight_source})",
    )
    tp_line = ProfileLine("DynamicTP", "--tensor-parallel-size", str(tp), kept=False, reasons=reasons)
    mem_line = auto_mem(gpus[:tp], user_value=request.share, margin_bytes=mode.margin_bytes, max_share=mode.max_share)
    return tp_line, mem_line


def size_server(
    facts: ModelFacts,
    gpus: Sequence[Gpu],
    *,
    kv_accepted: Sequence[str] | str,
    request: ServeRequest = ServeRequest(),
    mode: ProfileMode = MODES[DEFAULT_MODE],
    ask_vllm: AskVllm | None = None,
) -> ServerSizing:
    """Every profile's line and the KV prediction; ProfileError where the request cannot be served.
    ``kv_accepted``: the KV-cache dtypes vLLM takes on the GPUs' capability, or why it could not be asked;
    ``ask_vllm``: vLLM's own KV planning (:func:`caovan.profiles.vllm_kv_cache.vllm_kv_report`), None: arithmetic."""
    capability = min(gpu.capability for gpu in gpus)
    kv_line = kv_dtype_line(kv_accepted, request.kv_dtype, facts.dtype, capability)
    kv_dtype = kv_line.value
    if kv_dtype_bytes(kv_dtype, facts.dtype) is None:
        raise KvLayoutError(f"--kv-cache-dtype {kv_dtype}: its bytes per value are unknown to the profiles")
    target = request.max_model_len or facts.max_positions
    try:
        tp_line, mem_line = size_tp_and_share(
            replace(facts, max_positions=target), gpus, kv_dtype=kv_dtype, request=request, mode=mode
        )
    except ProfileError as exc:
        if request.max_model_len is not None or request.tp is not None:
            raise  # the user's own context or TP: refused, with what is missing
        tp_line, mem_line = _longest_context_tp(facts, gpus, kv_dtype, request, mode, str(exc))
    tp = int(tp_line.value)
    problems = tp_problems(facts, tp)
    if problems:  # only the user's TP can have them; vLLM refuses it at start-up
        raise ProfileError(
            f"--tensor-parallel-size {tp} (yours): vLLM refuses it for this model: {'; '.join(problems)}"
        )
    layout = _layout(facts, tp, kv_dtype, request)
    room = kv_room(gpus[:tp], float(mem_line.value), weights_per_gpu(facts, tp), mode.reserve.total)
    len_line, context = context_line(
        layout,
        room,
        model_max=facts.max_positions,
        user_value=request.max_model_len,
        user_auto=request.max_model_len_auto,
    )
    default_seqs, default_tokens = vllm_batch_defaults(gpus[0])
    num_blocks = layout.num_blocks(room.bytes)
    seqs_line, seqs = num_seqs_line(layout, num_blocks, default=default_seqs, user_value=request.max_num_seqs)
    tokens_line, _ = batched_tokens_line(
        layout, context=context, num_seqs=seqs, default=default_tokens, user_value=request.max_num_batched_tokens
    )
    prediction = predict_kv_cache(facts, layout, context, room, ask_vllm)
    return ServerSizing((kv_line, tp_line, mem_line, len_line, seqs_line, tokens_line), prediction)
