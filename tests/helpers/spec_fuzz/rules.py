"""What a family's vLLM lets a spec-decode batch look like, read from its record (``caovan.adapters.families``).

The generator and the shrinker read these rules and nothing else of a family, so a new family with a new record
is fuzzed as its record says, with no code naming it.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from caovan.adapters.family import GdnFamily

    from .cases import FuzzCase


@dataclass(frozen=True)
class LayoutRules:
    family_id: str
    label: str
    #: The slot id vLLM writes for "no slot" (``NULL_BLOCK_ID`` 0 from vLLM 0.20, ``PAD_SLOT_ID`` -1 before); every
    #: id at or below it is null, so block 0 is a real block only where this is -1.
    null_slot: int
    #: Whether a live sequence may carry a null column (vLLM's recurrent kernel skips such a slot itself); else only
    #: CUDA-graph padding rows, which have no tokens, carry null slots.
    null_write_columns: bool
    ssm_layout: str
    #: Whether the family may store the conv state dim-first (``is_conv_state_dim_first``).
    conv_dim_first: bool
    a_log_in_act_dtype: bool
    #: Whether the spec branch gathers the spec tokens' gating inputs, so that a mixed batch may interleave spec and
    #: other requests; else it hands the kernel the whole ``a``/``b`` and the spec tokens must lead the batch.
    spec_tokens_anywhere: bool
    #: Why caovan does not serve the family (no case is drawn); None: served.
    refusal: str | None = None

    @property
    def block0_is_real(self) -> bool:
        return self.null_slot < 0


def layout_rules(family: GdnFamily) -> LayoutRules:
    return LayoutRules(
        family_id=family.family_id,
        label=family.label,
        null_slot=family.null_slot_max,
        null_write_columns=family.recurrent_skips_null_slots,
        ssm_layout=family.ssm_layout,
        conv_dim_first=family.conv_dim_first_function is not None,
        a_log_in_act_dtype=family.a_log_dtype == "model",
        spec_tokens_anywhere=family.spec_gating_selected,
        refusal=family.refusal,
    )


def lay_out(case: FuzzCase, rules: LayoutRules) -> FuzzCase:
    """The case with the family's state layout, null-slot sentinel and ``A_log`` dtype (a regression case found on
    another family is run this way)."""
    return replace(
        case,
        ssm_layout=rules.ssm_layout,
        null_slot_max=rules.null_slot,
        a_log_in_act_dtype=rules.a_log_in_act_dtype,
    )


def cannot_express(case: FuzzCase, rules: LayoutRules) -> str | None:
    """Why this family's vLLM never lays a batch out like ``case`` (None: it can)."""
    if rules.refusal is not None:
        return f"nothing of caovan's runs on this release: {rules.refusal}"
    if case.null_columns and not rules.null_write_columns:
        return f"{rules.family_id}'s recurrent kernel checks no slot: a live sequence never has a null column"
    if case.conv_dim_first and not rules.conv_dim_first:
        return f"{rules.family_id} never stores the conv state dim-first"
    if not rules.spec_tokens_anywhere and any(before < len(case.seq_lens) for _, before in case.others):
        return f"{rules.family_id} hands its kernel the whole a/b of a mixed batch: its spec tokens lead the batch"
    return None
