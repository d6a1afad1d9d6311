"""A plain-PyTorch stand-in for ``gdn_spec_decode_reference`` (tests only) and checks of it.

The real float64 reference lives in ``caovan.kernels.gdn_spec_decode.naive`` (kernels branch). The
bench's own logic (case builder, error masks, vLLM path under the Triton interpreter) is tested here
against this independent transcription of the CONTEXT.md contract, so those tests do not wait
for the kernels to land. Each rule below is written from the contract, not from vLLM's code.
"""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch", reason="torch is needed for the bench's tensor logic")


def standin_gdn_spec_decode_reference(
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
    num_k_heads,
    head_k_dim,
    head_v_dim,
    ssm_layout="vk",
    null_slot_max=0,
    token_index=None,
):
    f64 = torch.float64
    H, K, V = num_k_heads, head_k_dim, head_v_dim
    HV = a.shape[1]
    width = conv_weight.shape[1]
    w = conv_weight.to(f64)
    bias = conv_bias.to(f64) if conv_bias is not None else None
    qsl = query_start_loc.tolist()
    for n in range(len(qsl) - 1):
        bos, eos = qsl[n], qsl[n + 1]
        length = eos - bos
        if length == 0:
            continue
        rows = token_index[bos:eos].tolist() if token_index is not None else list(range(bos, eos))
        acc = int(num_accepted_tokens[n])
        c0 = int(state_indices[n, 0])
        init = int(state_indices[n, acc - 1])
        if c0 <= null_slot_max:
            out[rows] = 0
            continue
        x = mixed_qkv[rows].to(f64)  # (T_n, dim)
        window = conv_state[c0, :, acc - 1 : acc - 1 + width - 1].to(f64)  # (dim, width-1)
        full = torch.cat([window, x.T], dim=1)  # (dim, width-1+T_n)
        conv = torch.stack([(full[:, t : t + width] * w).sum(1) for t in range(length)])  # (T_n, dim)
        if bias is not None:
            conv = conv + bias
        conv = conv * torch.sigmoid(conv)
        new_window = full[:, 1:]  # drop the oldest column: width-2+T_n columns
        conv_state[c0, :, : new_window.shape[1]] = new_window.to(conv_state.dtype)
        if init <= null_slot_max:
            out[rows] = 0
            continue
        q = conv[:, : H * K].reshape(length, H, K)
        k = conv[:, H * K : 2 * H * K].reshape(length, H, K)
        v = conv[:, 2 * H * K :].reshape(length, HV, V)
        q = q * torch.rsqrt((q * q).sum(-1, keepdim=True) + 1e-6) * K**-0.5
        k = k * torch.rsqrt((k * k).sum(-1, keepdim=True) + 1e-6)
        xg = a[rows].to(f64) + dt_bias.to(f64)
        softplus = torch.where(xg <= 20, torch.log1p(torch.exp(xg)), xg)
        g = -torch.exp(A_log.to(f64)) * softplus  # (T_n, HV)
        beta = torch.sigmoid(b[rows].to(f64))
        S = ssm_state[init].to(f64)
        if ssm_layout == "kv":
            S = S.transpose(-1, -2)
        S = S.clone()  # (HV, V, K)
        kh = torch.arange(HV) // (HV // H)
        for t in range(length):
            kt, qt = k[t, kh], q[t, kh]  # (HV, K)
            S = S * torch.exp(g[t])[:, None, None]
            delta = beta[t][:, None] * (v[t] - torch.einsum("hvk,hk->hv", S, kt))
            S = S + delta[:, :, None] * kt[:, None, :]
            out[rows[t]] = torch.einsum("hvk,hk->hv", S, qt).to(out.dtype)
            slot = int(state_indices[n, t])
            if slot > null_slot_max:
                s_store = S if ssm_layout == "vk" else S.transpose(-1, -2)
                ssm_state[slot] = s_store.to(ssm_state.dtype)


