"""The Triton launches a row's real GDN layer makes for a prefill and a spec-decode step, at real per-GPU shapes.

vLLM's own GatedDeltaNet layer is built on CPU by the layer rig (``caovan.bench.vllm_layer_rig``, the same one the
discovery and kernel tiers use; it reads the installed family's record) and its ``_forward_core`` is run for three
steps — a prefill batch (varlen, one sequence continuing from its cache), a spec-decode batch and a mixed one —
under :func:`caovan.sm75.launch_recorder.recording`. Before that, vLLM's kernel packages are imported inside
:func:`~caovan.sm75.device_view.sm75_device_view`, so the autotune lists they size at import are the ones a 2080 Ti
gets. Must run in a fresh process (``python -m caovan.sm75.kernel_verdicts``): a kernel module imported earlier
would keep the lists it sized for this machine.
"""

from __future__ import annotations

import importlib
import importlib.util
import pkgutil
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from unittest import mock

from .launch_recorder import KernelLaunch, recording

#: vLLM's kernel packages that decide things at import: the FLA ops (the family record names where they live)
#: and the mamba ops (causal conv1d).
MAMBA_OPS_PACKAGE = "vllm.model_executor.layers.mamba.ops"


@dataclass(frozen=True)
class GdnShape:
    """One GDN layer's per-GPU shape as a released model has it at a tensor-parallel size."""

    model: str
    tensor_parallel: int
    num_k_heads: int  # per GPU
    num_v_heads: int  # per GPU
    head_dim: int = 128  # K = V for every released Qwen GDN model

    @property
    def id(self) -> str:
        return f"{self.model} TP={self.tensor_parallel}"


