"""vLLM v1's KV cache for a GDN hybrid model, in arithmetic: the block size, page and groups its start-up chooses, the
memory one request needs, the blocks a given memory holds, and the ``GPU KV cache size`` it logs.

Each formula mirrors vLLM 0.21.0 (:mod:`caovan.profiles.vllm_kv_cache` runs vLLM's own functions where vLLM is
importable, and the unit tests check that both agree on every golden case):

* GDN state of one layer (``MambaStateShapeCalculator.gated_delta_net_state_shape`` and
  ``MambaStateDtypeCalculator.gated_delta_net_state_dtype``, ``vllm/model_executor/layers/mamba/mamba_utils.py``):
  the convolution state, conv dim / TP channels x (width - 1 + speculative tokens) steps in the model dtype, and the
  recurrent state, value heads / TP x V x K in the SSM dtype (``mamba_ssm_dtype`` of Qwen3.5/3.6, else the model's);
* the block size (``Platform._align_hybrid_block_size``, ``vllm/platforms/interface.py``): the smallest multiple of
  the attention backend's kernel alignment whose attention page (block size x one layer's K and V of a token) holds
  one layer's GDN state; the GDN page is padded to that page (``mamba_page_size_padded``);
* the groups (``_get_kv_cache_groups_uniform_page_size``, ``vllm/v1/core/kv_cache_utils.py``): attention layers (the
  MTP drafter's included) and GDN layers split into groups of one size, the smaller count, or the larger where it
  is below 1.5 times the smaller; the last group of each kind padded;
* the blocks (``get_num_blocks``): available memory // page // group size, one pool shared by all groups;
* one request (``_max_memory_usage_bytes_from_groups``, ``get_max_concurrency_for_kv_cache_config``): per attention
  group the blocks of its tokens, per GDN group 1 + speculative tokens state slots (2 + them with prefix caching,
  ``MambaSpec.max_memory_usage_bytes``), times page x group size;
* the log line (``_report_kv_cache_config``): ``GPU KV cache size: int(num_blocks / blocks per request x
  max_model_len) tokens``. (vLLM 0.12 to 0.14 logged ``num_blocks // groups x block size`` instead.)
"""

from __future__ import annotations

from dataclasses import dataclass

from .model_facts import DTYPE_BYTES, ModelFacts

#: ``CacheConfig.DEFAULT_BLOCK_SIZE``, and the kernel alignment of every attention backend vLLM's CUDA platform
#: takes for these models (FlashInfer ``[16, 32, 64]``, Triton and FlexAttention ``MultipleOf(16)``,
#: FlashAttention ``MultipleOf(16)`` or ``[16, 32, 64]``): ``get_supported_kernel_block_sizes`` in 0.21.0.
DEFAULT_BLOCK_SIZE = 16
#: vLLM's ``mamba_cache_mode`` values this arithmetic follows: ``none`` (prefix caching off, vLLM's default for hybrid
#: models) and ``align`` (prefix caching on, for models without Mamba prefix-caching support, Qwen3.5/3.6 and
#: Qwen3-Next in 0.21.0). ``all`` keeps a state per block of every sequence and is not followed.
MAMBA_CACHE_MODES = ("none", "align")


class KvLayoutError(ValueError):
    """The layout asked for is one this arithmetic does not follow; the message says which and why."""


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def slots(count: int) -> str:
    return f"{count} state slot{'' if count == 1 else 's'}"


def kv_dtype_bytes(kv_dtype: str, model_dtype: str) -> int | None:
    """Bytes per cached value of vLLM's ``--kv-cache-dtype`` (``auto``: the model dtype); None where unknown."""
    return DTYPE_BYTES.get(model_dtype if kv_dtype == "auto" else kv_dtype)


