"""caovan's kernels and the installed vLLM's own spec-decode kernels on identical inputs, both against the float64
oracle, under the Triton interpreter (CPU, tiny shapes): the matrix's numerics tier.

The inputs are laid out as the installed release's GDN family lays them out, read from its record
(``caovan.adapters.families``): SSM state layout, null-slot rule, whether the conv state may be stored dim-first,
the dtype ``A_log`` is created in, and, in a mixed batch, whether its spec branch hands the recurrent kernel the spec
tokens' gating (``spec_gating_selected``: vLLM 0.12 - 0.17 select ``g``/``beta``, 0.29 on ``a``/``b``) or the whole
``a``/``b`` (0.18 - 0.28; right only while the spec tokens lead the batch, which is where vLLM's batch order puts
them, so that is how such a family's mixed batch is laid out). vLLM's side is ``VllmSpecCore``: its kernels as the
family's GDN module imports them, called as its spec branch calls them. On a release caovan recognises but does not
serve, every scenario is skipped with the family's refusal.

Run as a script (``TRITON_INTERPRET=1 python family_numerics_cases.py --out results.json``) it writes one result
per scenario id, plus ``"family"``: the family, vLLM version and GDN module it ran against.
``test_family_numerics.py`` runs it in a child process (``helpers/interpreter_child.py`` says why). Importing
this module imports neither triton, the kernels nor vLLM.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback
from dataclasses import asdict, replace

from helpers.spec_decode_inputs import (
    Scenario,
    interpreter_bf16_products_broken,
    make_inputs,
    run_caovan,
    run_oracle,
    run_vllm,
)
from helpers.spec_decode_rule import judge

#: Scenario ids the tier reports on, fixed so that pytest collects them without importing vLLM. A scenario the
#: installed family cannot express is skipped with the reason (``needs``).
_BASE = Scenario(id="base", num_accepted=(1, 4, 1, 2))


def _scenarios() -> list[tuple[Scenario, str]]:
    """(scenario, what it needs of the family: "" | "dim_first" | "null_columns")."""
    b = _BASE
    return [
        (replace(b, id="fp16_fp16state", ssm_dtype="float16", seed=701), ""),
        (replace(b, id="fp16_fp32state", seed=702), ""),
        (replace(b, id="bf16_fp32state", act_dtype="bfloat16", conv_dtype="bfloat16", seed=703), ""),
        (
            replace(
                b, id="bf16_bf16state", act_dtype="bfloat16", conv_dtype="bfloat16", ssm_dtype="bfloat16", seed=704
            ),
            "",
        ),
        (replace(b, id="fp32", act_dtype="float32", conv_dtype="float32", seed=705), ""),
        (replace(b, id="heads_H1_G1", num_k_heads=1, group=1, seed=708), ""),
        (
            replace(b, id="heads_G3_dimfirst_unpaged", group=3, conv_dim_first=True, page_strided=False, seed=706),
            "dim_first",
        ),
        (replace(b, id="accepted_sweep", seq_lens=(4, 4, 4, 4), num_accepted=(1, 2, 3, 4), seed=707), ""),
        (replace(b, id="varlen_padded_rows", seq_lens=(2, 0, 4, 1), num_accepted=(2, 1, 3, 1), seed=709), ""),
        (
            replace(b, id="null_state_columns", num_accepted=(1, 1, 1, 1), null_columns=((0, 2), (3, 1)), seed=710),
            "null_columns",
        ),
        (replace(b, id="mixed_batch", mixed_batch=True, seed=711), ""),
        (replace(b, id="rows16_K64", row_lanes=16, head_k_dim=64, seed=712), ""),
    ]


SCENARIOS = _scenarios()
SCENARIO_IDS: list[str] = [sc.id for sc, _ in SCENARIOS]


def as_family_lays_out(sc: Scenario, family) -> Scenario:
    """The scenario with the family's state layout and null-slot rule; a mixed batch in the family's token order."""
    return replace(
        sc,
        ssm_layout=family.ssm_layout,
        null_slot_max=family.null_slot_max,
        a_log_in_act_dtype=family.a_log_dtype == "model",
        spec_tokens_first=sc.mixed_batch and not family.spec_gating_selected,
    )


def _skip_reason(sc: Scenario, needs: str, family, refusal: str | None = None) -> str | None:
    if refusal is not None:
        return f"nothing of caovan's runs on this release: {refusal}"
    if needs == "dim_first" and family.conv_dim_first_function is None:
        return f"{family.family_id} never stores the conv state dim-first"
    if needs == "null_columns" and not family.recurrent_skips_null_slots:
        return (
            f"{family.family_id}'s recurrent kernel checks no slot (it would write the null slot out of bounds), and "
            "its metadata gives a null slot only to CUDA-graph padding rows, which have no tokens (varlen_padded_rows)"
        )
    if "bfloat16" in (sc.act_dtype, sc.conv_dtype):
        return interpreter_bf16_products_broken()
    return None


def run_scenario(sc: Scenario, core) -> dict:
    inp = make_inputs(sc)
    return judge(inp, run_caovan(inp, sc), run_vllm(core, inp), run_oracle(inp))


def family_facts():
    """(family, refusal, facts) of the installed vLLM, as both numerics children report them."""
    from importlib.metadata import version

    from caovan.adapters.registry import recognised_family

    family, refusal = recognised_family()
    return family, refusal, {"family_id": family.family_id, "label": family.label, "vllm": version("vllm")}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="JSON file for the results")
    args = parser.parse_args(argv)
    if os.environ.get("TRITON_INTERPRET") != "1":
        print("TRITON_INTERPRET=1 must be set in the environment", file=sys.stderr)
        return 2
    from caovan.bench.vllm_spec_path import VllmSpecCore

    family, refusal, facts = family_facts()
    core = None if refusal is not None else VllmSpecCore(gather_gating=family.spec_gating_selected)
    facts["gdn_module"] = family.gdn_module if core is None else core.module_name
    from interpreter_aliases import rebind_builtin_aliases  # beside this file; imports triton

    facts["interpreter_rebound"] = rebind_builtin_aliases()
    if facts["interpreter_rebound"]:
        print(f"rebound for the interpreter (same maths): {', '.join(facts['interpreter_rebound'])}")
    results: dict = {"family": facts}
    print(f"numerics against vLLM {facts['vllm']} ({family.label} {family.family_id}, {facts['gdn_module']})")
    for raw, needs in SCENARIOS:
        sc = as_family_lays_out(raw, family)
        t0 = time.perf_counter()
        skip = _skip_reason(sc, needs, family, refusal)
        if skip:
            res = {"skip": skip}
        else:
            try:
                res = run_scenario(sc, core)
            except Exception:
                res = {"ok": False, "detail": traceback.format_exc()}
        res["seconds"] = round(time.perf_counter() - t0, 3)
        res["scenario"] = asdict(sc)
        results[sc.id] = res
        status = "skip" if skip else ("ok  " if res["ok"] else "FAIL")
        print(f"{status} {sc.id} ({res['seconds']} s) {skip or res['detail']}", flush=True)
        with open(args.out, "w") as f:  # rewritten after each scenario: a crash keeps what was done
            json.dump(results, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
