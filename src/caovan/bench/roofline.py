"""DRAM bytes one spec-decode step must move, and the time that takes at a measured bandwidth.

The count is the minimum any implementation of the contract has to move (no re-reads, no scratch):

per sequence with tokens (length T_n) whose conv slot (column 0) is valid
  - conv window read: width-1 columns of conv_dim at offset num_accepted-1 (the rest of the new
    window is a subset of those columns plus the new inputs);
  - conv window written: width-2+T_n columns (what vLLM's causal_conv1d_update writes);
  - inputs: T_n rows of mixed_qkv, a and b;
  - if the initial SSM slot (column num_accepted-1) is valid: the state read once, and written
    once for each token column t < T_n whose slot is valid (the T-times write that lets vLLM roll
    back rejected drafts);
per sequence with tokens: its T_n output rows (null-slot sequences get zero rows in our contract);
per batch: conv weight (+bias), A_log, dt_bias, and the index metadata.

Padded (zero-length) rows cost nothing. On a GPU whose L2 holds a small case's state, repeated
calls can beat this DRAM roofline (more than 100 %).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from caovan.bench.cases import DTYPE_BYTES, INDEX_DTYPE_BYTES, NULL_BLOCK_ID, BatchPlan


@dataclass(frozen=True)
class TrafficBytes:
    ssm_state_read: int
    ssm_state_write: int
    conv_state_read: int
    conv_state_write: int
    inputs: int  # mixed_qkv, a, b rows of the spec tokens
    outputs: int
    params: int  # conv weight/bias, A_log, dt_bias
    metadata: int  # query_start_loc, state indices, accepted counts, token_index

    @property
    def total(self) -> int:
        return sum(asdict(self).values())

    def as_dict(self) -> dict[str, int]:
        return {**asdict(self), "total": self.total}


def spec_decode_traffic(plan: BatchPlan) -> TrafficBytes:
    """Minimum DRAM traffic of the spec-decode step described by ``plan`` (host-side, no torch)."""
    case = plan.case
    h = case.head_config
    act = DTYPE_BYTES[case.act_dtype]
    conv_b = DTYPE_BYTES[case.conv_state_dtype]
    ssm_b = DTYPE_BYTES[case.ssm_dtype]
    state_bytes = h.num_v_heads * h.head_v_dim * h.head_k_dim * ssm_b
    width = h.conv_width

    ssm_read = ssm_write = conv_read = conv_write = inputs = outputs = 0
    for s in plan.seqs:
        if s.length == 0:
            continue
        outputs += s.length * h.value_dim * act
        if s.slots[0] <= NULL_BLOCK_ID:
            continue
        conv_read += (width - 1) * h.conv_dim * conv_b
        conv_write += (width - 2 + s.length) * h.conv_dim * conv_b
        inputs += s.length * (h.conv_dim + 2 * h.num_v_heads) * act
        if s.slots[s.num_accepted - 1] <= NULL_BLOCK_ID:
            continue
        ssm_read += state_bytes
        ssm_write += sum(slot > NULL_BLOCK_ID for slot in s.slots[: s.length]) * state_bytes

    params = h.conv_dim * width * act + h.num_v_heads * (DTYPE_BYTES["float32"] + act)
    if case.conv_bias:
        params += h.conv_dim * act
    n = len(plan.seqs)
    metadata = INDEX_DTYPE_BYTES * ((n + 1) + n * case.max_query_len + n)
    if plan.token_index is not None:
        metadata += 8 * len(plan.token_index)  # int64, as the builder makes it
    return TrafficBytes(ssm_read, ssm_write, conv_read, conv_write, inputs, outputs, params, metadata)


def roofline_us(num_bytes: int, bandwidth_bytes_per_s: float) -> float:
    """Time in microseconds to move ``num_bytes`` at ``bandwidth_bytes_per_s``."""
    if bandwidth_bytes_per_s <= 0:
        raise ValueError(f"bandwidth must be > 0 bytes/s, got {bandwidth_bytes_per_s}")
    return num_bytes / bandwidth_bytes_per_s * 1e6
