"""The layer's conv and SSM states, allocated and bound the way vLLM's GPU model runner does."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch


@dataclass
class MambaCache:
    """One layer's cache as vLLM lays it out: ``raw`` holds both states, page after page."""

    raw: torch.Tensor  # int8, num_blocks * page_size_bytes
    conv: torch.Tensor  # (num_blocks, L, conv_dim) or (num_blocks, conv_dim, L) if dim-first; page-strided
    ssm: torch.Tensor  # (num_blocks, HV, V, K); page-strided

    @property
    def num_blocks(self) -> int:
        return self.conv.shape[0]

    def fill_random_(self, seed: int) -> None:
        gen = torch.Generator().manual_seed(seed)
        self.raw.zero_()
        self.conv.copy_(torch.randn(self.conv.shape, generator=gen).to(self.conv.dtype))
        self.ssm.copy_((0.5 * torch.randn(self.ssm.shape, generator=gen)).to(self.ssm.dtype))

    def copy_from_(self, other: MambaCache) -> None:
        self.raw.copy_(other.raw)

    def snapshot(self) -> tuple[torch.Tensor, torch.Tensor]:
        return self.conv.clone(), self.ssm.clone()


def _contiguous_strides(shape: Sequence[int]) -> tuple[int, ...]:
    strides, step = [], 1
    for size in reversed(shape):
        strides.append(step)
        step *= size
    return tuple(reversed(strides))


def allocate_cache(layer: Any, vllm_config: Any, num_blocks: int, device: torch.device) -> MambaCache:
    """``GPUModelRunner._reshape_kv_cache_tensors``, MambaSpec branch, for one layer (zero-filled)."""
    spec = layer.get_kv_cache_spec(vllm_config)
    raw = torch.zeros(num_blocks * spec.page_size_bytes, dtype=torch.int8, device=device)
    states, offset_bytes = [], 0
    for shape, dtype in zip(spec.shapes, spec.dtypes, strict=True):
        itemsize = torch.tensor([], dtype=dtype).element_size()
        target_shape = (num_blocks, *shape)
        strides = _contiguous_strides(target_shape)
        if offset_bytes % itemsize:
            raise AssertionError(f"state offset {offset_bytes} not aligned to {dtype}")
        states.append(
            torch.as_strided(
                raw.view(dtype),
                size=target_shape,
                stride=(spec.page_size_bytes // itemsize, *strides[1:]),
                storage_offset=offset_bytes // itemsize,
            )
        )
        offset_bytes += strides[0] * itemsize
    conv, ssm = states
    return MambaCache(raw=raw, conv=conv, ssm=ssm)


def bind_cache(layer: Any, cache: MambaCache) -> None:
    """What ``bind_kv_cache`` does: the layer reads ``self.kv_cache[0]`` (conv) and ``[1]`` (SSM), or before
    vLLM 0.19 ``self.kv_cache[virtual_engine]`` first (one virtual engine here, as without pipeline parallelism)."""
    from caovan.adapters.registry import installed_family

    states = [cache.conv, cache.ssm]
    layer.kv_cache = [states] if installed_family().kv_cache_per_virtual_engine else states


def allocate_and_bind_cache(layer: Any, vllm_config: Any, num_blocks: int, device: torch.device) -> MambaCache:
    cache = allocate_cache(layer, vllm_config, num_blocks, device)
    bind_cache(layer, cache)
    return cache
