"""The two Triton kernels of the GatedDeltaNet speculative-decode (MTP verify) step, re-exported.

They replace vLLM's ``causal_conv1d_update`` + ``fused_sigmoid_gating_delta_rule_update`` pair (plus the q/k/v split
and copies between them): ``qk_conv_kernel`` (the conv, L2 norm and scratch store of q and k, once per key head),
then ``v_gdn_kernel`` (the V conv, gating and delta-rule recurrence, reading that scratch); ``conv_update`` holds
the causal conv both use. Neither takes an integer argument that changes from call to call (the batch size lives in
the grid, token counts come from ``query_start_loc``), so one compiled kernel serves every batch size. Design:
docs/bench/kernel-design.md.
"""

from __future__ import annotations

from .qk_conv_kernel import _caovan_sm75_prepare_qk_conv_spec_decode_kernel
from .v_gdn_kernel import _caovan_sm75_fused_v_gdn_spec_decode_kernel

__all__ = ["_caovan_sm75_fused_v_gdn_spec_decode_kernel", "_caovan_sm75_prepare_qk_conv_spec_decode_kernel"]