def _split(model: str, k_heads: int, v_heads: int) -> tuple[GdnShape, ...]:
    return tuple(GdnShape(model, tp, k_heads // tp, v_heads // tp) for tp in (1, 2))


#: Qwen3.6-27B (also Qwen3.5-27B): 16 key and 48 value heads; Qwen3.5/3.6-35B-A3B (also Qwen3-Next-80B): 16 and 32.
SHAPES: tuple[GdnShape, ...] = (*_split("Qwen3.6-27B", 16, 48), *_split("Qwen3.6-35B-A3B", 16, 32))
#: SSM-state dtypes a 2080 Ti deployment runs (--mamba-ssm-cache-dtype): Qwen3.5 configs ask for float32; fp16 is
#: what ``auto`` gives an fp16 model (the one spelling every release accepts: 0.12 takes "auto" or "float32" only).
SSM_STATE_DTYPES: tuple[str, ...] = ("float32", "float16")
_SSM_CACHE_DTYPE_FLAG = {"float32": "float32", "float16": "auto"}
MTP_TOKENS = 3


@dataclass
class LayerLaunches:
    """What one shape and SSM dtype launched, or why it could not be driven."""

    shape: GdnShape
    ssm_dtype: str
    layout: str  # the rig's model family: "qwen3_5" where the release has it, else "qwen3_next"
    launches: list[KernelLaunch]
    error: str | None = None


def kernel_packages() -> list[str]:
    """The installed vLLM's kernel packages: every FLA ops location a family record names that this vLLM has, and
    the mamba ops. Found without importing them (the family probe would: it imports the GDN module)."""
    from ..adapters.families import FAMILIES

    candidates = dict.fromkeys([*(family.fla_ops_module for family in FAMILIES), MAMBA_OPS_PACKAGE])
    return [name for name in candidates if _exists(name)]


def _exists(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ImportError:  # a parent package is missing
        return False


def imported_kernel_modules(packages: list[str]) -> list[str]:
    """The modules of ``packages`` already imported: their import-time decisions were made for this machine."""
    return sorted(name for name in sys.modules if name.startswith(tuple(p + "." for p in packages)))


def import_kernel_packages_for_device(packages: list[str]) -> list[str]:
    """Import every module of ``packages`` under the 7.5 view; ``module: error`` of each one that does not import
    (a module no GDN path loads, e.g. one registering an op another already did, is no reason to stop)."""
    from .device_view import sm75_device_view

    failed = []
    with sm75_device_view():
        for package_name in packages:
            package = importlib.import_module(package_name)
            for info in pkgutil.iter_modules(package.__path__):
                name = f"{package_name}.{info.name}"
                try:
                    importlib.import_module(name)
                except Exception as exc:
                    failed.append(f"{name}: {type(exc).__name__}: {exc}"[:300])
    return failed


def _steps(model: Any) -> Iterator[tuple[str, list[Any]]]:
    from ..bench.vllm_layer_rig import prefill_request, spec_request

    t = model.tokens_per_spec_request
    # Varlen prefill: a new prompt and a chunk of a longer one that reads its state from the cache. Token counts are
    # neither 1 nor multiples of 16 in every step, so the steps share Triton's specialisations where their kernels
    # meet and each kernel compiles once per shape (a count of 16k would be another specialisation, same code).
    yield "prefill", [prefill_request(model, [1] * t, 37, 0), prefill_request(model, [2] * t, 90, 64)]
    yield "spec-decode", [spec_request(model, range(3, 3 + t), 2), spec_request(model, range(8, 8 + t), t)]
    yield "mixed", [spec_request(model, range(3, 3 + t), 1), prefill_request(model, [12] * t, 49, 0)]


def record_layer_launches(shape: GdnShape, ssm_dtype: str, layout: str) -> LayerLaunches:
    """Build vLLM's layer at ``shape`` and record what its core launches for each step."""
    import torch
    from vllm.config import set_current_vllm_config

    from ..bench import vllm_layer_rig as rig

    cpu = torch.device("cpu")
    ssm_flag = _SSM_CACHE_DTYPE_FLAG[ssm_dtype]
    model = rig.TinyGdnModel(
        layout, shape.num_k_heads, shape.num_v_heads, shape.head_dim, MTP_TOKENS, torch.float16, ssm_flag
    )
    with tempfile.TemporaryDirectory() as folder:
        config = rig.make_vllm_config(model, rig.write_model_dir(model, Path(folder)), caovan=False, device="cpu")
        started = rig.ensure_single_process_distributed(config)
        try:
            layer = rig.build_gdn_layer(config, model, "model.layers.0.linear_attn", cpu, caovan=False)
            rig.allocate_and_bind_cache(layer, config, 16, cpu)
            builder = rig.make_metadata_builder(layer, [layer.prefix], config, cpu, full_cuda_graph=False)
            with recording() as record:
                for step, requests in _steps(model):
                    record.step = step
                    batch = rig.make_batch(requests, cpu)
                    metadata = rig.build_metadata(builder, batch)
                    inputs = rig.random_core_inputs(model, batch.num_tokens, 0, cpu)
                    with set_current_vllm_config(config):
                        rig.run_core(layer, metadata, config, inputs, rig.new_core_output(model, batch.num_tokens, cpu))
        finally:
            if started:
                rig.shutdown_distributed()
    return LayerLaunches(shape, ssm_dtype, layout, record.launches)


def record_all(shapes: tuple[GdnShape, ...] = SHAPES, ssm_dtypes: tuple[str, ...] = SSM_STATE_DTYPES):
    """Every shape x SSM dtype; a combination the rig cannot drive is kept with its error, never dropped."""
    import torch

    from ..bench.vllm_layer_rig import cpu_device_plumbing

    layout = "qwen3_5" if importlib.util.find_spec("vllm.model_executor.models.qwen3_5") else "qwen3_next"
    results = []
    # On a 2080 Ti every tensor of the layer is a CUDA tensor, and vLLM 0.34's state gather/scatter launchers assert
    # it before they launch: the recorder's CPU tensors answer as CUDA ones (nothing is launched while recording).
    on_cuda = mock.patch.object(torch.Tensor, "is_cuda", property(lambda self: True))
    with cpu_device_plumbing(), on_cuda:
        for shape in shapes:
            for ssm_dtype in ssm_dtypes:
                try:
                    results.append(record_layer_launches(shape, ssm_dtype, layout))
                except Exception as exc:  # reported per combination: the kernels it would launch are then unreached
                    error = " ".join(f"{type(exc).__name__}: {exc}".split())[:600]
                    results.append(LayerLaunches(shape, ssm_dtype, layout, [], error))
    return results