@dataclass(frozen=True)
class KvCacheLayout:
    """What vLLM's start-up makes of one GPU's KV cache at TP = ``tp`` (the module docstring gives the sources)."""

    tp: int
    kv_dtype: str
    #: Full-attention layers, the MTP drafter's included when speculative decoding loads it.
    attention_layers: int
    gdn_layers: int
    #: One attention layer's K and V of one token, in the KV-cache dtype.
    attention_token_bytes: int
    #: One GDN layer's convolution and recurrent state of one sequence (before padding to the page).
    gdn_state_bytes: int
    block_size: int
    speculative_tokens: int
    mamba_cache_mode: str

    @property
    def page_bytes(self) -> int:
        """One block of one layer: an attention page, and the GDN page padded to it."""
        return self.block_size * self.attention_token_bytes

    @property
    def group_size(self) -> int:
        fewer, more = sorted((self.attention_layers, self.gdn_layers))
        return more if more < fewer * 1.5 else fewer

    @property
    def attention_groups(self) -> int:
        return cdiv(self.attention_layers, self.group_size)

    @property
    def gdn_groups(self) -> int:
        return cdiv(self.gdn_layers, self.group_size)

    @property
    def padding_layers(self) -> int:
        """Layer slots vLLM adds so that every group has ``group_size`` layers."""
        return (self.attention_groups + self.gdn_groups) * self.group_size - self.attention_layers - self.gdn_layers

    @property
    def gdn_slots_per_group(self) -> int:
        """State blocks one request holds in each GDN group (``MambaSpec.max_memory_usage_bytes``)."""
        return (2 if self.mamba_cache_mode == "align" else 1) + self.speculative_tokens

    @property
    def block_row_bytes(self) -> int:
        """What one block costs in the pool: a page in each of the ``group_size`` shared tensors."""
        return self.page_bytes * self.group_size

    def blocks_per_request(self, max_model_len: int) -> int:
        """Blocks one request of ``max_model_len`` tokens takes: its tokens in each attention group, its state
        slots in each GDN group."""
        attention = self.attention_groups * cdiv(max_model_len, self.block_size)
        return attention + self.gdn_groups * self.gdn_slots_per_group

    def bytes_per_request(self, max_model_len: int) -> int:
        """vLLM's start-up check: this must not exceed the memory available for the KV cache."""
        return self.block_row_bytes * self.blocks_per_request(max_model_len)

    def num_blocks(self, available_bytes: int) -> int:
        return max(available_bytes // self.page_bytes // self.group_size, 0)

    def longest_context(self, available_bytes: int, cap: int) -> int:
        """The longest ``max_model_len`` (at most ``cap``) one request of which fits ``available_bytes``; 0 where
        not even one block with the GDN state does (vLLM's ``_estimate_max_model_len_from_groups``)."""
        spare = self.num_blocks(available_bytes) - self.gdn_groups * self.gdn_slots_per_group
        tokens = spare // self.attention_groups * self.block_size
        return max(min(tokens, cap), 0)

    def max_concurrency(self, num_blocks: int, max_model_len: int) -> float:
        return num_blocks / self.blocks_per_request(max_model_len)

    def reported_tokens(self, num_blocks: int, max_model_len: int) -> int:
        """The ``GPU KV cache size: N tokens`` vLLM 0.21 logs, computed in its order (a float, then int())."""
        return int(self.max_concurrency(num_blocks, max_model_len) * max_model_len)

    def describe(self) -> str:
        spec = f", MTP {self.speculative_tokens}" if self.speculative_tokens else ""
        return (
            f"{self.attention_layers} attention + {self.gdn_layers} GDN layers in {self.attention_groups} + "
            f"{self.gdn_groups} groups of {self.group_size}, blocks of {self.block_size} tokens, "
            f"{self.page_bytes / (1 << 20):.2f} MiB pages, {slots(self.gdn_slots_per_group)} per GDN group per "
            f"sequence{spec}"
        )


def hybrid_layout(
    facts: ModelFacts,
    tp: int,
    kv_dtype: str,
    *,
    speculative_tokens: int = 0,
    drafter_layers: int = 0,
    block_size: int | None = None,
    mamba_cache_mode: str = "none",
) -> KvCacheLayout:
    """The layout vLLM builds for ``facts`` at TP = ``tp``. ``kv_dtype``: vLLM's ``--kv-cache-dtype`` spelling;
    ``drafter_layers``: attention layers the speculative drafter adds (the MTP layers for ``method: mtp``);
    ``block_size``: the user's ``--block-size`` (None: vLLM's default). KvLayoutError for what is not followed."""
    value_bytes = kv_dtype_bytes(kv_dtype, facts.dtype)
    if value_bytes is None:
        raise KvLayoutError(f"--kv-cache-dtype {kv_dtype}: its bytes per value are unknown to the profiles")
    if mamba_cache_mode not in MAMBA_CACHE_MODES:
        raise KvLayoutError(
            f"mamba_cache_mode {mamba_cache_mode}: the profiles follow vLLM's GDN cache in modes "
            f"{' and '.join(MAMBA_CACHE_MODES)} only"
        )
    kv_heads = max(1, facts.num_kv_heads // tp)  # ModelConfig.get_num_kv_heads: replicated past their count
    attention_token_bytes = 2 * kv_heads * facts.head_dim * value_bytes
    conv = facts.gdn_conv_dim // tp * (facts.conv_width - 1 + speculative_tokens) * DTYPE_BYTES[facts.dtype]
    recurrent = facts.gdn_value_heads // tp * facts.gdn_value_dim * facts.gdn_key_dim * DTYPE_BYTES[facts.ssm_dtype]
    base = block_size or DEFAULT_BLOCK_SIZE
    alignment = max(DEFAULT_BLOCK_SIZE, base)
    aligned = alignment * cdiv(conv + recurrent, alignment * attention_token_bytes)
    return KvCacheLayout(
        tp=tp,
        kv_dtype=kv_dtype,
        attention_layers=facts.full_attention_layers + drafter_layers,
        gdn_layers=facts.gdn_layers,
        attention_token_bytes=attention_token_bytes,
        gdn_state_bytes=conv + recurrent,
        block_size=max(base, aligned),
        speculative_tokens=speculative_tokens,
        mamba_cache_mode=mamba_cache_mode,
    )
