"""The target model's weights for the serve tier: vLLM's dummy weights, or Hugging Face's init of an untrained
Qwen3-Next re-drawn over them (``hf_init_weights`` says why a token comparison needs it)."""

from __future__ import annotations

import zlib
from collections import Counter
from typing import Any

from engine_observers import stock_gdn_class


def moe_layer_class() -> type:
    """vLLM's fused-MoE layer class: ``FusedMoE`` up to vLLM 0.23; from 0.24 the runners ``FusedMoE`` makes (0.27
    drops the name), all ``MoERunnerInterface``."""
    from vllm.model_executor.layers import fused_moe

    legacy = getattr(fused_moe, "FusedMoE", None)
    if isinstance(legacy, type):
        return legacy
    from vllm.model_executor.layers.fused_moe.runner.moe_runner_interface import MoERunnerInterface

    return MoERunnerInterface


#: ``--weights`` choices (``hf_init_weights`` says what the two hf-init modes draw).
WEIGHT_MODES = ("hf-init", "hf-init-long-memory", "dummy")
#: ``A_log`` ranges, as ``log U(low, high)``: Hugging Face's init, and heads that keep a prompt in their state.
A_LOG_RANGES = {"hf-init": (0.0, 16.0), "hf-init-long-memory": (0.01, 0.1)}
#: Hugging Face's ``initializer_range`` of the Qwen3-Next config (std of the normal init of every matrix).
INITIALIZER_RANGE = 0.02


def hf_init_weights(model: Any, a_log_range: tuple[float, float] = A_LOG_RANGES["hf-init"]) -> dict[str, Any]:
    """Re-draw the target model's weights the way Hugging Face initialises an untrained Qwen3-Next.

    Why: vLLM's dummy weights are uniform in [-1e-3, 1e-3] for every tensor, norm gains included.  The GDN
    branch then passes through a gated RMSNorm with gain ~1e-3 and an output projection of the same size, and
    adds about 1e-7 to a residual stream carried by ~6e-4 embeddings: below fp16 resolution, so the logits
    would not depend on the GDN kernels at all and a token comparison could not fail.  With Hugging Face's
    init (matrices normal(0, 0.02), Gemma-style RMSNorm offsets 0, gated-norm gain 1, GDN ``dt_bias`` 1 and
    ``A_log`` = log U(0, 16), as in ``Qwen3NextPreTrainedModel._init_weights``) the three GDN layers carry
    most of the residual stream.  Every tensor gets its own generator seeded from its name, so every engine
    of the tier gets the same weights.

    ``a_log_range``: Hugging Face's ``A_log = log U(0, 16)`` makes a head's state decay by about exp(-10) per token,
    so what a prompt left in the state is gone a token later and a lost prompt state hardly moves the logits.
    ``hf-init-long-memory`` draws ``log U(0.01, 0.1)`` instead (decay 0.88 - 0.99 per token, as the slow heads of
    trained models keep context): the FULL-graph tests need the prompt's state to matter.

    Kept at the dummy values: the MoE blocks (router, experts, shared expert).  Their output then stays
    negligible, which keeps expert routing, a discrete top-k choice that a rounding difference can flip, from
    moving the logits by more than rounding; the MoE is not what this tier tests.  The MTP draft keeps its
    dummy weights too (only tensors it shares with the target change).
    """
    import torch
    from vllm.model_executor.layers.layernorm import GemmaRMSNorm, RMSNormGated

    GatedDeltaNetAttention = stock_gdn_class()  # the family's in-tree layer class
    moe = moe_layer_class()
    moe_blocks = [name for name, m in model.named_modules() if any(isinstance(c, moe) for c in m.children())]
    rules: Counter[str] = Counter()
    untouched: list[str] = []
    with torch.inference_mode():
        for module_name, module in model.named_modules():
            in_moe = any(module_name == b or module_name.startswith(b + ".") for b in moe_blocks)
            for param_name, param in module.named_parameters(recurse=False):
                name = f"{module_name}.{param_name}" if module_name else param_name
                if in_moe:
                    rules["MoE block: kept dummy"] += 1
                    continue
                if not torch.is_floating_point(param):
                    untouched.append(name)
                    continue
                generator = torch.Generator(device=param.device)
                generator.manual_seed(zlib.crc32(name.encode()))
                if isinstance(module, GatedDeltaNetAttention) and param_name == "A_log":
                    low, high = a_log_range
                    param.uniform_(low, high, generator=generator).clamp_(min=1e-3).log_()
                    rule = f"A_log = log U({low:g}, {high:g})"
                elif isinstance(module, GatedDeltaNetAttention) and param_name == "dt_bias":
                    param.fill_(1.0)
                    rule = "dt_bias = 1"
                elif isinstance(module, GemmaRMSNorm) and param_name == "weight":
                    param.zero_()
                    rule = "Gemma RMSNorm offset = 0"
                elif isinstance(module, RMSNormGated) and param_name == "weight":
                    param.fill_(1.0)
                    rule = "gated RMSNorm gain = 1"
                elif param_name.endswith("bias"):
                    param.zero_()
                    rule = "bias = 0"
                elif param.dim() >= 2:
                    param.normal_(0.0, INITIALIZER_RANGE, generator=generator)
                    rule = f"matrix ~ normal(0, {INITIALIZER_RANGE})"
                else:
                    untouched.append(name)
                    continue
                rules[rule] += 1
    return {"rules": dict(rules), "untouched": untouched, "moe_blocks": moe_blocks}
