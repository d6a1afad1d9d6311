"""The tensors of one fuzzed case, in ``gdn_spec_decode``'s calling convention (``helpers.spec_decode_inputs``'s dict:
``tensors``, ``buffers``, ``kwargs``), so that caovan's entry, vLLM's replay and the oracle all take them.

Values are drawn as ``spec_decode_inputs.make_inputs`` draws them; the batch is laid out from the case: requests in
batch order (spec sequences, other requests among them), token rows in that order, each live spec sequence given
``t_max`` distinct cache blocks in shuffled order.
"""

from __future__ import annotations

import torch

from helpers.spec_decode_inputs import DTYPES, paged_blocks

from .cases import FuzzCase

#: The accepted count vLLM's builder fills CUDA-graph padding sequences with (``num_accepted_tokens[n:].fill_(1)``).
PADDING_ACCEPTED = 1


def batch_rows(case: FuzzCase) -> tuple[list[list[int]], int]:
    """(token rows of each live spec sequence, rows in the batch): requests in batch order, each one's tokens
    contiguous, padded token rows last."""
    spec_rows: list[list[int]] = []
    row = 0
    others = sorted(case.others, key=lambda o: o[1])
    k = 0
    for seq in range(case.num_live + 1):
        while k < len(others) and others[k][1] == seq:
            row += others[k][0]
            k += 1
        if seq < case.num_live:
            spec_rows.append(list(range(row, row + case.seq_lens[seq])))
            row += case.seq_lens[seq]
    return spec_rows, row + case.padded_tokens


def _columns(full: torch.Tensor, width: int, strided: bool) -> torch.Tensor:
    """The first ``width`` columns of ``full``: a strided view, or a contiguous copy."""
    return full[:, :width] if strided else full[:, :width].contiguous()


def build_inputs(case: FuzzCase) -> dict:
    gen = torch.Generator().manual_seed(case.data_seed)
    H, G, K, V, W, T = case.num_k_heads, case.group, case.head_k_dim, case.head_v_dim, case.width, case.t_max
    HV = H * G
    conv_dim = 2 * H * K + HV * V
    act = DTYPES[case.act_dtype]
    n_live, n = case.num_live, case.num_live + case.padding_rows
    null = case.null_slot_max

    # Blocks at or below the null sentinel are never handed out: with sentinel 0 block 0 is vLLM's null block,
    # with -1 it is a real block like any other.
    first_block = max(null + 1, 0)
    num_blocks = first_block + n_live * T + 2
    perm = (torch.randperm(num_blocks - first_block, generator=gen) + first_block).tolist()
    state_indices = torch.full((n, T), null, dtype=torch.int32)
    for seq in range(n_live):
        state_indices[seq] = torch.tensor(perm[seq * T : (seq + 1) * T], dtype=torch.int32)
    for seq, col in case.null_columns:
        state_indices[seq, col] = null
    accepted = list(case.num_accepted) + [PADDING_ACCEPTED] * case.padding_rows
    num_accepted_tokens = torch.tensor(accepted, dtype=torch.int32)
    starts = [0]
    for length in (*case.seq_lens, *([0] * case.padding_rows)):
        starts.append(starts[-1] + length)
    query_start_loc = torch.tensor(starts, dtype=torch.int32)

    spec_rows, num_rows = batch_rows(case)
    mixed_qkv = _columns(torch.randn(num_rows, conv_dim + 8, generator=gen).to(act), conv_dim, case.strided_qkv)
    ba = (torch.randn(num_rows, 2 * HV, generator=gen) * torch.tensor([1.0] * HV + [case.gating_scale] * HV)).to(act)
    b = _columns(ba, HV, case.strided_gating)
    a = ba[:, HV:] if case.strided_gating else ba[:, HV:].contiguous()
    out = torch.randn(num_rows + 2, HV, V, generator=gen).to(act)  # rows past the batch stay untouched
    flat_rows = [r for rows in spec_rows for r in rows]
    token_index = torch.tensor(flat_rows, dtype=torch.int64) if case.mixed else None

    A_log = torch.log(torch.empty(HV).uniform_(1.0, 16.0, generator=gen))
    if case.a_log_in_act_dtype:
        A_log = A_log.to(act)
    dt = torch.exp(torch.empty(HV).uniform_(-6.9, -2.3, generator=gen))
    dt_bias = (dt + torch.log(-torch.expm1(-dt))).to(act)  # inverse softplus, as the model inits
    conv_weight = (torch.randn(conv_dim, W, generator=gen) * 0.5).to(act)
    conv_bias = (torch.randn(conv_dim, generator=gen) * 0.1).to(act) if case.has_bias else None

    state_len = W - 2 + T + case.extra_state_len
    conv_dtype = DTYPES[case.conv_dtype]
    if case.conv_dim_first:
        conv_buf, conv_state = paged_blocks(num_blocks, (conv_dim, state_len), conv_dtype, case.page_strided, gen)
    else:  # vLLM's default cache (blocks, L, dim), handed to the kernels as its transpose
        conv_buf, conv_sd = paged_blocks(num_blocks, (state_len, conv_dim), conv_dtype, case.page_strided, gen)
        conv_state = conv_sd.transpose(-1, -2)
    ssm_shape = (HV, V, K) if case.ssm_layout == "vk" else (HV, K, V)
    ssm_buf, ssm_state = paged_blocks(num_blocks, ssm_shape, DTYPES[case.ssm_dtype], case.page_strided, gen)
    ssm_buf.mul_(0.5)

    return dict(
        tensors=dict(
            mixed_qkv=mixed_qkv,
            a=a,
            b=b,
            A_log=A_log,
            dt_bias=dt_bias,
            conv_weight=conv_weight,
            conv_bias=conv_bias,
            conv_state=conv_state,
            ssm_state=ssm_state,
            query_start_loc=query_start_loc,
            state_indices=state_indices,
            num_accepted_tokens=num_accepted_tokens,
            out=out,
            token_index=token_index,
        ),
        buffers=dict(conv=conv_buf, ssm=ssm_buf),
        kwargs=dict(
            num_k_heads=H, head_k_dim=K, head_v_dim=V, ssm_layout=case.ssm_layout, null_slot_max=case.null_slot_max
        ),
    )
