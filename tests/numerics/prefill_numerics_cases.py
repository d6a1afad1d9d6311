"""caovan's GDN prefill and the installed vLLM's own prefill (FLA's ``chunk_gated_delta_rule`` as the family's
prefill branch calls it) on identical inputs, both against the float64 oracle, under the Triton interpreter (CPU,
tiny shapes): the prefill half of the matrix's numerics tier.

The inputs take the installed family's SSM layout and null-slot rule from its record. Scenarios cover varlen
batches across chunk boundaries, with and without cached initial states, HV/H of 1 to 3, null slots, fp16 and fp32
states, bf16 activations, q/k normalised in kernel (vLLM <= 0.20) or before (0.21 on). On a release caovan
recognises but does not serve, vLLM's side is skipped with the refusal and caovan is still held to the oracle.

Run as a script (``TRITON_INTERPRET=1 python prefill_numerics_cases.py --out results.json``) it writes one result
per scenario id plus ``"family"``; ``test_prefill_numerics.py`` runs it in a child process. Importing this module
imports neither triton, the kernels nor vLLM.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback
import warnings
from dataclasses import asdict, replace

from helpers.prefill_inputs import PrefillScenario, call, compare, make_inputs, run_oracle

_BASE = PrefillScenario(id="base")

SCENARIOS: list[PrefillScenario] = [
    replace(_BASE, id="varlen_fp16_fp32state", seed=801),
    replace(_BASE, id="varlen_fp16_fp16state", ssm_dtype="float16", seed=802),
    replace(_BASE, id="bf16_fp32state", act_dtype="bfloat16", seed=803),
    replace(_BASE, id="chunk_edges", seq_lens=(64, 128, 63, 65), initial="all", seed=804),
    replace(_BASE, id="no_initial_states", seq_lens=(1, 200), initial="none", seed=805),
    replace(_BASE, id="heads_G1", group=1, seed=806),
    replace(_BASE, id="heads_H1_G3", num_k_heads=1, group=3, seq_lens=(17, 90), seed=807),
    replace(_BASE, id="null_slots", null_seqs=(1, 3), initial="all", seed=808),
    replace(_BASE, id="prenormalised_qk", l2norm_in_kernel=False, seed=809),
    replace(_BASE, id="long_single", seq_lens=(320,), initial="all", seed=810),
    # The chunked path's pairs of chunks: a lone first chunk, a second one of one token, a pair and a lone chunk.
    replace(_BASE, id="pair_edges", seq_lens=(96, 33, 1, 160), seed=812),
]
#: caovan's prefill called as vLLM's prefill branch calls FLA's (``adapters/prefill_hook.run_prefill``): gathered
#: initial states in, ``(o, final_state)`` out, scattered by the caller as vLLM does.
HOOK_CONTRACT = replace(_BASE, id="hook_contract", seed=811)
SCENARIO_IDS: list[str] = [sc.id for sc in SCENARIOS] + [HOOK_CONTRACT.id]

#: Both of the kernels' dot paths run on every scenario: fp32 operands (the sm75 entry: FMA on Turing) and 16-bit
#: operands on tensor cores (every newer entry), each held to the same rule, on the fused path (the one short
#: prompts take). The chunked path (long prompts) runs too, forced at these tiny lengths, with one dot path per
#: scenario in turn: both across the scenarios, at half the interpreter's time.
DOT_PATHS = ("sm75", "sm80")


def entries_to_run(index: int) -> dict[str, object]:
    """Label -> launch entry of what scenario ``index`` runs (module docstring of ``DOT_PATHS``)."""
    from caovan.kernels.gdn_prefill.launch_configs import LAUNCH_CONFIGS, path_forced

    chunked = DOT_PATHS[index % len(DOT_PATHS)]
    entries = {arch: path_forced(LAUNCH_CONFIGS[arch], "fused") for arch in DOT_PATHS}
    entries[f"{chunked} chunked"] = path_forced(LAUNCH_CONFIGS[chunked], "chunked")
    return entries


def run_scenario(sc: PrefillScenario, baseline, index: int) -> dict:
    import functools

    from caovan.kernels.gdn_prefill import gdn_prefill

    inputs = make_inputs(sc)
    ref = run_oracle(inputs)
    theirs = None
    if baseline is not None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # masked-off lanes computed on junk under the interpreter
            theirs = call(baseline, inputs)
    result: dict = {"ok": True, "detail": "", "errors": {}}
    for label, entry in entries_to_run(index).items():
        ours = call(functools.partial(gdn_prefill, config=entry), inputs)
        one = compare(inputs, ours, ref, theirs)
        result["errors"][label] = one["errors"]
        if "vllm_errors" in one:
            result["vllm_errors"] = one["vllm_errors"]
        if not one["ok"]:
            result["ok"] = False
            result["detail"] += f"[{label} entry] {one['detail']} "
    return result


def run_hook_contract(sc: PrefillScenario, family) -> dict:
    from helpers.prefill_inputs import clone

    from caovan.adapters.prefill_hook import run_prefill
    from caovan.plugin import counters

    inputs = make_inputs(sc)
    mine = clone(inputs)
    t = mine["tensors"]
    index = t["state_indices"].long()
    initial_state = t["ssm_state"][index].contiguous()
    initial_state[~t["has_initial_state"]] = 0
    kwargs = {name: t[name][None] for name in ("q", "k", "v", "g", "beta")}
    kwargs.update(
        initial_state=initial_state,
        output_final_state=True,
        cu_seqlens=t["cu_seqlens"],
        use_qk_l2norm_in_kernel=sc.l2norm_in_kernel,
    )

    def in_tree(*args, **kw):
        raise AssertionError("caovan handed a call it should take back to vLLM")

    counters.reset()
    o, final_state = run_prefill(family, in_tree, (), kwargs)
    t["ssm_state"][index] = final_state.to(t["ssm_state"].dtype)
    t["out"].copy_(o.reshape(t["out"].shape))
    result = compare(inputs, mine, run_oracle(inputs), None)
    if counters.snapshot()["dispatched"] != {"prefill": 1}:
        result["ok"] = False
        result["detail"] += f"; counters {counters.snapshot()} (expected one prefill dispatch)"
    return result


def _vllm_skip(refusal: str | None) -> str | None:
    """Why vLLM's side cannot run on this scenario here (caovan is then held to float64 alone)."""
    if refusal is not None:
        return f"caovan does not serve this release ({refusal}): caovan checked against float64 only"
    return None


