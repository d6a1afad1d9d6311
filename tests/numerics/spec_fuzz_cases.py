"""Fuzzed spec-decode batches, laid out as the installed vLLM's GDN family lays them out, run through caovan's kernels
and the release's own spec path, both against the float64 oracle: under the Triton interpreter (CPU, tiny shapes), or
with ``--device cuda`` on a GPU at the real models' per-GPU shapes (``FuzzSpace.real_shapes``).

Run by the numerics tier (``test_spec_fuzz.py``, a fixed seed) and by ``nox -s "fuzz(<row>)" -- --cases N --seed S``
(any seed; a random one, printed, when none is given). Every failure prints the ``--replay SEED:INDEX`` that runs it
alone, and is shrunk to the smallest batch that still fails; ``--add-regressions`` keeps the shrunk cases in
``data/spec_fuzz_regressions.json``, which ``--regressions`` (the tier) runs too. The JSON record (``--out``) holds
the run's summary: counts, what the cases covered, the worst error of caovan and of vLLM against float64, the cases
where caovan's error is above vLLM's, and the failures. ``--workers N`` splits the cases over N processes
(``helpers/spec_fuzz/workers.py``) and joins their records into one. Exit status 1 when a case or a regression case
failed.
``helpers/spec_fuzz`` holds the generator, the runner and the shrinker; this script wires them to the real kernels.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import shlex
import sys
import time
from dataclasses import asdict
from pathlib import Path

from helpers.spec_fuzz.cases import FuzzSpace, draw_case
from helpers.spec_fuzz.regressions import add_regressions, load_regressions, run_regressions
from helpers.spec_fuzz.rules import layout_rules
from helpers.spec_fuzz.run import Sides, fuzz, run_case, shrink_failure

SCHEMA = "caovan-spec-fuzz-run/1"
REGRESSIONS_FILE = Path(__file__).resolve().with_name("data") / "spec_fuzz_regressions.json"
DEFAULT_CASES = 1000
DEVICES = ("interpreter", "cuda")
#: How often a long run rewrites its record, so that a run cut short keeps what it had (marked incomplete).
WRITE_EVERY = 25


def _replay_key(text: str) -> tuple[int, int]:
    seed, sep, index = text.partition(":")
    if not sep:
        raise argparse.ArgumentTypeError(f"{text!r}: expected SEED:INDEX")
    return int(seed), int(index)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, type=Path, help="JSON record of the run")
    parser.add_argument("--cases", type=int, default=DEFAULT_CASES, help=f"cases to run (default {DEFAULT_CASES})")
    parser.add_argument("--seed", type=int, default=None, help="seed of the run (default: a random one, printed)")
    parser.add_argument("--start", type=int, default=0, help="index of the first case (default 0)")
    parser.add_argument("--replay", type=_replay_key, action="append", metavar="SEED:INDEX", help="run only these")
    parser.add_argument("--regressions", type=Path, default=None, help="also run the fixed cases of this file")
    parser.add_argument("--add-regressions", action="store_true", help=f"keep shrunk failures in {REGRESSIONS_FILE}")
    parser.add_argument("--shrink-tries", type=int, default=None, help="cap on the runs one shrink may take")
    parser.add_argument(
        "--device", choices=DEVICES, default="interpreter", help="where the cases run (default: the interpreter)"
    )
    parser.add_argument("--workers", type=int, default=1, help="processes the cases are split over (default 1)")
    args = parser.parse_args(argv)
    if args.workers < 1:
        parser.error(f"--workers {args.workers}: at least one")
    if args.workers > 1 and (args.replay or args.regressions or args.add_regressions):
        parser.error("--workers runs fresh cases only: give --replay / --regressions / --add-regressions without it")
    return args


def _device_problem(device: str) -> str | None:
    """Why the cases cannot run on ``device`` here, or None."""
    interpreted = os.environ.get("TRITON_INTERPRET") == "1"
    if device == "interpreter":
        return None if interpreted else "TRITON_INTERPRET=1 must be set in the environment"
    if interpreted:
        return "--device cuda runs compiled kernels: unset TRITON_INTERPRET"
    import torch

    return None if torch.cuda.is_available() else "--device cuda: torch sees no CUDA GPU"


def _write(path: Path, record: dict) -> None:
    from caovan.jsonfile import write_text_atomic

    path.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(path, json.dumps(record, indent=1) + "\n")  # a reader never sees half a record


def _real_sides(family, device: str | None) -> Sides:
    from helpers.spec_decode_inputs import run_caovan, run_oracle, run_vllm

    from caovan.bench.vllm_spec_path import VllmSpecCore

    core = VllmSpecCore(gather_gating=family.spec_gating_selected)
    return Sides(ours=run_caovan, theirs=lambda inp: run_vllm(core, inp), oracle=run_oracle, device=device)


def _split_over_workers(args: argparse.Namespace, argv: list[str]) -> int:
    """The parent of a ``--workers`` run: no vLLM or torch here, the workers import them."""
    from helpers.spec_fuzz.workers import run_workers

    seed = args.seed if args.seed is not None else secrets.randbelow(2**31)
    print(f"{args.cases} cases of seed {seed} from index {args.start} over {args.workers} workers", flush=True)
    worker_args = ["--device", args.device]
    if args.shrink_tries is not None:
        worker_args += ["--shrink-tries", str(args.shrink_tries)]
    record, status = run_workers(
        Path(__file__).resolve(), worker_args, seed=seed, start=args.start, count=args.cases, workers=args.workers,
        out=args.out,
    )  # fmt: skip
    if record is None:
        return status
    if "skip" in record:
        _write(args.out, record)
        print(record["skip"])
        return 0
    row = f"vllm-{record['family']['vllm']}"
    device = ["--device", args.device] if args.device != "interpreter" else []
    record.update(
        argv=argv,
        command=shlex.join(
            ["nox", "-s", f"fuzz({row})", "--", *device, "--cases", str(args.cases), "--seed", str(seed)]
            + ["--start", str(args.start), "--workers", str(args.workers)]
        ),
    )
    _write(args.out, record)
    s = record["summary"]
    print(f"{s['passed']}/{s['cases']} passed, {s['seconds_per_case']} s per case; record: {args.out}")
    return status


def main(argv_given: list[str] | None = None) -> int:
    args = parse_args(argv_given)
    problem = _device_problem(args.device)
    if problem is not None:
        print(problem, file=sys.stderr)
        return 2
    # What ran (the script and its arguments) beside the nox command that runs the same cases.
    here = Path(__file__).resolve()
    argv = [here.relative_to(here.parents[2]).as_posix(), *(sys.argv[1:] if argv_given is None else argv_given)]
    if args.workers > 1:
        return _split_over_workers(args, argv)
    from family_numerics_cases import family_facts  # beside this file

    family, refusal, facts = family_facts()
    rules = layout_rules(family)
    row = f"vllm-{facts['vllm']}"
    seed = args.seed if args.seed is not None else secrets.randbelow(2**31)
    shrink_tries = {} if args.shrink_tries is None else {"shrink_tries": args.shrink_tries}
    # Time per case depends on the machine: the record says how many CPUs it had (and the GPU, on one).
    record: dict = {"schema": SCHEMA, "family": facts, "argv": argv, "cpus": os.cpu_count(), "complete": False}
    if refusal is not None:
        record.update(complete=True, skip=f"nothing of caovan's runs on this release: {refusal}")
        _write(args.out, record)
        print(record["skip"])
        return 0
    import torch

    # Tiny tensors (or a GPU's): a second thread only waits for a core on a loaded machine (up to x50 on the oracle).
    torch.set_num_threads(1)
    if args.device == "cuda":
        sides = _real_sides(family, "cuda")
        space, bf16 = FuzzSpace.real_shapes(), None
        props = torch.cuda.get_device_properties(0)
        record["device"] = {"name": props.name, "capability": f"sm_{props.major}{props.minor}"}
    else:
        sides = _real_sides(family, None)
        from helpers.spec_decode_inputs import interpreter_bf16_products_broken
        from interpreter_aliases import rebind_builtin_aliases  # beside this file; imports triton

        facts["interpreter_rebound"] = rebind_builtin_aliases()
        space = FuzzSpace()
        bf16 = interpreter_bf16_products_broken()
        if bf16:
            space = space.without_bf16_products()
            print(f"bf16 activations and conv state left out: {bf16}")
    record.update(space=asdict(space), bf16_left_out=bf16)
    print(f"spec fuzz against vLLM {facts['vllm']} ({rules.label} {rules.family_id})", flush=True)
    failed = False

    if args.replay:
        replays = {}
        for s, i in args.replay:
            case = draw_case(rules, space, s, i)
            result = run_case(case, sides)
            print(f"{'ok  ' if result['ok'] else 'FAIL'} {case.case_id} {result['detail']}")
            print(json.dumps(case.to_json()))
            entry = {"result": result, "case": case.to_json()}
            if not result["ok"]:
                failed = True
                entry["failure"] = shrink_failure(case, result, sides, **shrink_tries)
                print(f"  shrunk to: {json.dumps(entry['failure']['shrunk'])}")
            replays[case.case_id] = entry
        record.update(complete=True, replays=replays)
        _write(args.out, record)
        return 1 if failed else 0

    print(f"{args.cases} cases of seed {seed} from index {args.start}", flush=True)
    device = "--device cuda " if args.device == "cuda" else ""
    record.update(
        seed=seed,
        command=f'nox -s "fuzz({row})" -- {device}--cases {args.cases} --seed {seed} --start {args.start}',
    )
    t_start = time.perf_counter()

    def on_case(case, result, seconds, summary):
        done = case.index - args.start + 1
        if not result["ok"]:
            print(f"FAIL {case.case_id} ({seconds:.2f} s) {result['detail']}", flush=True)
            print(f'  replay alone: nox -s "fuzz({row})" -- {device}--replay {case.case_id}', flush=True)
        if done % WRITE_EVERY == 0:
            print(f"{done}/{args.cases} cases, {time.perf_counter() - t_start:.0f} s", flush=True)
            _write(args.out, dict(record, summary=summary.to_json()))

    summary = fuzz(rules, space, sides, seed=seed, count=args.cases, start=args.start, on_case=on_case, **shrink_tries)
    record["summary"] = summary.to_json()
    for failure in summary.failures:
        failed = True
        print(f"FAIL {failure['case']} shrunk ({failure['shrink_tries']} tries) to: {json.dumps(failure['shrunk'])}")
    if args.add_regressions and summary.failures:
        added = add_regressions(REGRESSIONS_FILE, summary.failures, rules, f"vLLM {facts['vllm']}")
        print(f"added to {REGRESSIONS_FILE.name}: {', '.join(added) or 'nothing new'}")
    if args.regressions is not None:
        regressions = run_regressions(load_regressions(args.regressions), rules, sides)
        record["regressions"] = regressions
        for case_id, result in regressions.items():
            status = "skip" if "skip" in result else ("ok  " if result["ok"] else "FAIL")
            failed |= status == "FAIL"
            print(f"{status} regression {case_id} {result.get('skip') or result['detail']}")
    record.update(complete=True, wall_s=round(time.perf_counter() - t_start, 1))
    _write(args.out, record)
    s = record["summary"]
    print(f"{s['passed']}/{s['cases']} passed, {s['seconds_per_case']} s per case; record: {args.out}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