# ------------------------------------------------------------------------------------------- checks
def _one_token_inputs(width=4, mtp=1):
    """H=HV=1, K=V=2: small enough to compute by hand."""
    H, HV, K, V = 1, 1, 2, 2
    dim = 2 * H * K + HV * V
    L = width - 1 + mtp
    T = 1 + mtp
    mixed_qkv = torch.arange(1, T * dim + 1, dtype=torch.float64).reshape(T, dim) / 10
    conv_state = torch.arange(3 * dim * L, dtype=torch.float64).reshape(3, dim, L) / 100
    return dict(
        mixed_qkv=mixed_qkv,
        a=torch.full((T, HV), 0.5, dtype=torch.float64),
        b=torch.full((T, HV), -0.25, dtype=torch.float64),
        A_log=torch.tensor([0.3], dtype=torch.float64),
        dt_bias=torch.tensor([0.1], dtype=torch.float64),
        conv_weight=torch.linspace(-1, 1, dim * width, dtype=torch.float64).reshape(dim, width),
        conv_bias=None,
        conv_state=conv_state,
        ssm_state=torch.arange(3 * HV * V * K, dtype=torch.float64).reshape(3, HV, V, K) / 7,
        query_start_loc=torch.tensor([0, T]),
        state_indices=torch.tensor([[1, 2][:T] + [0] * (T - 2)]),
        num_accepted_tokens=torch.tensor([1]),
        out=torch.full((T, HV, V), math.nan, dtype=torch.float64),
    ), dict(num_k_heads=H, head_k_dim=K, head_v_dim=V)


def test_standin_first_token_by_hand():
    t, kw = _one_token_inputs()
    before = {k: v.clone() for k, v in t.items() if v is not None}
    standin_gdn_spec_decode_reference(**t, **kw)
    dim, width = t["conv_weight"].shape
    # conv of token 0: window columns 0..2 of block 1 (accepted 1 -> offset 0), then x0
    full = torch.cat([before["conv_state"][1, :, 0:3], before["mixed_qkv"][:1].T], dim=1)
    y = (full * before["conv_weight"]).sum(1)
    y = y * torch.sigmoid(y)
    q, k, v = y[0:2], y[2:4], y[4:6]
    q = q / torch.sqrt((q * q).sum() + 1e-6) * 2**-0.5
    k = k / torch.sqrt((k * k).sum() + 1e-6)
    g = -math.exp(0.3) * math.log1p(math.exp(0.6))
    beta = 1 / (1 + math.exp(0.25))
    S = before["ssm_state"][1, 0] * math.exp(g)  # initial slot = column 0 = block 1
    S = S + beta * torch.outer(v - S @ k, k)
    torch.testing.assert_close(t["out"][0, 0], S @ q, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(t["ssm_state"][1, 0], S, rtol=1e-12, atol=1e-12)
    # the conv window was shifted by one and extended by both tokens; column 0's block got it
    expect = torch.cat([before["conv_state"][1, :, 1:3], before["mixed_qkv"].T], dim=1)
    torch.testing.assert_close(t["conv_state"][1], expect)
    # block 0 (null) and the output of token 1 from block 2's state chain
    assert torch.equal(t["conv_state"][0], before["conv_state"][0])
    assert torch.equal(t["ssm_state"][0], before["ssm_state"][0])
    assert not torch.isnan(t["out"]).any()


def test_standin_null_conv_slot_gives_zero_rows_and_touches_nothing():
    t, kw = _one_token_inputs()
    t["state_indices"] = torch.tensor([[0, 2]])
    before = {k: v.clone() for k, v in t.items() if v is not None}
    standin_gdn_spec_decode_reference(**t, **kw)
    assert torch.equal(t["out"], torch.zeros_like(t["out"]))
    assert torch.equal(t["conv_state"], before["conv_state"])
    assert torch.equal(t["ssm_state"], before["ssm_state"])


def test_standin_kv_layout_is_the_transpose_of_vk():
    t, kw = _one_token_inputs()
    t_kv = {k: (v.clone() if v is not None else None) for k, v in t.items()}
    t_kv["ssm_state"] = t["ssm_state"].transpose(-1, -2).contiguous()
    standin_gdn_spec_decode_reference(**t, **kw)
    standin_gdn_spec_decode_reference(**t_kv, **kw, ssm_layout="kv")
    torch.testing.assert_close(t_kv["ssm_state"].transpose(-1, -2), t["ssm_state"], rtol=0, atol=0)
    torch.testing.assert_close(t_kv["out"], t["out"], rtol=0, atol=0)
