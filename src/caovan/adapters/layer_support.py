"""What caovan decides about one vLLM GDN layer, in every family: whether it takes the layer over, and the layer's
tensors as the kernels take them. The override (``override.py``) calls these; nothing here depends on where a
family keeps its layer class, except what the family record (``family.py``) says.
"""

from __future__ import annotations

import functools
import importlib
import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .. import PLUGIN_NAME
from ..log import logger
from ..plugin import counters, graph_padding_patch, model_loader, uniform_decode_guard
from ..plugin.options import AUTOSPEC_ENV, CaovanRequireError, parse_options
from .family import GdnFamily

_announced: set[str] = set()


def _once(key: str, level: int, msg: str, *args: Any) -> None:
    if key not in _announced:
        _announced.add(key)
        logger.log(level, msg, *args)


def announce_once(key: str, message: str) -> None:
    """One warning per process for a reason caovan leaves layers to vLLM."""
    _once(key, logging.WARNING, "%s: %s", PLUGIN_NAME, message)


@dataclass(frozen=True)
class LayerPlan:
    """Per-layer constants the hot path needs, fixed at construction."""

    num_k_heads: int
    num_v_heads: int
    head_k_dim: int
    head_v_dim: int
    conv_dim_first: bool


_torch_function_off: Any = None


def _plain_data_ptr(tensor: Any) -> int:
    """``tensor.data_ptr()`` with torch-function dispatch off.

    vLLM's parameter classes (``BasevLLMParameter``, the conv weight's) override ``__torch_function__``, which
    sends every method call on them through Python: ~1 us for ``data_ptr()`` against 0.24 us with the dispatch
    off and 0.07 us for a plain tensor (development CPU, a subclass shaped like vLLM's).
    """
    global _torch_function_off
    if _torch_function_off is None:
        import torch

        _torch_function_off = torch._C.DisableTorchFunctionSubclass
    with _torch_function_off():
        return tensor.data_ptr()


def kernel_tensors(layer: Any, conv_dim_first: bool, virtual_engine: int | None = None) -> tuple:
    """(A_log, dt_bias, conv_weight 2-D, conv_bias, conv_state dim-first, ssm_state): the layer's own tensors as
    the kernels take them, the weights' derived once and re-derived only when a source changes. ``virtual_engine``:
    where ``kv_cache`` holds one ``[conv, ssm]`` per virtual engine (before vLLM 0.19), the forward context's engine.

    Why the weights are cached: read through ``nn.Module.__getattr__`` (parameters, the ``conv1d`` submodule) and
    viewed on every call, they cost ~8 us of Python per GDN layer per decode step (development CPU: each attribute
    0.6-1.3 us, the views 1-2 us), on the critical path under PIECEWISE graphs. On the H200 host ``caovan bench
    layer`` went from ~41 to ~35 us per call with this cache (runs pinned to one CPU).

    Why the cache states are not: a reference kept between calls keeps vLLM's storage alive after vLLM lets it go.
    vLLM (0.21 on) captures CUDA graphs on a minimal KV cache to measure their memory, drops it, and sizes the real
    cache from the memory that frees; caovan's spec step ran in that capture, and a cache holding its conv and SSM
    views kept every profiling KV tensor alive, so the real allocation died of OOM (the 27B architecture on a lent
    H100 with vLLM 0.25.0). So ``kv_cache`` is read, and the conv state viewed, on every call.

    What can change while serving, and is checked: a weight reload replacing a Parameter or assigning its ``.data``
    (the data pointer of the viewed weight is compared; the others are passed as they are, so their current storage
    is what the kernels read), an in-place update of ``A_log`` (its version counter: where it is copied to fp32,
    the copy must follow). Object ids are safe keys: the cache holds those objects (the layer's own parameters),
    so their ids cannot be reused. A layer whose parameters do not live where ``nn.Module`` keeps them takes the
    attribute path, uncached.
    """
    params = layer._parameters
    conv = layer._modules.get("conv1d")
    conv_params = conv._parameters if conv is not None else {}
    a_log, dt_bias, weight = params.get("A_log"), params.get("dt_bias"), conv_params.get("weight")
    kv = layer.kv_cache if virtual_engine is None else layer.kv_cache[virtual_engine]
    conv_state, ssm_state = kv[0], kv[1]
    conv_view = conv_state if conv_dim_first else conv_state.transpose(-1, -2)
    if a_log is None or dt_bias is None or weight is None:
        conv = layer.conv1d
        return (*_weight_args(layer.A_log, layer.dt_bias, conv.weight, conv.bias), conv_view, ssm_state)
    bias = conv_params.get("bias")
    key = (id(a_log), a_log._version, id(dt_bias), id(weight), _plain_data_ptr(weight), id(bias))
    cached = layer.__dict__.get("_caovan_weight_tensors")
    if cached is None or cached[0] != key:
        cached = layer.__dict__["_caovan_weight_tensors"] = (key, _weight_args(a_log, dt_bias, weight, bias))
    return (*cached[1], conv_view, ssm_state)


