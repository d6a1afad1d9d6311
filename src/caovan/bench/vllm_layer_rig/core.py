"""The layer core's inputs and call, the reference kernel's arguments, and which rows a batch's metadata runs."""

from __future__ import annotations

import contextlib
import importlib
import pkgutil
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch

from .layer import TinyGdnModel, null_block_id


@dataclass
class CoreInputs:
    """``mixed_qkv``, ``b``, ``a`` as ``forward_cuda`` hands them to the core.

    Qwen3.5 (gqa_interleaved_layout=False) splits ``mixed_qkv`` off the front of the in_proj_qkvz output, so its
    rows are strided by qkv+z channels; Qwen3-Next concatenates q, k, v into a contiguous tensor.  ``b``/``a``
    are contiguous in both (``.contiguous()`` / ``reshape`` copies).
    """

    qkv_buffer: torch.Tensor
    qkv_width: int
    b: torch.Tensor
    a: torch.Tensor

    @property
    def mixed_qkv(self) -> torch.Tensor:
        return self.qkv_buffer[:, : self.qkv_width]

    def clone(self) -> CoreInputs:
        return CoreInputs(self.qkv_buffer.clone(), self.qkv_width, self.b.clone(), self.a.clone())

    def copy_(self, other: CoreInputs) -> None:
        self.qkv_buffer.copy_(other.qkv_buffer)
        self.b.copy_(other.b)
        self.a.copy_(other.a)


def random_core_inputs(model: TinyGdnModel, num_tokens: int, seed: int, device: torch.device) -> CoreInputs:
    gen = torch.Generator().manual_seed(seed)
    z_width = 0 if model.gqa_interleaved_layout else model.num_v_heads * model.head_dim
    buffer = torch.randn(num_tokens, model.conv_dim + z_width, generator=gen)
    b = torch.randn(num_tokens, model.num_v_heads, generator=gen)
    a = torch.randn(num_tokens, model.num_v_heads, generator=gen)
    to = {"device": device, "dtype": model.dtype}
    return CoreInputs(buffer.to(**to), model.conv_dim, b.to(**to), a.to(**to))


def new_core_output(model: TinyGdnModel, num_tokens: int, device: torch.device) -> torch.Tensor:
    # forward_cuda allocates core_attn_out with torch.zeros (see vLLM PR 28182).
    return torch.zeros(num_tokens, model.num_v_heads, model.head_dim, dtype=model.dtype, device=device)


def run_core(layer: Any, metadata: Any, vllm_config: Any, inputs: CoreInputs, out: torch.Tensor) -> None:
    """One ``_forward_core`` call inside the forward context the model runner sets for a step."""
    from vllm.forward_context import set_forward_context

    with set_forward_context({layer.prefix: metadata}, vllm_config):
        layer._forward_core(inputs.mixed_qkv, inputs.b, inputs.a, out)


def reference_arguments(
    layer: Any,
    metadata: Any,
    inputs: CoreInputs,
    conv_state_stored: torch.Tensor,
    ssm_state: torch.Tensor,
    out: torch.Tensor,
    token_index: torch.Tensor | None,
) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """Arguments of ``gdn_spec_decode`` / ``gdn_spec_decode_reference`` for the spec part of a step.

    Written from the kernel API contract and vLLM's ``_forward_core`` (not copied from caovan's layer), so a
    mistake in the layer's argument assembly shows up as a disagreement with the reference.
    """
    from caovan.adapters.layer_support import conv_dim_first
    from caovan.adapters.registry import installed_family

    family = installed_family()
    conv_state = conv_state_stored if conv_dim_first(family) else conv_state_stored.transpose(-1, -2)
    weight = layer.conv1d.weight  # (conv_dim, 1, width)
    n = metadata.num_spec_decodes
    args = (
        inputs.mixed_qkv,
        inputs.a,
        inputs.b,
        layer.A_log,
        layer.dt_bias,
        weight.view(weight.shape[0], weight.shape[2]),
        layer.conv1d.bias,
        conv_state,
        ssm_state,
        metadata.spec_query_start_loc[: n + 1],
        metadata.spec_state_indices_tensor,
        metadata.num_accepted_tokens,
        out,
    )
    kwargs = {
        "num_k_heads": layer.num_k_heads // layer.tp_size,
        "head_k_dim": layer.head_k_dim,
        "head_v_dim": layer.head_v_dim,
        "ssm_layout": family.ssm_layout,
        "null_slot_max": family.null_slot_max,
        "token_index": token_index,
    }
    return args, kwargs


