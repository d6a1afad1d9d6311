"""The KV cache the installed vLLM would build, asked of vLLM's own code: ``get_kv_cache_configs`` and the
``GPU KV cache size`` line it logs, run on caovan's layer specs for a :class:`~caovan.profiles.kv_layout.KvCacheLayout`.

Nothing here needs a GPU: vLLM's planning code only reads its config and the layers' ``KVCacheSpec`` objects. The
specs are built from the dataclass fields the release's classes have and the config is a stand-in holding the
attributes vLLM 0.21.0 reads; a release that needs more, or that logs the line from elsewhere, is
:class:`VllmKvUnavailable` with the reason, and the caller falls back to :mod:`caovan.profiles.kv_layout`'s
arithmetic. vLLM's logger in ``kv_cache_utils`` is replaced by a recorder for the one call, so nothing is printed
and vLLM's log-once memory is untouched.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import re
from collections.abc import Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from .kv_layout import KvCacheLayout
from .model_facts import ModelFacts

_REPORT = "GPU KV cache size"
_CONCURRENCY = "Maximum concurrency"
_TORCH_DTYPES = {"float32": "float32", "bfloat16": "bfloat16", "float16": "float16", "fp8": "uint8"}


class VllmKvUnavailable(Exception):
    """vLLM's own functions cannot be asked here; the message says why."""


@dataclass(frozen=True)
class VllmKvReport:
    """What vLLM's start-up would say: its ``num_blocks``, the ``GPU KV cache size`` and the concurrency it logs;
    ``refusal``: vLLM's own message where it would not start with this context (then the others are 0)."""

    num_blocks: int
    tokens: int
    concurrency: float
    warnings: tuple[str, ...] = ()
    refusal: str | None = None