def _weight_args(a_log, dt_bias, weight, bias) -> tuple:
    """The layer's weights as the kernels take them: the conv weight 2-D, ``A_log`` in float32 (vLLM 0.12 - 0.18
    create it in the model's dtype; the kernels, compiled for sm_75 with an fp32 ``A_log``, read the same values
    from an fp32 copy, re-made when an in-place weight update moves its version)."""
    a_log = a_log if a_log.dtype == _float32() else a_log.detach().float()
    return (a_log, dt_bias, weight.view(weight.size(0), weight.size(2)), bias)


def _float32() -> Any:
    import torch

    return torch.float32


def gpu_reason(capability: tuple[int, int] | None) -> str | None:
    """Why the kernels cannot run on a GPU of this compute capability, or None when they can.

    Decided here, at layer construction, through the same ``config_for`` the kernels call on their first launch:
    a GPU it refuses (older than sm_75) would otherwise make that first launch raise in the worker, at the
    first spec batch or during CUDA-graph capture.  A layer that passes never reaches that error at run time:
    its tensors live on the device checked here.
    """
    from ..kernels.gdn_spec_decode.launch_configs import config_for

    if capability is None:
        return "the GPU's compute capability could not be read"
    try:
        config_for(capability)
    except ValueError:
        return f"GPU sm{capability[0]}{capability[1]} is older than the kernels' sm_75 target"
    return None


def platform_is_cuda() -> bool:
    """vLLM's platform is CUDA (asked here, once per layer decision: the discovery tier answers it for a CPU rig)."""
    from vllm.platforms import current_platform

    return current_platform.is_cuda()


def current_gpu_capability() -> tuple[int, int] | None:
    """Compute capability of the device this process builds the model on; None when it cannot be read."""
    import torch
    from vllm.platforms import current_platform

    try:
        if torch.cuda.is_initialized():
            # vLLM's workers select their device before building the model; this is the query the kernels make.
            capability = torch.cuda.get_device_capability(torch.cuda.current_device())
        else:
            # Device 0 is the one CUDA would pick; vLLM's platform reads it without initialising CUDA.
            capability = current_platform.get_device_capability(0)
    except Exception:  # a failed query leaves the layer to vLLM (reported as unknown), never breaks the build
        return None
    return None if capability is None else (int(capability[0]), int(capability[1]))