def live_spec_rows(metadata: Any) -> torch.Tensor:
    """Activation rows of spec tokens whose output vLLM defines.

    vLLM leaves garbage in the rows of a spec sequence whose column-0 block or initial block (column
    ``num_accepted_tokens - 1``) is the null block, and in padding rows past the last sequence; those rows are
    left out.  Rows are batch rows: in mixed batches spec token i lives at ``spec_token_indx[i]``.
    """
    n = metadata.num_spec_decodes
    starts = metadata.spec_query_start_loc[: n + 1].cpu().tolist()
    slots = metadata.spec_state_indices_tensor[:n].cpu()
    accepted = metadata.num_accepted_tokens[:n].cpu().tolist()
    rows: list[int] = []
    null = null_block_id()
    for i in range(n):
        if slots[i, 0] > null and slots[i, accepted[i] - 1] > null:
            rows.extend(range(starts[i], starts[i + 1]))
    spec_rows = torch.tensor(rows, dtype=torch.long)
    if metadata.num_prefills or metadata.num_decodes:
        spec_rows = metadata.spec_token_indx.cpu().long()[spec_rows]
    return spec_rows


def non_spec_rows(metadata: Any) -> torch.Tensor:
    if metadata.spec_sequence_masks is None:
        raise ValueError("non_spec_rows: batch has no spec sequences; every row is non-spec")
    return metadata.non_spec_token_indx.cpu().long()


def spec_blocks(metadata: Any) -> list[int]:
    """Blocks the spec sequences of this step may write (their real state slots)."""
    n = metadata.num_spec_decodes
    slots = metadata.spec_state_indices_tensor[:n].cpu()
    null = null_block_id()
    return sorted({int(s) for s in slots.flatten().tolist() if s > null})


@contextlib.contextmanager
def fla_autotune_first_config_only() -> Iterator[int]:
    """Restrict vLLM's FLA chunk kernels (the prefill path) to the first of their autotune configs.

    Why: the chunked prefill kernels are autotuned over ~100 configurations per shape; compiling and timing
    them all takes about a minute per shape on a fresh machine, for code that is not under test here (caovan
    hands prefill tokens to vLLM's own core in both the reference and the caovan run, which then use the same
    single configuration).  Yields how many autotuners were restricted; restores them on exit.
    """
    from caovan.adapters.registry import installed_family

    fla_ops = importlib.import_module(installed_family().fla_ops_module)

    restricted: list[tuple[Any, list[Any]]] = []
    for info in pkgutil.iter_modules(fla_ops.__path__):
        module = importlib.import_module(f"{fla_ops.__name__}.{info.name}")
        for value in list(vars(module).values()):
            seen = 0
            while value is not None and seen < 4:  # heuristics(autotune(jit)) wrappers nest through .fn
                if type(value).__name__ == "Autotuner" and isinstance(getattr(value, "configs", None), list):
                    if len(value.configs) > 1 and all(value is not r[0] for r in restricted):
                        restricted.append((value, value.configs))
                        value.configs = value.configs[:1]
                    break
                value = getattr(value, "fn", None)
                seen += 1
    try:
        yield len(restricted)
    finally:
        for autotuner, configs in restricted:
            autotuner.configs = configs
