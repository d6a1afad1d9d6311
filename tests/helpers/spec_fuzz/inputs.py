"""The tensors of one fuzzed case, in ``gdn_spec_decode``'s calling convention (``helpers.spec_decode_inputs``'s dict:
``tensors``, ``buffers``, ``kwargs``), so that caovan's entry, vLLM's replay and the oracle all take them.

Values are drawn as ``spec_decode_inputs.make_inputs`` draws them; the batch is laid out from the case: requests in
batch order (spec sequences, other requests among them), token rows in that order, each live spec sequence given
``t_max`` distinct cache blocks in shuffled order.
"""

from __future__ import annotations

import torch

from helpers.spec_decode_inputs import DTYPES, assemble_inputs

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


def build_inputs(case: FuzzCase, device: str | None = None) -> dict:
    """The case's tensors, drawn on ``device`` (default the CPU): a GPU case's values come from the GPU's generator,
    so they differ from the same case's on the CPU, and are the same on every run there."""
    gen = torch.Generator(device=device or "cpu").manual_seed(case.data_seed)
    on = gen.device
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
    perm = (torch.randperm(num_blocks - first_block, generator=gen, device=on) + first_block).tolist()
    slots = [perm[seq * T : (seq + 1) * T] for seq in range(n_live)] + [[null] * T] * case.padding_rows
    for seq, col in case.null_columns:
        slots[seq][col] = null
    state_indices = torch.tensor(slots, dtype=torch.int32, device=on).reshape(n, T)
    accepted = list(case.num_accepted) + [PADDING_ACCEPTED] * case.padding_rows
    num_accepted_tokens = torch.tensor(accepted, dtype=torch.int32, device=on)
    starts = [0]
    for length in (*case.seq_lens, *([0] * case.padding_rows)):
        starts.append(starts[-1] + length)
    query_start_loc = torch.tensor(starts, dtype=torch.int32, device=on)

    spec_rows, num_rows = batch_rows(case)
    proj = torch.randn(num_rows, conv_dim + 8, generator=gen, device=on).to(act)
    mixed_qkv = _columns(proj, conv_dim, case.strided_qkv)
    scales = torch.tensor([1.0] * HV + [case.gating_scale] * HV, device=on)
    ba = (torch.randn(num_rows, 2 * HV, generator=gen, device=on) * scales).to(act)
    b = _columns(ba, HV, case.strided_gating)
    a = ba[:, HV:] if case.strided_gating else ba[:, HV:].contiguous()
    out = torch.randn(num_rows + 2, HV, V, generator=gen, device=on).to(act)  # rows past the batch stay untouched
    flat_rows = [r for rows in spec_rows for r in rows]
    token_index = torch.tensor(flat_rows, dtype=torch.int64, device=on) if case.mixed else None

    batch = dict(
        mixed_qkv=mixed_qkv, a=a, b=b, out=out, token_index=token_index, query_start_loc=query_start_loc,
        state_indices=state_indices, num_accepted_tokens=num_accepted_tokens,
    )  # fmt: skip
    return assemble_inputs(case, gen, batch, act=act, dims=(H, HV, K, V), conv=(conv_dim, W, T), num_blocks=num_blocks)
