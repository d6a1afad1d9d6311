"""caovan's GDN prefill inside vLLM's prefill branch, in every served family: where FLA's ``chunk_gated_delta_rule``
is called, caovan's two-launch prefill (``kernels/gdn_prefill``) runs instead, when ``"caovan_prefill": true``.

Patch of upstream behaviour, documented in place:

* Why: vLLM's prefill runs FLA's chunked pipeline (six to eight Triton launches and their Python per GDN layer per
  prefill step); at the prompt lengths most requests have, that call is host-bound (``docs/prefill-design.md``).
* How: the family record's ``prefill_route`` says where the call is made. ``"layer_attribute"`` (vLLM 0.18 on):
  the layer's ``__init__`` assigns a ``ChunkGatedDeltaRule`` custom op to ``self.chunk_gated_delta_rule``; on a
  layer caovan takes, that attribute becomes ``CaovanChunkGatedDeltaRule``, which holds the in-tree op.
  ``"module_function"`` (0.12 - 0.17): the GDN module calls the FLA function it imported; that module global is
  wrapped (once per process, reversibly). Either way the call keeps vLLM's arguments and results: the initial
  states vLLM gathered from its cache (zeros where a sequence has none) come in, the final states go back in the
  same tensor, which vLLM then scatters to the cache. A call caovan cannot take (positional arguments, an argument
  it does not know set, a dtype or layout outside the kernels) goes to the in-tree op, counted as a fallback.
* Upstream code: ``_forward_core``'s prefill branch ("2.2: Process the remaining part") of each family's GDN module
  (``GdnFamily.gdn_module``) and FLA's ``chunk_gated_delta_rule`` in ``GdnFamily.fla_ops_module``.
* Remove when: vLLM's own prefill is no slower than caovan's at short prompts, or the family leaves the matrix.
"""

from __future__ import annotations

import functools
import importlib
import inspect
from collections.abc import Callable
from typing import Any

import torch

from ..plugin import counters
from .family import GdnFamily

#: The attribute (layer route) or module global (function route) caovan's prefill takes the place of.
PREFILL_NAME = "chunk_gated_delta_rule"
#: Keywords of FLA's ``chunk_gated_delta_rule`` across the served releases that caovan reads or may ignore.
KNOWN_KEYWORDS = frozenset(
    {
        "q",
        "k",
        "v",
        "g",
        "beta",
        "scale",
        "initial_state",
        "output_final_state",
        "cu_seqlens",
        "chunk_indices",  # FLA's own chunk bookkeeping: caovan's kernels number chunks themselves
        "chunk_offsets",
        "use_qk_l2norm_in_kernel",
        "core_attn_out",
        "head_first",
    }
)
_ACTIVATIONS = (torch.float16, torch.bfloat16)


def call_problem(args: tuple, kwargs: dict[str, Any]) -> str | None:
    """Why this call must go to vLLM's own prefill (a short key for the fallback counter), or None."""
    if args:
        return "positional-arguments"
    for name, value in kwargs.items():
        if name not in KNOWN_KEYWORDS and value is not None:
            return f"argument-{name}"
    if kwargs.get("head_first"):
        return "head-first"
    q, v = kwargs["q"], kwargs["v"]
    if q.dtype not in _ACTIVATIONS or kwargs["k"].dtype != q.dtype or v.dtype != q.dtype:
        return "dtype"
    if kwargs.get("cu_seqlens") is None and q.dim() == 4 and q.shape[0] != 1:
        return "batch-without-cu_seqlens"
    state = kwargs.get("initial_state")
    if state is not None and (state.dim() != 4 or sorted(state.shape[-2:]) != sorted((q.shape[-1], v.shape[-1]))):
        return "initial-state-shape"
    return None


