"""Inputs for the GDN prefill at any shape, laid out as vLLM's prefill branch hands them to FLA, and the checks the
prefill suites share (``tests/numerics/prefill_numerics_cases.py`` under the interpreter, ``tests/kernels_gpu``
at real shapes): caovan and the installed vLLM's prefill, both against the float64 oracle.

Importing this module imports torch, never triton, the kernels or vLLM.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from helpers.spec_decode_inputs import DTYPES, FLOOR_ULPS

#: Tolerance against float64, in ulps of the activation dtype at the reference's largest magnitude (at least 1):
#: vLLM's pipeline and caovan's both run their dots in the activation dtype, so their distance to float64 is a few
#: of its roundings, not the stored dtype's. A sanity bound; the rule that matters is "not above vLLM's".
ACTIVATION_ULPS = 8


@dataclass(frozen=True)
class PrefillScenario:
    id: str
    seq_lens: tuple[int, ...] = (70, 1, 130, 64)
    num_k_heads: int = 2
    group: int = 2  # HV / H
    head_k_dim: int = 32
    head_v_dim: int = 32
    act_dtype: str = "float16"
    ssm_dtype: str = "float32"
    ssm_layout: str = "vk"
    #: "some" (a seeded half), "all" or "none" of the sequences start from a cached state.
    initial: str = "some"
    #: Sequences whose state slot is null (vLLM's PAD_SLOT_ID / null block): zeros in, nothing written back.
    null_seqs: tuple[int, ...] = ()
    null_slot_max: int = 0
    #: True: q/k raw, L2-normalised in kernel (vLLM <= 0.20); False: already normalised (0.21's fused prep).
    l2norm_in_kernel: bool = True
    seed: int = 0


def null_slot(sc: PrefillScenario) -> int:
    """The slot id vLLM gives a padded sequence under the family's rule (block 0 from 0.20, -1 before)."""
    return 0 if sc.null_slot_max >= 0 else -1


def make_inputs(sc: PrefillScenario, device: str = "cpu") -> dict:
    gen = torch.Generator().manual_seed(sc.seed)
    act = DTYPES[sc.act_dtype]
    H, HV, K, V = sc.num_k_heads, sc.num_k_heads * sc.group, sc.head_k_dim, sc.head_v_dim
    n, T = len(sc.seq_lens), sum(sc.seq_lens)
    q = torch.randn(T, H, K, generator=gen)
    k = torch.randn(T, H, K, generator=gen)
    if not sc.l2norm_in_kernel:
        q, k = torch.nn.functional.normalize(q, dim=-1), torch.nn.functional.normalize(k, dim=-1)
    v = torch.randn(T, HV, V, generator=gen)
    # vLLM's gates: g = -exp(A_log) * softplus(a + dt_bias) <= 0, beta = sigmoid(b).
    g = -torch.exp(torch.randn(HV, generator=gen) * 0.5) * torch.nn.functional.softplus(
        torch.randn(T, HV, generator=gen)
    )
    beta = torch.sigmoid(torch.randn(T, HV, generator=gen))
    # Slot 0 is vLLM's null block from 0.20 and slot -1 (the last) where PAD_SLOT_ID -1 lands before: the batch's
    # slots are shuffled over the ones between, so that neither rule's null slot is a live one.
    slots = n + 3
    per_head = (V, K) if sc.ssm_layout == "vk" else (K, V)
    ssm_state = torch.randn(slots, HV, *per_head, generator=gen) * 0.5
    state_indices = (torch.randperm(slots - 2, generator=gen)[:n] + 1).to(torch.int32)
    for i in sc.null_seqs:
        state_indices[i] = null_slot(sc)
    if sc.initial == "some":
        has_initial = torch.rand(n, generator=gen) < 0.5
    else:
        has_initial = torch.full((n,), sc.initial == "all")
    has_initial[list(sc.null_seqs)] = False  # a padded sequence has no context, so vLLM gives it no initial state
    cu = torch.tensor([0, *torch.tensor(sc.seq_lens).cumsum(0).tolist()], dtype=torch.int32)
    tensors = {
        "q": q.to(act),
        "k": k.to(act),
        "v": v.to(act),
        "g": g.float(),
        "beta": beta.to(act),
        "out": torch.zeros(T, HV, V, dtype=act),
        "ssm_state": ssm_state.to(DTYPES[sc.ssm_dtype]),
        "cu_seqlens": cu,
        "state_indices": state_indices,
        "has_initial_state": has_initial,
    }
    tensors = {name: t.to(device) for name, t in tensors.items()}
    kwargs = {"use_qk_l2norm": sc.l2norm_in_kernel, "ssm_layout": sc.ssm_layout, "null_slot_max": sc.null_slot_max}
    return {"tensors": tensors, "kwargs": kwargs}


