"""vLLM's own speculative-decode GDN core, for a side-by-side comparison with ``gdn_spec_decode``.

``VllmSpecCore`` replays the spec branch of the GDN layer's ``_forward_core`` for a pure-spec batch, statement by
statement, as the family record's ``spec_path`` says it runs (vLLM 0.21.0:
vllm/model_executor/layers/mamba/gdn_linear_attn.py; 0.22 on: .../mamba/gdn/qwen_gdn_linear_attn.py; 0.12 - 0.16:
.../models/qwen3_next.py):

1. ``causal_conv1d_update(mixed_qkv, conv_state, conv_weights, conv1d.bias, "silu",
   conv_state_indices=spec_state_indices[:, 0][:num_spec_decodes], num_accepted_tokens=...,
   query_start_loc=spec_query_start_loc, max_query_len=spec_state_indices.size(-1),
   validate_data=False)`` - it writes the conv output over ``mixed_qkv`` in place when the conv
   state has the activations' dtype;
2. ``rearrange_mixed_qkv``: split q|k|v, one ``torch.cat`` into a flat buffer, views
   (1, T, heads, dim);
3. vLLM 0.18 on: ``fused_sigmoid_gating_delta_rule_update(A_log, a, b, dt_bias, q, k, v, initial_state=ssm_state,
   inplace_final_state=True, cu_seqlens=spec_query_start_loc[:num_spec_decodes + 1],
   ssm_state_indices=spec_state_indices, num_accepted_tokens=..., use_qk_l2norm_in_kernel=True)``;
   before: ``g, beta = fused_gdn_gating(A_log, a, b, dt_bias)`` (every token; the spec tokens' ``g``/``beta``
   selected in a mixed batch), then ``fused_recurrent_gated_delta_rule(q, k, v, g, beta, ...)`` with the same
   keywords;
4. ``core_attn_out[:num_actual_tokens] = core_attn_out_spec.squeeze(0)``.

The kernel functions are looked up in the GDN module's namespace (``from ... import f`` bound
them there), so this calls exactly what the installed vLLM calls, including any patch applied to
that module.

It takes the same tensors as ``caovan.kernels.gdn_spec_decode.gdn_spec_decode`` so both can run on
clones of one input set. ``check_inputs`` refuses (ValueError) what the family cannot express:
another SSM layout than the family's, SSM inner dims that are not contiguous (its kernel only uses
stride(0)), and another null-slot rule. ``__call__`` runs vLLM's statements only,
so its eager time is vLLM's kernel-side cost without the metadata plumbing of the real
``_forward_core`` (forward-context and dict lookups): a lower bound of what vLLM pays per layer.
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import TYPE_CHECKING, Any

from caovan.adapters.family import CONV_UPDATE, GATING, RECURRENT_UPDATE

if TYPE_CHECKING:
    from caovan.adapters.family import GdnFamily


def load_vllm_gdn_module(name: str | None = None) -> ModuleType:
    """Import vLLM's GDN layer module (where the installed vLLM's family keeps it, and, bound by import, the
    kernels its core calls); ImportError names the module and the cause."""
    if name is None:
        from caovan.adapters.registry import installed_family

        try:
            name = installed_family().gdn_module
        except RuntimeError as exc:
            raise ImportError(str(exc)) from exc
    try:
        return importlib.import_module(name)
    except Exception as exc:  # vLLM import failures are not always ImportError
        raise ImportError(f"cannot import vLLM's GDN module {name!r}: {type(exc).__name__}: {exc}") from exc


class VllmSpecCore:
    """vLLM's spec-decode core (conv update, then gating and the delta rule as the family runs them), our calling
    convention."""

    activation = "silu"  # GatedDeltaNetAttention.activation = config.hidden_act ("silu" for Qwen)

    def __init__(
        self,
        module: ModuleType | None = None,
        *,
        family: GdnFamily | None = None,
        gather_gating: bool = True,
        null_slot_max: int | None = None,
    ):
        """``family``: the record whose spec path, SSM layout and null-slot rule to replay (default: the installed
        vLLM's, unless ``module`` is given: then vLLM 0.20's path, for fakes). ``gather_gating=False`` replays the
        families from 0.18 to 0.28, whose spec branch hands the recurrent kernel the whole ``a``/``b`` of a mixed
        batch (right only while the spec tokens lead the batch, as vLLM's batch order puts them); the default
        gathers them as vLLM 0.29 on does (and as the gating-first families do with ``g``/``beta``), so that a mixed
        case measures the kernels, not that ordering. ``null_slot_max``: overrides the family's slot rule."""
        if family is None and module is None:
            from caovan.adapters.registry import installed_family

            try:
                family = installed_family()
            except RuntimeError as exc:
                raise ImportError(str(exc)) from exc
        names = [name for name, _ in family.spec_path] if family is not None else [CONV_UPDATE[0], RECURRENT_UPDATE[0]]
        self.gating_first = GATING[0] in names
        self.gather_gating = gather_gating or self.gating_first
        if null_slot_max is None:
            null_slot_max = family.null_slot_max if family is not None else 0
        self.null_slot_max = null_slot_max
        self.ssm_layout = family.ssm_layout if family is not None else "vk"
        mod = module if module is not None else load_vllm_gdn_module(family.gdn_module)
        missing = [f for f in names if not hasattr(mod, f)]
        if missing:
            raise ImportError(f"{mod.__name__} has no {', '.join(missing)}: not a GDN module caovan knows")
        self.module_name = mod.__name__
        self.causal_conv1d_update = mod.causal_conv1d_update
        if self.gating_first:
            self.fused_gdn_gating = mod.fused_gdn_gating
            self.fused_recurrent_gated_delta_rule = mod.fused_recurrent_gated_delta_rule
        else:
            self.fused_sigmoid_gating_delta_rule_update = mod.fused_sigmoid_gating_delta_rule_update

    # Same arithmetic as GatedDeltaNetAttention.rearrange_mixed_qkv with tp_size folded into the
    # head counts (key_dim // tp_size == num_k_heads * head_k_dim per GPU).
    @staticmethod
    def rearrange_mixed_qkv(mixed_qkv, num_k_heads: int, head_k_dim: int, head_v_dim: int):
        import torch

        seq_len = mixed_qkv.shape[0]
        q_dim = k_dim = num_k_heads * head_k_dim
        v_dim = mixed_qkv.shape[-1] - q_dim - k_dim
        query, key, value = torch.split(mixed_qkv, [q_dim, k_dim, v_dim], dim=-1)
        fused = torch.cat([query.reshape(-1), key.reshape(-1), value.reshape(-1)], dim=0)
        q_size = seq_len * q_dim
        k_size = seq_len * k_dim
        query = fused[0:q_size].view(1, seq_len, -1, head_k_dim)
        key = fused[q_size : q_size + k_size].view(1, seq_len, -1, head_k_dim)
        value = fused[q_size + k_size :].view(1, seq_len, -1, head_v_dim)
        return query, key, value

    def check_inputs(
        self,
        mixed_qkv,
        a,
        b,
        A_log,
        dt_bias,
        conv_weight,
        conv_bias,
        conv_state,
        ssm_state,
        query_start_loc,
        state_indices,
        num_accepted_tokens,
        out,
        *,
        ssm_layout: str = "vk",
        null_slot_max: int = 0,
        **_: Any,
    ) -> None:
        """Refuse what vLLM's kernels cannot express (kept out of ``__call__`` so the timed call runs only the
        statements vLLM runs)."""
        if ssm_layout != self.ssm_layout:
            raise ValueError(
                f"VllmSpecCore: ssm_layout={ssm_layout!r}; this vLLM's kernel only handles {self.ssm_layout!r}"
            )
        _, inner, innermost = ssm_state.shape[1:]
        if ssm_state.stride()[1:] != (inner * innermost, innermost, 1):
            raise ValueError(
                f"VllmSpecCore: ssm_state inner strides {tuple(ssm_state.stride()[1:])} "
                "must be contiguous "
                f"{(inner * innermost, innermost, 1)}: vLLM's kernel only uses stride(0)"
            )
        if null_slot_max != self.null_slot_max:
            raise ValueError(
                f"VllmSpecCore: null_slot_max={null_slot_max}; this vLLM skips index <= {self.null_slot_max} only"
            )

    def __call__(
        self,
        mixed_qkv,
        a,
        b,
        A_log,
        dt_bias,
        conv_weight,
        conv_bias,
        conv_state,
        ssm_state,
        query_start_loc,
        state_indices,
        num_accepted_tokens,
        out,
        *,
        num_k_heads: int,
        head_k_dim: int,
        head_v_dim: int,
        ssm_layout: str = "vk",  # accepted for the shared calling convention; see check_inputs
        null_slot_max: int = 0,
        token_index: Any = None,
    ) -> None:
        if token_index is not None:
            # Mixed prefill+spec batch: _forward_core gathers the spec rows with index_select and scatters the
            # spec output with index_copy_; a and b as __init__ says.
            mixed_qkv = mixed_qkv.index_select(0, token_index)
            if self.gather_gating:
                a = a.index_select(0, token_index)
                b = b.index_select(0, token_index)

        num_spec_decodes = query_start_loc.shape[0] - 1
        # 1.1 conv over the multi-query part (kernel writes its output over mixed_qkv when dtypes
        # match)
        mixed_qkv_spec = self.causal_conv1d_update(
            mixed_qkv,
            conv_state,
            conv_weight,
            conv_bias,
            self.activation,
            conv_state_indices=state_indices[:, 0][:num_spec_decodes],
            num_accepted_tokens=num_accepted_tokens,
            query_start_loc=query_start_loc,
            max_query_len=state_indices.size(-1),
            validate_data=False,
        )
        query_spec, key_spec, value_spec = self.rearrange_mixed_qkv(mixed_qkv_spec, num_k_heads, head_k_dim, head_v_dim)
        # 2.1 recurrent part
        spec_kwargs = dict(
            initial_state=ssm_state,
            inplace_final_state=True,
            cu_seqlens=query_start_loc[: num_spec_decodes + 1],
            ssm_state_indices=state_indices,
            num_accepted_tokens=num_accepted_tokens,
            use_qk_l2norm_in_kernel=True,
        )
        if self.gating_first:
            g, beta = self.fused_gdn_gating(A_log, a, b, dt_bias)
            core_attn_out_spec, _last_recurrent_state = self.fused_recurrent_gated_delta_rule(
                q=query_spec, k=key_spec, v=value_spec, g=g, beta=beta, **spec_kwargs
            )
        else:
            core_attn_out_spec, _last_recurrent_state = self.fused_sigmoid_gating_delta_rule_update(
                A_log=A_log, a=a, b=b, dt_bias=dt_bias, q=query_spec, k=key_spec, v=value_spec, **spec_kwargs
            )
        # 3. merge
        if token_index is not None:
            out.index_copy_(0, token_index, core_attn_out_spec.squeeze(0).to(out.dtype))
        else:
            num_actual_tokens = mixed_qkv.shape[0]
            out[:num_actual_tokens] = core_attn_out_spec.squeeze(0)
