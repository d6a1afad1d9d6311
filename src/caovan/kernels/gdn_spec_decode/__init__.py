"""GatedDeltaNet speculative-decode (MTP verify) step in two Triton launches.

``gdn_spec_decode`` does, for a batch of spec sequences, what vLLM 0.21.0 does with
``causal_conv1d_update(..., num_accepted_tokens=..., query_start_loc=...)`` followed by
``fused_sigmoid_gating_delta_rule_update(..., use_qk_l2norm_in_kernel=True,
inplace_final_state=True)``: conv state and SSM state updated in place, output written into the
caller's buffer. ``naive.gdn_spec_decode_reference`` is the float64 oracle with the same
arguments.

Modules: ``entry`` (the public function), ``envelope`` (the shapes, activation and dtypes the kernels take),
``validation`` (the entry's argument checks), ``plans`` (launch plans per argument layout), ``launcher``
(direct launch, PDL, device and stream), ``scratch`` (the q/k buffer), ``triton_kernels`` (the kernels),
``launch_configs`` / ``occupancy`` (launch options per GPU).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..lazy_exports import lazy_exports

if TYPE_CHECKING:
    from .entry import KERNEL_NAMES, gdn_spec_decode

__all__ = ["KERNEL_NAMES", "gdn_spec_decode"]

# Re-exported on first access, not at import: ``envelope`` (read by ``caovan check-model``) and
# ``launch_configs`` must import without torch or Triton.
__getattr__, __dir__ = lazy_exports(__name__, globals(), {"KERNEL_NAMES": "entry", "gdn_spec_decode": "entry"})
