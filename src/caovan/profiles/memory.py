"""What one GPU holds when vLLM serves a GDN model at a tensor-parallel size: the arithmetic the profiles share.

Per GPU at TP = t (vLLM's sharding of Qwen3.5/3.6 and Qwen3-Next):

* weights: the checkpoint's bytes / t (every projection, the embeddings and the head are split; norms, a rounding
  error, are not);
* the KV cache: attention KV and GDN state in vLLM's own layout, :mod:`caovan.profiles.kv_layout`;
* a reserve for what vLLM takes besides (CUDA context, activations of the largest batch, CUDA graphs).

All of it must fit in what vLLM is given: its share (``--gpu-memory-utilization``) of the GPU's total memory.
"""

from __future__ import annotations

from dataclasses import dataclass

from .gpus import GIB
from .model_facts import ModelFacts


@dataclass(frozen=True)
class Reserve:
    """Bytes per GPU that vLLM takes outside weights and caches (the margin left unused is AutoMem's)."""

    cuda_context: int = GIB // 2
    activations: int = GIB
    cuda_graphs: int = GIB // 2

    @property
    def total(self) -> int:
        return self.cuda_context + self.activations + self.cuda_graphs


def tp_problems(facts: ModelFacts, tp: int) -> list[str]:
    """Why vLLM refuses this model at TP = tp (its heads must split evenly); [] when it accepts it."""
    problems = []
    for what, count in (
        ("attention heads", facts.num_attention_heads),
        ("GDN key heads", facts.gdn_key_heads),
        ("GDN value heads", facts.gdn_value_heads),
    ):
        if count % tp:
            problems.append(f"{count} {what} do not split over {tp} GPUs")
    kv = facts.num_kv_heads
    if kv % tp and tp % kv:
        problems.append(f"{kv} KV heads neither split over nor replicate onto {tp} GPUs")
    return problems


def weights_per_gpu(facts: ModelFacts, tp: int) -> int:
    return -(-facts.weight_bytes // tp)
