"""Turbo3's start-up profiles for ``caovan serve``: the GPUs and the model they size for, and the flags they add."""

from .auto_mem import auto_mem, auto_share
from .dynamic_tp import ProfileError, ProfileLine, dynamic_tp, needed_per_gpu
from .gpus import Gpu, GpuInventoryError, read_gpus
from .kv_layout import KvCacheLayout, KvLayoutError, hybrid_layout
from .memory import Reserve, tp_problems, weights_per_gpu
from .model_facts import ModelFacts, estimated_weight_bytes, read_model_facts
from .sizing import ServeRequest, ServerSizing, size_server, size_tp_and_share

__all__ = [
    "Gpu",
    "GpuInventoryError",
    "KvCacheLayout",
    "KvLayoutError",
    "ModelFacts",
    "ProfileError",
    "ProfileLine",
    "Reserve",
    "ServeRequest",
    "ServerSizing",
    "auto_mem",
    "auto_share",
    "dynamic_tp",
    "estimated_weight_bytes",
    "hybrid_layout",
    "needed_per_gpu",
    "read_gpus",
    "read_model_facts",
    "size_server",
    "size_tp_and_share",
    "tp_problems",
    "weights_per_gpu",
]