def run_prefill(family: GdnFamily, original: Callable[..., Any], args: tuple, kwargs: dict[str, Any]) -> Any:
    """FLA's ``chunk_gated_delta_rule(...)`` contract, ``(o, final_state)``, computed by caovan's prefill."""
    problem = call_problem(args, kwargs)
    if problem is not None:
        counters.record_fallback(f"prefill-{problem}")
        return original(*args, **kwargs)
    from ..kernels.gdn_prefill import KERNEL_NAMES, gdn_prefill

    q, k, v = kwargs["q"], kwargs["k"], kwargs["v"]
    T, HV, V, K = v.shape[-3], v.shape[-2], v.shape[-1], q.shape[-1]
    cu_seqlens = kwargs.get("cu_seqlens")
    if cu_seqlens is None:
        cu_seqlens = torch.tensor([0, T], dtype=torch.int32, device=q.device)
    state = kwargs.get("initial_state")
    if state is None:  # FLA starts from zeros; its final state (when asked) is then a new fp32 tensor
        per_head = (V, K) if family.ssm_layout == "vk" else (K, V)
        state = torch.zeros((cu_seqlens.shape[0] - 1, HV, *per_head), dtype=torch.float32, device=q.device)
    core_attn_out = kwargs.get("core_attn_out")
    o = core_attn_out.reshape(-1)[: v.numel()].view(v.shape) if core_attn_out is not None else torch.empty_like(v)
    gdn_prefill(
        q,
        k,
        v,
        kwargs["g"],
        kwargs["beta"],
        o,
        state,  # vLLM's gathered copy: written in place with the final states, which vLLM then scatters
        cu_seqlens,
        scale=kwargs.get("scale"),
        use_qk_l2norm=bool(kwargs.get("use_qk_l2norm_in_kernel", False)),
        ssm_layout=family.ssm_layout,
    )
    counters.record_prefill(family.family_id, KERNEL_NAMES)
    return o, (state if kwargs.get("output_final_state") else None)


class CaovanChunkGatedDeltaRule(torch.nn.Module):
    """Takes the place of a layer's ``ChunkGatedDeltaRule`` custom op (a submodule, so a module too); holds it
    for the calls caovan leaves to vLLM."""

    def __init__(self, original: torch.nn.Module, family: GdnFamily) -> None:
        super().__init__()
        self.in_tree = original
        self._family = family

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        return run_prefill(self._family, self.in_tree, args, kwargs)


def take_over_layer(layer: Any, family: GdnFamily) -> bool:
    """Route this layer's prefill to caovan (layer route) or make sure the module global is (function route)."""
    if family.prefill_route == "module_function":
        install_module_function(family)
        return True
    original = getattr(layer, PREFILL_NAME, None)
    if isinstance(original, CaovanChunkGatedDeltaRule):
        return True
    if not isinstance(original, torch.nn.Module):
        return False
    setattr(layer, PREFILL_NAME, CaovanChunkGatedDeltaRule(original, family))
    return True


def install_module_function(family: GdnFamily) -> None:
    module = importlib.import_module(family.gdn_module)
    original = getattr(module, PREFILL_NAME)
    if getattr(original, "_caovan_prefill_original", None) is not None:
        return

    @functools.wraps(original)
    def chunk_gated_delta_rule(*args: Any, **kwargs: Any) -> Any:
        return run_prefill(family, original, args, kwargs)

    chunk_gated_delta_rule._caovan_prefill_original = original  # type: ignore[attr-defined]
    setattr(module, PREFILL_NAME, chunk_gated_delta_rule)


def uninstall_module_function(family: GdnFamily) -> bool:
    """Put the family's module global back (function route); True when caovan's wrapper was there."""
    if family.prefill_route != "module_function":
        return False
    try:
        module = importlib.import_module(family.gdn_module)
    except Exception:
        return False
    original = getattr(getattr(module, PREFILL_NAME, None), "_caovan_prefill_original", None)
    if original is None:
        return False
    setattr(module, PREFILL_NAME, original)
    return True


def hook_problem(family: GdnFamily) -> str | None:
    """Why the family's prefill call cannot be reached where its record says (probed without building a layer)."""
    try:
        module = importlib.import_module(family.gdn_module)
    except Exception as exc:
        return f"{family.gdn_module} does not import: {type(exc).__name__}: {exc}"
    if family.prefill_route == "module_function":
        if not callable(getattr(module, PREFILL_NAME, None)):
            return f"{family.gdn_module} has no {PREFILL_NAME} function"
        return None
    source = _init_source(module, family.gdn_class)
    if source is None:
        return f"the source of {family.gdn_class}.__init__ cannot be read"
    if f"self.{PREFILL_NAME} =" not in source:
        return f"{family.gdn_class}.__init__ assigns no self.{PREFILL_NAME}"
    return None


def _init_source(module: Any, class_name: str) -> str | None:
    cls = getattr(module, class_name, None)
    try:
        return inspect.getsource(cls.__init__) if cls is not None else None
    except (OSError, TypeError):
        return None
