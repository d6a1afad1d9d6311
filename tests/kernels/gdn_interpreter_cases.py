"""Scenarios for the GDN spec-decode kernels under the Triton interpreter (CPU, tiny shapes).

Run as a script (``TRITON_INTERPRET=1 python gdn_interpreter_cases.py --out results.json``) it
executes every scenario and writes one result per scenario id; ``test_interpreter_numerics.py``
runs it in a subprocess and turns each result into a pytest test. Keeping the interpreter in its
own process is deliberate: triton decides "interpreted or compiled" when a kernel is *decorated*
(``triton.jit`` reads TRITON_INTERPRET at import of the kernel module, in triton 3.6), so setting
the variable inside a pytest process that already imported our kernels, or vLLM's, changes
nothing, and setting it globally (e.g. from a conftest) would silently turn every other Triton
test of the session (GPU tiers, the sm_75 gate) into interpreter runs.

Importing this module does not import triton or the kernels (the parent pytest only needs the
scenario ids). The inputs and shared checks live in ``helpers/spec_decode_inputs.py``; the comparison with the
installed vLLM's own kernels is the matrix's numerics tier (``tests/numerics/``).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import traceback
from dataclasses import asdict, replace

import torch
from helpers.spec_decode_inputs import (
    Scenario,
    call_kernel,
    clone_inputs,
    expected_writes,
    launch_config_for,
    make_inputs,
    max_abs,
    run_caovan,
    run_oracle,
    tolerance,
    view_mask,
)


def _switched_on(scenarios: list[Scenario], switch: str, *sources: str) -> list[Scenario]:
    """Copies of the named scenarios with one boolean field of Scenario set, ids prefixed with its name."""
    by_id = {c.id: c for c in scenarios}
    return [replace(by_id[source], id=f"{switch}_{source}", **{switch: True}) for source in sources]


def _scenarios() -> list[Scenario]:
    base = Scenario(id="base")
    s: list[Scenario] = [replace(base, repeat_call=True)]
    # Head ratios HV/H = 1, 2, 3 with one and two key heads.
    for h in (1, 2):
        for g in (1, 2, 3):
            s.append(replace(base, id=f"heads_H{h}_G{g}", num_k_heads=h, group=g, seed=10 * h + g))
    # SSM layout x conv-state orientation x page striding.
    for layout in ("vk", "kv"):
        for dim_first in (False, True):
            for paged in (False, True):
                s.append(
                    replace(
                        base,
                        id=f"layout_{layout}_convdimfirst{int(dim_first)}_paged{int(paged)}",
                        ssm_layout=layout,
                        conv_dim_first=dim_first,
                        page_strided=paged,
                        seed=100 + 4 * (layout == "kv") + 2 * dim_first + paged,
                    )
                )
    # Activation x state dtypes (conv state follows the model dtype unless noted).
    for act, conv, ssm in (
        ("float16", "float16", "float16"),
        ("float16", "float16", "float32"),
        ("bfloat16", "bfloat16", "bfloat16"),
        ("bfloat16", "bfloat16", "float32"),
        ("float32", "float32", "float32"),
        ("float16", "float32", "float32"),
        ("bfloat16", "float16", "float16"),
    ):
        s.append(
            replace(
                base,
                id=f"dtypes_{act}_conv_{conv}_ssm_{ssm}",
                act_dtype=act,
                conv_dtype=conv,
                ssm_dtype=ssm,
                seed=200 + len(s),
            )
        )
    # Every num_accepted_tokens 1..T for each T_max 1..4 (one sequence per value).
    for t in (1, 2, 3, 4):
        s.append(
            replace(
                base,
                id=f"accepted_sweep_T{t}",
                t_max=t,
                seq_lens=(t,) * t,
                num_accepted=tuple(range(1, t + 1)),
                seed=300 + t,
            )
        )
    # Varlen lengths, N = 1..3, padded rows, N' > N.
    s += [
        replace(base, id="varlen_N1", seq_lens=(3,), num_accepted=(2,), seed=401),
        replace(base, id="varlen_N2_short", seq_lens=(1, 2), num_accepted=(4, 3), seed=402),
        replace(base, id="varlen_N3", seq_lens=(2, 4, 1), num_accepted=(3, 1, 4), seed=403),
        replace(base, id="padded_rows_trailing", seq_lens=(4, 4, 0, 0), seed=404),
        replace(base, id="padded_rows_extra_index_rows", seq_lens=(2, 0, 3), extra_index_rows=2, seed=405),
        replace(base, id="all_rows_padded", seq_lens=(0, 0), seed=406),
    ]
    # Null slots: sentinel 0 (vLLM >= 0.20) and -1 (<= 0.19, where block 0 is a real block).
    for null in (0, -1):
        tag = "null0" if null == 0 else "nullm1"
        s += [
            replace(base, id=f"{tag}_plain", null_slot_max=null, seed=500 + 10 * (null + 1)),
            replace(
                base, id=f"{tag}_conv_slot_null", null_slot_max=null, null_columns=((0, 0),), seed=501 + 10 * (null + 1)
            ),
            replace(
                base,
                id=f"{tag}_initial_slot_null",
                null_slot_max=null,
                num_accepted=(3, 1, 1, 2),
                null_columns=((0, 2),),
                seed=502 + 10 * (null + 1),
            ),
            replace(
                base,
                id=f"{tag}_middle_column_null",
                null_slot_max=null,
                num_accepted=(1, 1, 1, 1),
                null_columns=((0, 2), (3, 1)),
                seed=503 + 10 * (null + 1),
            ),
        ]
    # Mixed batches (token_index) and odd shapes.
    s += [
        replace(base, id="mixed_batch_token_index", mixed_batch=True, repeat_call=True, seed=601),
        replace(
            base,
            id="mixed_batch_kv_dimfirst_bf16",
            mixed_batch=True,
            ssm_layout="kv",
            conv_dim_first=True,
            act_dtype="bfloat16",
            conv_dtype="bfloat16",
            ssm_dtype="bfloat16",
            seed=602,
        ),
        replace(base, id="no_bias", has_bias=False, seed=603),
        replace(base, id="longer_conv_state", extra_state_len=3, seed=604),
        replace(base, id="non_pow2_heads_K24_V24", head_k_dim=24, head_v_dim=24, bv=32, seed=605),
        replace(base, id="K32_V32_BV32_one_value_block", head_k_dim=32, head_v_dim=32, bv=32, seed=606),
        replace(base, id="width2", width=2, seed=607),
        replace(base, id="width3_T2", width=3, t_max=2, seq_lens=(2, 1), seed=608),
        replace(base, id="empty_batch_N0", seq_lens=(), seed=609),
        # The edges of the kernels' envelope (envelope.py) not run above: conv widths 5 and 6, the largest K and
        # the smallest V.
        replace(base, id="envelope_width5", width=5, seed=610),
        replace(base, id="envelope_width6", width=6, seed=611),
        replace(base, id="envelope_K256", head_k_dim=256, seed=612),
        replace(base, id="envelope_V8", head_v_dim=8, seed=613),
    ]
    # The last token's state stored write-through (the sm90 entry's large-write path): two predicated stores per
    # token instead of one branch, so every token's state must still land once, in its own slot, null slots skipped.
    s += _switched_on(
        s,
        "write_through_last",
        "base",
        "accepted_sweep_T4",
        "varlen_N3",
        "padded_rows_trailing",
        "null0_initial_slot_null",
        "nullm1_middle_column_null",
        "mixed_batch_token_index",
        "layout_kv_convdimfirst1_paged1",
    )
    # The slab's strides as compile-time constants (the sm90 entry at its own BV): both storage orders, paged and
    # not, fp16 and fp32 state, null slots and a mixed batch; the offsets must address exactly the runtime strides'.
    s += _switched_on(
        s,
        "constant_slab_offsets",
        "base",
        "layout_vk_convdimfirst0_paged0",
        "layout_kv_convdimfirst0_paged1",
        "layout_kv_convdimfirst1_paged0",
        "dtypes_float16_conv_float16_ssm_float16",
        "null0_initial_slot_null",
        "mixed_batch_token_index",
        "write_through_last_accepted_sweep_T4",
    )
    # The slab's rows over 16 (or 8) lanes, a 6-D tile (the sm90 entry's large fp32-state calls). K >= 4 lanes
    # per row: K 64, 48 (masked key columns) and 128 (the model shapes' two column groups per lane). Edge cases,
    # layouts, head ratios, a mixed batch, the write-through and 2-row value blocks (BV * lanes = 32, the smallest).
    by_id = {c.id: c for c in s}
    s += [
        replace(by_id[source], id=f"rows16_{source}", row_lanes=16, head_k_dim=64)
        for source in (
            "base",
            "accepted_sweep_T4",
            "varlen_N3",
            "padded_rows_trailing",
            "null0_initial_slot_null",
            "nullm1_middle_column_null",
            "mixed_batch_token_index",
            "layout_kv_convdimfirst1_paged1",
            "heads_H2_G3",
            "dtypes_bfloat16_conv_bfloat16_ssm_float32",
            "write_through_last_accepted_sweep_T4",
        )
    ]
    s += [
        replace(base, id="rows16_K48", row_lanes=16, head_k_dim=48, seed=801),
        replace(base, id="rows16_BV2", row_lanes=16, head_k_dim=64, bv=2, seed=802),
        replace(base, id="rows8_K32", row_lanes=8, head_k_dim=32, seed=803),
        # Two key column groups per lane (KR = 2), as at the model shapes (K 128, rows of 16 lanes).
        replace(base, id="rows16_K128", row_lanes=16, head_k_dim=128, seed=804),
        replace(base, id="rows8_K64_varlen", row_lanes=8, head_k_dim=64, seq_lens=(2, 4, 1), seed=805),
    ]
    ids = [c.id for c in s]
    assert len(ids) == len(set(ids)), "duplicate scenario id"
    return s


SCENARIOS: list[Scenario] = _scenarios()
SCENARIO_IDS: list[str] = [c.id for c in SCENARIOS]


def run_scenario(sc: Scenario) -> dict:
    from caovan.kernels.gdn_spec_decode import gdn_spec_decode

    config = launch_config_for(sc)
    inp = make_inputs(sc)
    ours, ref = run_caovan(inp, sc), run_oracle(inp)
    from caovan.kernels.gdn_spec_decode import plans as plan_cache

    # This scenario's plans (the launch configuration is the last item of a plan's key). The V/GDN kernel's last
    # six arguments: WRITE_THROUGH_LAST, CONST_SLAB_OFFSETS, SLAB_STRIDE_V, SLAB_STRIDE_K, ROW_LANES, ROW_BUTTERFLY.
    plans = [p for key, p in plan_cache.cached.items() if key[-1] == config]
    if sc.write_through_last and not any(p.write_through_last and p.v_tail[-6] is True for p in plans):
        return {"id": sc.id, "errors": {}, "ok": False, "detail": "no plan asked for the write-through store"}
    if not plans or any(p.v_tail[-5] is not sc.constant_slab_offsets for p in plans):
        got = [p.v_tail[-5:-2] for p in plans]
        detail = f"expected every plan with CONST_SLAB_OFFSETS={sc.constant_slab_offsets}, got {got}"
        return {"id": sc.id, "errors": {}, "ok": False, "detail": detail}
    if any(p.row_lanes != sc.row_lanes or p.v_tail[-2] != sc.row_lanes for p in plans):
        got = [(p.row_lanes, p.v_tail[-2]) for p in plans]
        detail = f"expected every plan with rows of {sc.row_lanes} lanes, got {got}"
        return {"id": sc.id, "errors": {}, "ok": False, "detail": detail}
    # The row butterfly is inline PTX, which the interpreter cannot run: interpreted plans never take it
    # (tests/kernels/test_row_butterfly.py checks the PTX on simulated lanes instead).
    if any(p.row_butterfly or p.v_tail[-1] is not False for p in plans):
        got = [(p.row_butterfly, p.v_tail[-1]) for p in plans]
        return {"id": sc.id, "errors": {}, "ok": False, "detail": f"an interpreted plan took the row butterfly: {got}"}

    out_dtype = inp["tensors"]["out"].dtype
    ssm_dtype = inp["buffers"]["ssm"].dtype
    problems: list[str] = []
    errors = {
        "out": max_abs(ours["tensors"]["out"], ref["tensors"]["out"]),
        "ssm_state": max_abs(ours["buffers"]["ssm"], ref["buffers"]["ssm"]),
        "conv_state": max_abs(ours["buffers"]["conv"], ref["buffers"]["conv"]),
    }
    # `not x <= tol` so that a NaN error fails.
    for key, dtype, ref_t in (
        ("out", out_dtype, ref["tensors"]["out"]),
        ("ssm_state", ssm_dtype, ref["buffers"]["ssm"]),
    ):
        tol = tolerance(dtype, ref_t)
        if not errors[key] <= tol:
            problems.append(f"{key} max abs error {errors[key]:.3g} > {tol:.3g}")
    # The conv window is a pure copy of rounded inputs: must match bit for bit (whole buffer,
    # so stray writes into page padding or other blocks are caught too).
    if not torch.equal(ours["buffers"]["conv"], ref["buffers"]["conv"]):
        problems.append(f"conv_state differs from the oracle (max abs {errors['conv_state']:.3g})")
    # Writes must land exactly where the semantics put them: everything else (other rows of
    # out, other blocks and page padding of the SSM cache) stays bit-identical. The sets come
    # from the scenario, not from comparing values (bf16 results often equal the old value).
    written_rows, written_blocks = expected_writes(inp)
    keep_rows = torch.ones(inp["tensors"]["out"].shape[0], dtype=torch.bool)
    keep_rows[written_rows] = False
    if not torch.equal(ours["tensors"]["out"][keep_rows], inp["tensors"]["out"][keep_rows]):
        problems.append("out changed in rows that are not spec tokens of live sequences")
    keep_ssm = view_mask(inp["buffers"]["ssm"], inp["tensors"]["ssm_state"], written_blocks)
    if not torch.equal(ours["buffers"]["ssm"][keep_ssm], inp["buffers"]["ssm"][keep_ssm]):
        problems.append("ssm_state cache changed outside the blocks the tokens' states go to")

    if sc.repeat_call:
        # Second call with the same layout takes the cached launch plan: same bits expected.
        again = clone_inputs(inp)
        call_kernel(gdn_spec_decode, again, launch_config=config)
        for part, key in (("tensors", "out"), ("buffers", "conv"), ("buffers", "ssm")):
            if not torch.equal(again[part][key], ours[part][key]):
                problems.append(f"second call (cached plan) changed {key}")
    return {"id": sc.id, "errors": errors, "ok": not problems, "detail": "; ".join(problems)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="JSON file for the results")
    parser.add_argument("ids", nargs="*", help="scenario ids (default: all)")
    args = parser.parse_args(argv)
    import os

    if os.environ.get("TRITON_INTERPRET") != "1":
        print("TRITON_INTERPRET=1 must be set in the environment", file=sys.stderr)
        return 2
    wanted = set(args.ids) if args.ids else set(SCENARIO_IDS)
    results = {}
    for sc in SCENARIOS:
        if sc.id not in wanted:
            continue
        t0 = time.perf_counter()
        try:
            res = run_scenario(sc)
        except Exception:
            res = {"id": sc.id, "ok": False, "detail": traceback.format_exc()}
        res["seconds"] = round(time.perf_counter() - t0, 3)
        res["scenario"] = asdict(sc)
        results[sc.id] = res
        status = "ok  " if res["ok"] else "FAIL"
        print(f"{status} {sc.id} ({res['seconds']} s) {res['detail']}", flush=True)
        with open(args.out, "w") as f:  # rewrite each time: partial results survive a crash
            json.dump(results, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
