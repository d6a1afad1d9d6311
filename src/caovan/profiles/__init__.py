"""Turbo3's start-up profiles for ``caovan serve``: the GPUs and the model they size for, and the flags they add."""

from .auto_mem import auto_mem, auto_share
from .dynamic_tp import ProfileError, ProfileLine, dynamic_tp, needed_per_gpu
from .gpus import Gpu, GpuInventoryError, read_gpus
from .memory import Reserve, gdn_state_bytes_per_sequence, kv_bytes_per_token, tp_problems, weights_per_gpu
from .model_facts import ModelFacts, estimated_weight_bytes, read_model_facts
from .sizing import size_server

__all__ = [
    "Gpu",
    "GpuInventoryError",
    "ModelFacts",
    "ProfileError",
    "ProfileLine",
    "Reserve",
    "auto_mem",
    "auto_share",
    "dynamic_tp",
    "estimated_weight_bytes",
    "gdn_state_bytes_per_sequence",
    "kv_bytes_per_token",
    "needed_per_gpu",
    "read_gpus",
    "read_model_facts",
    "size_server",
    "tp_problems",
    "weights_per_gpu",
]