def _skip(sc: PrefillScenario, bf16_broken: str | None) -> str | None:
    if sc.act_dtype == "bfloat16" and bf16_broken:
        interpreter = bf16_broken.split("; ")[0]
        return (
            f"{interpreter}; both prefills feed bf16 operands to their dots (as tensor cores take them), so neither "
            "can be measured under this interpreter: bf16 is checked on a GPU "
            "(tests/kernels_gpu/test_prefill_vs_vllm.py)"
        )
    return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="JSON file for the results")
    args = parser.parse_args(argv)
    if os.environ.get("TRITON_INTERPRET") != "1":
        print("TRITON_INTERPRET=1 must be set in the environment", file=sys.stderr)
        return 2
    from family_numerics_cases import family_facts  # beside this file, as the child runs it
    from helpers.spec_decode_inputs import interpreter_bf16_products_broken

    from caovan.bench.vllm_prefill_path import VllmPrefill

    family, refusal, facts = family_facts()
    baseline = None if refusal is not None else VllmPrefill(family)
    facts["fla_ops_module"] = family.fla_ops_module
    from interpreter_aliases import (
        cpu_device_guards,
        rebind_builtin_aliases,
        single_config_autotuners,
        tensor_loop_ranges,
    )

    facts["interpreter_rebound"] = rebind_builtin_aliases()
    facts["interpreter_single_config"] = single_config_autotuners()
    facts["interpreter_tensor_ranges"] = tensor_loop_ranges()
    facts["interpreter_cpu_device_guard"] = cpu_device_guards()
    results: dict = {"family": facts}
    print(f"prefill numerics against vLLM {facts['vllm']} ({family.label} {family.family_id}, {family.fla_ops_module})")
    bf16_broken = interpreter_bf16_products_broken()
    for index, raw in enumerate([*SCENARIOS, HOOK_CONTRACT]):
        sc = replace(raw, ssm_layout=family.ssm_layout, null_slot_max=family.null_slot_max)
        t0 = time.perf_counter()
        note, skip = _vllm_skip(refusal), _skip(sc, bf16_broken)
        try:
            if skip:
                res = {"skip": skip}
            elif sc.id == HOOK_CONTRACT.id:
                res = run_hook_contract(sc, family)
            else:
                res = run_scenario(sc, None if note else baseline, index)
            if note:
                res["note"] = note
        except Exception:
            res = {"ok": False, "detail": traceback.format_exc()}
        res["seconds"] = round(time.perf_counter() - t0, 3)
        res["scenario"] = asdict(sc)
        results[sc.id] = res
        status = "skip" if skip else ("ok  " if res["ok"] else "FAIL")
        print(
            f"{status} {sc.id} ({res['seconds']} s) {skip or res['detail']} caovan {res.get('errors')} "
            f"vLLM {res.get('vllm_errors', note)}",
            flush=True,
        )
        with open(args.out, "w") as f:  # rewritten after each scenario: a crash keeps what was done
            json.dump(results, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
