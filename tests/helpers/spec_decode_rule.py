"""The numerics rule of the spec step, one function for every suite that holds caovan to vLLM's own kernels on CPU
(``tests/numerics/family_numerics_cases.py``'s scenarios and the fuzzed batches of ``helpers.spec_fuzz``).

Per case: caovan's max |error| against the float64 oracle is within the oracle tolerance and at most vLLM's plus
``FLOOR_ULPS`` ulps of the stored dtype, for the output rows the spec tokens own and the whole SSM buffer; vLLM's
errors are finite; both conv caches equal the oracle's bit for bit; caovan leaves every other output row as it was.
vLLM's other rows are not judged: its spec branch writes ``out[:num_actual_tokens]`` whole, so CUDA-graph padded
token rows get whatever its fresh output tensor held.
"""

from __future__ import annotations

import math

import torch

from helpers.spec_decode_inputs import FLOOR_ULPS, expected_writes, max_abs, tolerance


def spec_rows(inp: dict) -> list[int]:
    """The rows of ``out`` the spec tokens write."""
    return expected_writes(inp)[0]


def judge(inp: dict, ours: dict, theirs: dict, ref: dict) -> dict:
    """``ok``, ``detail`` (one line), ``kinds`` (what went wrong, for the shrinker to keep), the errors of both sides,
    the floors and the tolerances, for one case run three ways on clones of ``inp``."""
    problems: list[tuple[str, str]] = []
    errors, vllm_errors, floors, tolerances = {}, {}, {}, {}
    rows = torch.tensor(spec_rows(inp), dtype=torch.long, device=ref["tensors"]["out"].device)
    for key, part, name in (("out", "tensors", "out"), ("ssm_state", "buffers", "ssm")):
        ref_t, ours_t, theirs_t = ref[part][name], ours[part][name], theirs[part][name]
        if key == "out":
            ref_t, ours_t, theirs_t = ref_t[rows], ours_t[rows], theirs_t[rows]
        errors[key] = max_abs(ours_t, ref_t)
        vllm_errors[key] = max_abs(theirs_t, ref_t)
        tol = tolerances[key] = tolerance(inp[part][name].dtype, ref_t)
        scale = ref_t.double().abs().max().item() if ref_t.numel() else 0.0
        floors[key] = FLOOR_ULPS * torch.finfo(ref_t.dtype).eps * scale
        # `not x <= y` so that a NaN fails.
        if not errors[key] <= tol:
            problems.append(
                (f"caovan_above_tolerance:{key}", f"caovan's {key} error {errors[key]:.3g} > tol {tol:.3g}")
            )
        if not math.isfinite(vllm_errors[key]):
            problems.append((f"vllm_not_finite:{key}", f"vLLM's {key} is not finite: the baseline is broken"))
        elif not errors[key] <= vllm_errors[key] + floors[key]:
            problems.append(
                (
                    f"caovan_above_vllm:{key}",
                    f"caovan's {key} error {errors[key]:.3g} > vLLM's {vllm_errors[key]:.3g} + {floors[key]:.3g}",
                )
            )
    others = torch.ones(ref["tensors"]["out"].shape[0], dtype=torch.bool, device=rows.device)
    others[rows] = False
    if not torch.equal(ours["tensors"]["out"][others], ref["tensors"]["out"][others]):
        problems.append(("caovan_wrote_other_rows", "caovan changed output rows that no spec token owns"))
    # The conv window is a copy in all three: each cache must equal the oracle's bit for bit, page padding included.
    for who, side in (("caovan", ours), ("vLLM", theirs)):
        if not torch.equal(side["buffers"]["conv"], ref["buffers"]["conv"]):
            problems.append((f"conv_differs:{who}", f"{who}'s conv_state differs from the oracle's"))
    return {
        "ok": not problems,
        "detail": "; ".join(text for _, text in problems),
        "kinds": [kind for kind, _ in problems],
        "errors": errors,
        "vllm_errors": vllm_errors,
        "floors": floors,
        "tolerances": tolerances,
    }
