"""What one GPU holds when vLLM serves a GDN model at a tensor-parallel size: the arithmetic the profiles share.

Per GPU at TP = t (vLLM's sharding of Qwen3.5/3.6 and Qwen3-Next):

* weights: the checkpoint's bytes / t (every projection, the embeddings and the head are split; norms, a rounding
  error, are not);
* attention KV per token: 2 (K and V) x the full-attention layers, the MTP layers' included (the drafter keeps its
  own cache) x max(1, KV heads / t) (vLLM replicates KV heads past their count) x head dim x the cache dtype;
* GDN state per sequence: each GDN layer's recurrent state (HV / t heads of K x V in the SSM dtype) and its
  convolution state (conv dim / t channels x (width - 1) steps in the model dtype);
* a reserve for what vLLM takes besides (CUDA context, activations of the largest batch, CUDA graphs).

All of it must fit in what vLLM is given: its share (``--gpu-memory-utilization``) of the GPU's total memory.
"""

from __future__ import annotations

from dataclasses import dataclass

from .gpus import GIB
from .model_facts import DTYPE_BYTES, ModelFacts


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


def kv_bytes_per_token(facts: ModelFacts, tp: int, kv_dtype: str) -> int:
    layers = facts.full_attention_layers + facts.mtp_layers
    heads = max(1, facts.num_kv_heads // tp)
    return 2 * layers * heads * facts.head_dim * DTYPE_BYTES[kv_dtype]


def gdn_state_bytes_per_sequence(facts: ModelFacts, tp: int) -> int:
    recurrent = facts.gdn_value_heads // tp * facts.gdn_key_dim * facts.gdn_value_dim * DTYPE_BYTES[facts.ssm_dtype]
    conv = facts.gdn_conv_dim // tp * (facts.conv_width - 1) * DTYPE_BYTES[facts.dtype]
    return facts.gdn_layers * (recurrent + conv)