def envelope_reasons(layer: Any) -> list[str]:
    """Why this layer's shape, conv activation or dtypes fall outside what the kernels take (the kernels'
    envelope, the same check ``caovan check-model`` and the kernel entry make); empty when they fit.

    Read from what the kernels will be handed: heads per tensor-parallel rank, the conv weight's width and dtype
    (the model dtype, as the activations'), and the state dtypes vLLM allocates the caches with. Were a layer
    taken over outside the envelope, the entry would refuse its first spec batch inside a serving worker.
    """
    from ..kernels.gdn_spec_decode.envelope import envelope_problems

    tp = layer.tp_size
    weight = layer.conv1d.weight  # (conv_dim / tp, 1, width), viewed 2-D for the kernels
    try:
        conv_state_dtype, ssm_state_dtype = layer.get_state_dtype()
    except Exception as exc:  # a reason, never an error in the model build
        return [f"state dtypes unknown (get_state_dtype() raised {type(exc).__name__}: {exc})"]
    return envelope_problems(
        num_k_heads=layer.num_k_heads // tp,
        num_v_heads=layer.num_v_heads // tp,
        head_k_dim=layer.head_k_dim,
        head_v_dim=layer.head_v_dim,
        conv_width=weight.shape[-1],
        activation=layer.activation,
        activation_dtype=weight.dtype,
        conv_state_dtype=conv_state_dtype,
        ssm_state_dtype=ssm_state_dtype,
    )


def unsupported_reasons(layer: Any, is_cuda: bool, capability: tuple[int, int] | None) -> list[str]:
    reasons = []
    if not is_cuda:
        reasons.append("platform is not CUDA")
    elif (why := gpu_reason(capability)) is not None:
        reasons.append(why)
    if not getattr(layer, "num_spec", 0):
        reasons.append("speculative decoding is off (no --speculative-config): no spec-decode step to accelerate")
    reasons += envelope_reasons(layer)
    return reasons


def speculative_config_token(num_spec: int, environ: Mapping[str, str] | None = None) -> str:
    """Turbo3's ``speculative_config=auto MTP=3`` when ``caovan serve``'s AutoSpec chose this depth, else the
    depth the user passed (``speculative_config MTP=3``)."""
    env = os.environ if environ is None else environ
    chosen = env.get(AUTOSPEC_ENV, "") == str(num_spec)
    return f"speculative_config{'=auto' if chosen else ''} MTP={num_spec}"


def plan_for_layer(layer: Any, family: GdnFamily) -> LayerPlan | None:
    """Decide, once per layer at construction, whether caovan takes this layer's spec-decode core."""
    from vllm.config import get_current_vllm_config

    options = parse_options(get_current_vllm_config().additional_config)  # malformed -> clear error at start-up
    if not options.enabled:
        _once("off", logging.INFO, "%s: off (%s); vLLM's own GDN kernels run", PLUGIN_NAME, options.source)
        return None
    is_cuda = platform_is_cuda()
    reasons = unsupported_reasons(layer, is_cuda, current_gpu_capability() if is_cuda else None)
    if reasons:
        why = "; ".join(reasons)
        if options.require:
            raise CaovanRequireError(f"{PLUGIN_NAME}: require mode is on but caovan cannot activate: {why}")
        _once(
            "unsupported:" + why,
            logging.WARNING,
            "%s: inactive for GDN layers, vLLM's kernels run: %s",
            PLUGIN_NAME,
            why,
        )
        return None
    counters.install_exit_hook()
    _once(
        "on",
        logging.INFO,
        "%s: family=%s caovan_mode=%s require=%s %s: GDN spec-decode core routed to caovan",
        PLUGIN_NAME,
        family.family_id,
        options.mode,
        options.require,
        speculative_config_token(layer.num_spec),
    )
    return LayerPlan(
        num_k_heads=layer.num_k_heads // layer.tp_size,
        num_v_heads=layer.num_v_heads // layer.tp_size,
        head_k_dim=layer.head_k_dim,
        head_v_dim=layer.head_v_dim,
        conv_dim_first=conv_dim_first(family),
    )


@functools.cache
def family_hook_problem(family: GdnFamily) -> str | None:
    """``prefill_hook.hook_problem``, asked once per family and process: it reads the layer class's source, the
    same for each of a model's GDN layers."""
    from .prefill_hook import hook_problem

    return hook_problem(family)