class _Recorder:
    """Stands in for ``kv_cache_utils.logger``: every call ``logger.<level>(msg, *args)`` is kept as (msg % args)."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def __getattr__(self, name: str) -> Any:
        def record(msg: Any, *args: Any, **_: Any) -> None:
            self.lines.append(str(msg) % args if args else str(msg))

        return record


class _Config:
    """A stand-in for ``VllmConfig`` (vLLM sets ``max_model_len`` on it while it searches for the longest that
    fits); reading an attribute it does not hold names its dotted path."""

    def __init__(self, values: Mapping[str, Any], path: str = "vllm_config") -> None:
        self._path = path
        for name, value in values.items():
            setattr(self, name, _Config(value, f"{path}.{name}") if isinstance(value, Mapping) else value)

    def __getattr__(self, name: str) -> Any:  # only for what __init__ did not set
        if name.startswith("__"):
            raise AttributeError(name)
        raise VllmKvUnavailable(f"vLLM's KV cache planning reads {self._path}.{name}, which caovan does not model")


def _build(cls: type, values: Mapping[str, Any]) -> Any:
    """``cls`` from the ``values`` it has fields for; VllmKvUnavailable when it requires one caovan cannot fill."""
    fields = {f.name: f for f in dataclasses.fields(cls)}
    missing = [
        name
        for name, f in fields.items()
        if name not in values and f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
    ]
    if missing:
        raise VllmKvUnavailable(f"{cls.__name__} requires {', '.join(missing)}, which caovan cannot fill")
    return cls(**{name: value for name, value in values.items() if name in fields})


def _torch_dtype(torch: Any, dtype: str) -> Any:
    name = _TORCH_DTYPES.get("fp8" if dtype.startswith("fp8") else dtype)
    if name is None:
        raise VllmKvUnavailable(f"no torch dtype known for {dtype}")
    return getattr(torch, name)


@contextmanager
def _recorded(module: Any):
    recorder = _Recorder()
    original = getattr(module, "logger", None)
    module.logger = recorder
    try:
        yield recorder
    finally:
        module.logger = original


def _specs(facts: ModelFacts, layout: KvCacheLayout, max_model_len: int, iface: Any, torch: Any) -> dict[str, Any]:
    """One ``KVCacheSpec`` per layer of one TP rank, named as the model's layers are (GDN, GDN, GDN, attention)."""
    kv_dtype = facts.dtype if layout.kv_dtype == "auto" else layout.kv_dtype
    attention: dict[str, Any] = {
        "block_size": layout.block_size,
        "num_kv_heads": max(1, facts.num_kv_heads // layout.tp),
        "head_size": facts.head_dim,
        "dtype": _torch_dtype(torch, kv_dtype),
    }
    quant_mode = getattr(iface, "get_kv_quant_mode", None)
    if callable(quant_mode):
        attention["kv_quant_mode"] = quant_mode(layout.kv_dtype)
    conv_steps = facts.conv_width - 1 + layout.speculative_tokens
    mamba: dict[str, Any] = {
        # vLLM's MambaBase.get_kv_cache_spec: the block size is max_model_len without prefix caching.
        "block_size": max_model_len if layout.mamba_cache_mode == "none" else layout.block_size,
        "shapes": (
            (facts.gdn_conv_dim // layout.tp, conv_steps),
            (facts.gdn_value_heads // layout.tp, facts.gdn_value_dim, facts.gdn_key_dim),
        ),
        "dtypes": (_torch_dtype(torch, facts.dtype), _torch_dtype(torch, facts.ssm_dtype)),
        "page_size_padded": layout.page_bytes,
        "mamba_cache_mode": layout.mamba_cache_mode,
        "num_speculative_blocks": layout.speculative_tokens,
    }
    attention_spec = _build(iface.FullAttentionSpec, attention)
    mamba_spec = _build(iface.MambaSpec, mamba)
    specs: dict[str, Any] = {}
    attention_left, gdn_left = facts.full_attention_layers, facts.gdn_layers
    for index in range(facts.full_attention_layers + facts.gdn_layers):
        if gdn_left and (index % 4 != 3 or not attention_left):
            specs[f"model.layers.{index}.linear_attn"] = mamba_spec
            gdn_left -= 1
        else:
            specs[f"model.layers.{index}.self_attn.attn"] = attention_spec
            attention_left -= 1
    for index in range(layout.attention_layers - facts.full_attention_layers):
        specs[f"mtp.layers.{index}.self_attn.attn"] = attention_spec
    return specs


def _config(layout: KvCacheLayout, max_model_len: int) -> _Config:
    return _Config(
        {
            "model_config": {"max_model_len": max_model_len, "original_max_model_len": max_model_len},
            "cache_config": {
                "block_size": layout.block_size,
                "num_gpu_blocks_override": None,
                "mamba_cache_mode": layout.mamba_cache_mode,
                "enable_prefix_caching": layout.mamba_cache_mode != "none",
            },
            "scheduler_config": {"disable_hybrid_kv_cache_manager": False},
            "parallel_config": {"decode_context_parallel_size": 1, "prefill_context_parallel_size": 1},
            # Read only for DeepSeek V4's drafter groups; the MTP drafter's layers are in the specs already.
            "speculative_config": None,
            "kv_transfer_config": None,
        }
    )


def _number(lines: list[str], prefix: str) -> str | None:
    for line in lines:
        if line.startswith(prefix):
            found = re.search(r"([\d,]+(?:\.\d+)?)(?: tokens|x)$", line)
            if found:
                return found.group(1).replace(",", "")
    return None


def vllm_kv_report(facts: ModelFacts, layout: KvCacheLayout, max_model_len: int, available_bytes: int) -> VllmKvReport:
    """vLLM's own figures for one GPU with ``available_bytes`` for the KV cache (all TP ranks alike);
    VllmKvUnavailable where its functions cannot be asked."""
    try:
        import torch

        utils = importlib.import_module("vllm.v1.core.kv_cache_utils")
        iface = importlib.import_module("vllm.v1.kv_cache_interface")
    except Exception as exc:  # no vLLM, or a release without the V1 KV cache modules
        raise VllmKvUnavailable(f"vLLM's KV cache modules do not import: {type(exc).__name__}: {exc}") from None
    plan = getattr(utils, "get_kv_cache_configs", None)
    if not callable(plan):
        raise VllmKvUnavailable("vllm.v1.core.kv_cache_utils has no get_kv_cache_configs")
    parameters = list(inspect.signature(plan).parameters)
    if parameters[:3] != ["vllm_config", "kv_cache_specs", "available_memory"]:
        raise VllmKvUnavailable(f"get_kv_cache_configs takes ({', '.join(parameters)}), not one worker's specs")
    specs = _specs(facts, layout, max_model_len, iface, torch)
    with _recorded(utils) as recorder:
        try:
            configs = plan(_config(layout, max_model_len), [specs], [available_bytes])
        except VllmKvUnavailable:
            raise
        except ValueError as exc:  # vLLM's own "To serve at least one request ..." refusal
            return VllmKvReport(0, 0, 0.0, tuple(recorder.lines), refusal=" ".join(str(exc).split()))
        except Exception as exc:  # its code needs what caovan does not model
            raise VllmKvUnavailable(f"get_kv_cache_configs failed: {type(exc).__name__}: {exc}") from None
    tokens, concurrency = _number(recorder.lines, _REPORT), _number(recorder.lines, _CONCURRENCY)
    if tokens is None or concurrency is None:
        raise VllmKvUnavailable(f"get_kv_cache_configs logged no '{_REPORT}' and '{_CONCURRENCY}' lines")
    others = tuple(line for line in recorder.lines if not line.startswith((_REPORT, _CONCURRENCY)))
    return VllmKvReport(configs[0].num_blocks, int(tokens), float(concurrency), others)
