"""The KV cache vLLM will report at start-up (``GPU KV cache size: N tokens``), predicted from the profiles' layout.

vLLM's own planning functions are asked where they can be (:func:`caovan.profiles.vllm_kv_cache.vllm_kv_report`);
otherwise :mod:`caovan.profiles.kv_layout`'s arithmetic of the same code gives the figures, and the line says why.
Both rest on the profiles' estimate of the memory vLLM leaves for the KV cache (:class:`KvRoom`); the serve tier
compares the prediction with vLLM's log line on a GPU (``tests/serve/test_profile_kv_prediction.py``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from importlib import metadata

from .elastic_kv import KvRoom
from .kv_layout import KvCacheLayout
from .model_facts import ModelFacts
from .vllm_kv_cache import VllmKvReport, VllmKvUnavailable

#: (facts, layout, max_model_len, available bytes) -> vLLM's own figures, or VllmKvUnavailable.
AskVllm = Callable[[ModelFacts, KvCacheLayout, int, int], VllmKvReport]


@dataclass(frozen=True)
class KvPrediction:
    num_blocks: int
    tokens: int
    concurrency: float
    context: int
    layout: KvCacheLayout
    room: KvRoom
    #: Whose figures: vLLM's own functions, or caovan's arithmetic and why.
    source: str
    #: vLLM's refusal to start with this context, where its own check says so (then the figures are the arithmetic's).
    refusal: str | None = None

    def render(self) -> str:
        said = (
            f'KV prediction: vLLM will log "GPU KV cache size: {self.tokens:,} tokens" and "Maximum concurrency for '
            f'{self.context:,} tokens per request: {self.concurrency:.2f}x": {self.num_blocks} blocks of '
            f"{self.layout.block_size} tokens in the {self.room.describe()}; {self.layout.describe()}; {self.source}"
        )
        return said + (f"; but vLLM's own check refuses it: {self.refusal}" if self.refusal else "")


def _vllm_version() -> str:
    try:
        return f"vLLM {metadata.version('vllm')}"
    except metadata.PackageNotFoundError:
        return "vLLM"


def predict_kv_cache(
    facts: ModelFacts, layout: KvCacheLayout, context: int, room: KvRoom, ask_vllm: AskVllm | None
) -> KvPrediction:
    """The prediction for ``context`` tokens per request; ``ask_vllm`` None: the arithmetic alone."""
    num_blocks = layout.num_blocks(room.bytes)
    arithmetic = KvPrediction(
        num_blocks,
        layout.reported_tokens(num_blocks, context),
        layout.max_concurrency(num_blocks, context),
        context,
        layout,
        room,
        "caovan's arithmetic of vLLM 0.21.0's kv_cache_utils",
    )
    if ask_vllm is None:
        return arithmetic
    try:
        report = ask_vllm(facts, layout, context, room.bytes)
    except VllmKvUnavailable as exc:
        return KvPrediction(**{**arithmetic.__dict__, "source": f"{arithmetic.source} ({_vllm_version()}: {exc})"})
    if report.refusal is not None:
        return KvPrediction(**{**arithmetic.__dict__, "refusal": report.refusal})
    source = f"figures from {_vllm_version()}'s own get_kv_cache_configs"
    return KvPrediction(report.num_blocks, report.tokens, report.concurrency, context, layout, room, source)