def clone(inputs: dict) -> dict:
    return {"tensors": {n: t.clone() for n, t in inputs["tensors"].items()}, "kwargs": dict(inputs["kwargs"])}


def call(fn, inputs: dict) -> dict:
    """``fn`` (caovan's ``gdn_prefill``, ``VllmPrefill`` or the oracle) on a clone of the inputs; the clone."""
    mine = clone(inputs)
    t = mine["tensors"]
    positional = [t[name] for name in ("q", "k", "v", "g", "beta", "out", "ssm_state", "cu_seqlens")]
    fn(*positional, state_indices=t["state_indices"], has_initial_state=t["has_initial_state"], **mine["kwargs"])
    return mine


def run_oracle(inputs: dict) -> dict:
    from caovan.kernels.gdn_prefill.naive import gdn_prefill_reference

    wide = clone(inputs)
    for name in ("out", "ssm_state"):
        wide["tensors"][name] = wide["tensors"][name].double()
    return call(gdn_prefill_reference, wide)


def live_slots(inputs: dict) -> torch.Tensor:
    """The state slots a prefill of these inputs must write: the batch's slots that are not null."""
    indices = inputs["tensors"]["state_indices"].long()
    return indices[indices > inputs["kwargs"]["null_slot_max"]]


def max_abs(a: torch.Tensor, b: torch.Tensor) -> float:
    return (a.double() - b.double()).abs().max().item() if a.numel() else 0.0


def compare(inputs: dict, ours: dict, ref: dict, theirs: dict | None) -> dict:
    """Errors against float64 for caovan (and vLLM), and the rule: caovan within ``ACTIVATION_ULPS`` of the oracle
    and, where vLLM ran, not above vLLM's error plus ``FLOOR_ULPS`` of the stored dtype. The state is compared on
    the batch's live slots (vLLM also writes the null slot, which holds nothing), the output on every row."""
    slots = live_slots(inputs)
    act = inputs["tensors"]["q"].dtype
    parts = {
        "out": lambda side: side["tensors"]["out"],
        "ssm_state": lambda side: side["tensors"]["ssm_state"][slots],
    }
    problems, errors, vllm_errors = [], {}, {}
    for key, pick in parts.items():
        ref_t = pick(ref)
        stored = inputs["tensors"][key].dtype
        scale = max(1.0, ref_t.abs().max().item()) if ref_t.numel() else 1.0
        tol = ACTIVATION_ULPS * torch.finfo(act).eps * scale
        errors[key] = max_abs(pick(ours), ref_t)
        if not errors[key] <= tol:  # `not x <= y`: a NaN fails
            problems.append(f"caovan's {key} error {errors[key]:.3g} > tolerance {tol:.3g}")
        if theirs is None:
            continue
        vllm_errors[key] = max_abs(pick(theirs), ref_t)
        floor = FLOOR_ULPS * torch.finfo(stored).eps * scale
        if not math.isfinite(vllm_errors[key]):
            problems.append(f"vLLM's {key} is not finite: the baseline is broken")
        elif not errors[key] <= vllm_errors[key] + floor:
            problems.append(f"caovan's {key} error {errors[key]:.3g} > vLLM's {vllm_errors[key]:.3g} + {floor:.3g}")
    # Slots outside the batch and null slots must come back untouched, bit for bit.
    others = torch.ones(inputs["tensors"]["ssm_state"].shape[0], dtype=torch.bool)
    others[slots.cpu()] = False
    if not torch.equal(ours["tensors"]["ssm_state"][others], inputs["tensors"]["ssm_state"][others]):
        problems.append("caovan wrote a state slot outside the batch or a null one")
    result = {"errors": errors, "ok": not problems, "detail": "; ".join(problems)}
    if theirs is not None:
        result["vllm_errors"] = vllm_errors
    return result