def prefill_reasons(layer: Any, family: GdnFamily, is_cuda: bool, capability: tuple[int, int] | None) -> list[str]:
    """Why caovan's GDN prefill cannot take this layer's prefill; empty when it can."""
    from ..kernels.gdn_prefill.envelope import prefill_envelope_problems

    reasons = []
    if not is_cuda:
        reasons.append("platform is not CUDA")
    elif (why := gpu_reason(capability)) is not None:
        reasons.append(why)
    if (why := family_hook_problem(family)) is not None:
        reasons.append(why)
    tp = layer.tp_size
    reasons += prefill_envelope_problems(
        num_k_heads=layer.num_k_heads // tp,
        num_v_heads=layer.num_v_heads // tp,
        head_k_dim=layer.head_k_dim,
        head_v_dim=layer.head_v_dim,
        activation_dtype=layer.conv1d.weight.dtype,  # the model dtype, as the activations'
        capability=capability,
    )
    return reasons


def prefill_plan_for_layer(layer: Any, family: GdnFamily) -> bool:
    """Decide, once per layer at construction, whether caovan's GDN prefill takes this layer's prefill calls."""
    from vllm.config import get_current_vllm_config

    options = parse_options(get_current_vllm_config().additional_config)
    if not options.prefill:
        return False
    is_cuda = platform_is_cuda()
    reasons = prefill_reasons(layer, family, is_cuda, current_gpu_capability() if is_cuda else None)
    if reasons:
        why = "; ".join(reasons)
        if options.require:
            raise CaovanRequireError(f"{PLUGIN_NAME}: require mode is on but caovan's GDN prefill cannot run: {why}")
        _once(
            "prefill-unsupported:" + why,
            logging.WARNING,
            "%s: GDN prefill stays vLLM's (GDNCore backend=vllm_fla): %s",
            PLUGIN_NAME,
            why,
        )
        return False
    counters.install_exit_hook()
    _once(
        "prefill-on",
        logging.INFO,
        "%s: family=%s caovan_prefill=true: GDN prefill routed to caovan (GDNCore backend=caovan_gdncore)",
        PLUGIN_NAME,
        family.family_id,
    )
    return True


def conv_dim_first(family: GdnFamily) -> bool:
    """Whether this vLLM stores the conv state dim-first, asked as the family's own GDN module asks it."""
    if family.conv_dim_first_function is None:
        return False
    gdn = importlib.import_module(family.gdn_module)
    return bool(getattr(gdn, family.conv_dim_first_function)())


def check_required_model(vllm_config: Any, model_config: Any, model: Any) -> None:
    """After the target model is built: require mode fails start-up when caovan took over none of its layers, and
    an enabled caovan says in one line when the model has no GDN layer at all (otherwise the start-up PASS line
    would be the last word, and the user would believe caovan active). A model with GDN layers gets the
    uniform-decode guard (``plugin/uniform_decode_guard.py``) and, where vLLM's GDN builder needs it, the
    graph-padding patch (``plugin/graph_padding_patch.py``)."""
    if not model_loader.is_target_model(vllm_config, model_config):
        return  # the MTP draft (or another auxiliary model) has no GDN layer of its own
    options = parse_options(getattr(vllm_config, "additional_config", None))
    if not options.enabled:
        return
    # Every layer of ours carries _caovan_plan (None when it stays vLLM's; it then said why when it was built).
    layers = [module for module in model.modules() if hasattr(module, "_caovan_plan")]
    plans = [layer._caovan_plan for layer in layers]
    if layers:
        # A GDN model: its prompts must stay out of the spec-decode FULL graph, and its padded spec batches must
        # reach the graph's buffers, whoever runs its layers.
        family = layers[0]._caovan_family
        graph_padding_patch.install(family)
        uniform_decode_guard.install(vllm_config, family)
    if any(plan is not None for plan in plans) or any(getattr(layer, "_caovan_prefill", False) for layer in layers):
        return
    name = getattr(model_config, "model", "this model")
    what = f"{name} has no GDN layer caovan can take over (model class {type(model).__name__})"
    if options.require:
        raise CaovanRequireError(f"{PLUGIN_NAME}: require mode is on but {what}")
    if not plans:
        _once("no-gdn-layer", logging.WARNING, "%s: caovan is enabled but %s: vLLM's own path runs", PLUGIN_NAME, what)
