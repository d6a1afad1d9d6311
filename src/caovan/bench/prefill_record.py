"""``caovan bench prefill``'s record and table: the environment (GPU or interpreter, versions, source commit), the
settings, a summary and one row per case as ``prefill.bench_case`` makes it.
"""

from __future__ import annotations

import math
import statistics
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from caovan.bench.prefill import SIDES, TIMING_METHOD, PrefillSettings

JSON_SCHEMA = "caovan-bench-prefill/1"


# --------------------------------------------------------------------------------------------------
def source_commit() -> dict[str, Any]:
    """The git commit of the caovan source this runs from, and whether ``src/caovan`` differs from it (files
    changed or added); nulls for an installed wheel or where git is missing."""
    import caovan

    package = Path(caovan.__file__).resolve().parent

    def git(*args: str) -> str | None:
        try:
            done = subprocess.run(
                ["git", "-C", str(package), *args], capture_output=True, text=True, timeout=10, check=False
            )
        except (OSError, subprocess.SubprocessError):
            return None
        return done.stdout.strip() if done.returncode == 0 else None

    top = git("rev-parse", "--show-toplevel")
    if top is None or (Path(top) / "src" / "caovan").resolve() != package:
        return {"commit": None, "dirty": None}
    status = git("status", "--porcelain", "--", str(package))
    return {"commit": git("rev-parse", "HEAD"), "dirty": None if status is None else bool(status)}


def environment(device: Any, *, interpreted: bool) -> dict[str, Any]:
    """``bench kernels``' environment (GPU, versions), the device, and the source commit."""
    from caovan.bench.kernels import environment as kernels_environment

    env = kernels_environment(device if not interpreted else "cuda")
    if interpreted:
        env["gpu"] = {"name": "interpreter", "capability": None}
    return {"device": str(device), "interpreter": interpreted, **env, "caovan_source": source_commit()}


def summarize(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    ok = [r for r in rows if not r.get("error")]

    def geomean(key: str) -> float | None:
        values = [r["speedup"][key] for r in ok if r["speedup"][key]]
        return statistics.geometric_mean(values) if values else None

    return {
        "cases": len(rows),
        "errors": len(rows) - len(ok),
        "geomean_speedup_vs_vllm_fla": geomean("vs_vllm_fla"),
        "geomean_speedup_vs_vllm_branch": geomean("vs_vllm_branch"),
    }


def build_report(
    rows: Sequence[Mapping[str, Any]],
    *,
    env: Mapping[str, Any],
    vllm_family: Mapping[str, Any] | None,
    settings: PrefillSettings,
    options: Mapping[str, Any],
    sm75: Mapping[str, Any] | None = None,
    argv: Sequence[str] | None = None,
    timestamp: str | None = None,
) -> dict[str, Any]:
    from caovan.bench.kernels import _json_safe, record_head

    return _json_safe(
        {
            **record_head(JSON_SCHEMA, argv, timestamp),
            **env,
            "vllm_family": None if vllm_family is None else dict(vllm_family),
            "settings": {
                **asdict(settings),
                **options,
                "use_qk_l2norm": True,
                "sides": list(options.get("sides", SIDES)),
                "timing": TIMING_METHOD,
                "reference": "float64 oracle (caovan.kernels.gdn_prefill.naive), sequence by sequence",
            },
            "summary": summarize(rows),
            "cases": list(rows),
            # What the sm75 entry compiles to for an RTX 2080 Ti and the waves of each case there (prefill_sm75.py).
            "sm75": None if sm75 is None else dict(sm75),
        }
    )


TABLE_HEADERS = (
    "case",
    "tokens",
    "path",
    "caovan us",
    "FLA us",
    "branch us",
    "x FLA",
    "x branch",
    "err out caovan",
    "err out vLLM",
    "err ssm caovan",
    "err ssm vLLM",
)


def _fmt(x: float | None, spec: str) -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else format(x, spec)


def table_rows(rows: Sequence[Mapping[str, Any]]) -> list[list[str]]:
    out = []
    for r in rows:
        if r.get("error"):
            out.append([r["id"], "ERROR: " + r["error"]] + [""] * (len(TABLE_HEADERS) - 2))
            continue
        t, e = r["times_us"], r["errors"]
        err = [_fmt((e[side] or {}).get(key), ".1e") for key in ("out", "ssm_state") for side in ("caovan", "vllm")]
        out.append(
            [
                r["id"],
                str(r["case"]["total_tokens"]),
                r.get("caovan_path") or "-",
                *(_fmt(t[side], ".1f") for side in SIDES),
                _fmt(r["speedup"]["vs_vllm_fla"], ".2f"),
                _fmt(r["speedup"]["vs_vllm_branch"], ".2f"),
                *err,
            ]
        )
    return out


def format_table(rows: Sequence[Mapping[str, Any]]) -> str:
    from tabulate import tabulate

    return tabulate(table_rows(rows), headers=TABLE_HEADERS, tablefmt="github", disable_numparse=True)
