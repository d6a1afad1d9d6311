"""Max-abs error of a spec-decode implementation against the float64 reference, on one case.

Both the implementation and the reference run on their own copies of one ``SpecDecodeInputs``; the
reference's copy is upcast to float64 (exact), so it sees the same numbers and stores its results
unrounded. Compared:
  - ``out`` on the rows of real sequences (rows vLLM leaves as garbage - null-slot sequences, padded
    tokens - are not compared; our contract's zero rows for null-slot sequences are checked apart);
  - the whole SSM cache and the whole conv cache (untouched blocks must stay bit-identical, so a
    stray write anywhere shows up as an error).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from caovan.bench.cases import SpecDecodeInputs

SpecDecodeFn = Callable[..., None]


@dataclass(frozen=True)
class ErrorReport:
    out: float  # max |out - out_ref| over rows of real sequences
    ssm_state: float  # max over the whole SSM cache, compared as (blocks, HV, V, K)
    conv_state: float  # max over the whole conv cache
    out_ref_absmax: float  # scale of what was compared (for relative tolerances)
    ssm_ref_absmax: float
    null_rows_zero: bool | None  # null-slot sequences' rows are exactly 0 (None: case has none)
    page_padding_intact: bool  # nothing written into the cache pages' padding bytes

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def call(fn: SpecDecodeFn, inputs: SpecDecodeInputs) -> None:
    args, kwargs = inputs.kernel_args()
    fn(*args, **kwargs)


def run_reference(reference: SpecDecodeFn, inputs: SpecDecodeInputs) -> SpecDecodeInputs:
    """The float64 reference's results on an upcast copy of ``inputs``."""
    ref = inputs.to_float64()
    call(reference, ref)
    return ref


def _max_abs_diff(x, y) -> float:
    import torch

    if x.numel() == 0:
        return 0.0
    d = (x.to(torch.float64) - y.to(torch.float64)).abs()
    if torch.isnan(d).any():  # torch.max ignores nothing, but be explicit: NaN means "not written"
        return math.nan
    return float(d.max())


def _absmax(x) -> float:
    import torch

    return float(x.to(torch.float64).abs().max()) if x.numel() else 0.0


def compare(result: SpecDecodeInputs, ref: SpecDecodeInputs, *, check_null_rows: bool = True) -> ErrorReport:
    """Errors of ``result`` (an implementation's copy after the call) against ``ref`` (float64)."""
    import torch

    plan = ref.plan
    real_rows = plan.rows_of("real")
    null_rows = plan.rows_of("null")
    device = result.backing["out"].device
    rows = torch.tensor(real_rows, dtype=torch.int64, device=device)
    out = result.out.index_select(0, rows)
    out_ref = ref.out.index_select(0, rows.to(ref.backing["out"].device))
    null_zero: bool | None = None
    if check_null_rows and null_rows:
        nr = torch.tensor(null_rows, dtype=torch.int64, device=device)
        null_zero = bool((result.out.index_select(0, nr) == 0).all())
    return ErrorReport(
        out=_max_abs_diff(out, out_ref),
        ssm_state=_max_abs_diff(result.ssm_state_vk(), ref.ssm_state_vk()),
        conv_state=_max_abs_diff(result.conv_state, ref.conv_state),
        out_ref_absmax=_absmax(out_ref),
        ssm_ref_absmax=_absmax(ref.ssm_state_vk()),
        null_rows_zero=null_zero,
        page_padding_intact=result.page_padding_intact(),
    )


def measure(fn: SpecDecodeFn, inputs: SpecDecodeInputs, ref: SpecDecodeInputs, **kw: Any) -> ErrorReport:
    """Run ``fn`` on a copy of ``inputs`` and compare it with the reference results ``ref``."""
    mine = inputs.clone()
    call(fn, mine)
    return compare(mine, ref, **kw)


def measure_vllm(vllm_fn: SpecDecodeFn, inputs: SpecDecodeInputs, ref: SpecDecodeInputs) -> ErrorReport:
    """``measure`` for vLLM's path, on a copy in the SSM layout its kernel takes (``ssm_layout`` of the core, "vk"
    for a plain function: vLLM 0.16 on)."""
    mine = inputs.with_ssm_layout(getattr(vllm_fn, "ssm_layout", "vk"))
    check = getattr(vllm_fn, "check_inputs", None)
    if check is not None:
        call(check, mine)
    call(vllm_fn, mine)
    # vLLM leaves null-slot sequences' rows unwritten (garbage); only our contract zeroes them.
    return compare(mine, ref, check_null_rows=False)


# --------------------------------------------------------------------------------------------------
# Acceptance rules
# --------------------------------------------------------------------------------------------------
_EPS = {"float16": 2.0**-10, "bfloat16": 2.0**-7, "float32": 2.0**-23, "float64": 2.0**-52}

#: Side-by-side rule: ours may exceed vLLM's error by at most FLOOR_ULPS units in the last place
#: of the stored dtype at the largest reference magnitude (two roundings placed differently can
#: land one ulp apart even when both are as exact as the dtype allows). The conv cache only moves
#: values: it must be exact.
FLOOR_ULPS = 2


def vllm_rule_floors(case) -> dict[str, float]:
    """Floors, in units of the reference magnitude, of the rule "ours <= vLLM + floor"."""
    return {
        "out": FLOOR_ULPS * _EPS[case.act_dtype],
        "ssm_state": FLOOR_ULPS * _EPS[case.ssm_dtype],
        "conv_state": 0.0,
    }


def _bad(value: float, limit: float) -> bool:
    return math.isnan(value) or value > limit


def check_against_vllm(case, ours: ErrorReport, vllm: ErrorReport) -> list[str]:
    """Why ours fails "max error vs float64 <= vLLM's + floor" (empty list: passes)."""
    floors = vllm_rule_floors(case)
    scale = {"out": ours.out_ref_absmax, "ssm_state": ours.ssm_ref_absmax, "conv_state": 0.0}
    problems = []
    for name in ("out", "ssm_state", "conv_state"):
        mine, theirs = getattr(ours, name), getattr(vllm, name)
        limit = (theirs if not math.isnan(theirs) else 0.0) + floors[name] * scale[name]
        if _bad(mine, limit):
            problems.append(f"{name}: ours {mine:.3e} > vLLM {theirs:.3e} + floor {floors[name] * scale[name]:.3e}")
    problems += check_contract_extras(ours)
    return problems


def check_contract_extras(ours: ErrorReport) -> list[str]:
    problems = []
    if ours.null_rows_zero is False:
        problems.append("out: rows of null-slot sequences are not all zero")
    if not ours.page_padding_intact:
        problems.append("cache: bytes outside the conv/SSM views (page padding) were written")
    return problems


#: Stand-alone tolerance (``caovan verify``, no vLLM at hand): VERIFY_ULPS units in the last place
#: of the *activation* dtype at the largest reference magnitude, for outputs and SSM state alike
#: (inputs are fp16 on SM75, and vLLM itself rounds its conv outputs to fp16 before the recurrence:
#: at the 27B TP=2 shape it lands near 0.6 ulp on the output and 1.2e-3 on a fp32 state of
#: magnitude 2, i.e. 0.6 fp16 ulp). Index or gating bugs give errors of the order of the values.
VERIFY_ULPS = 4


def verify_tolerances(case, ref_out_absmax: float, ref_ssm_absmax: float) -> dict[str, float]:
    eps = _EPS[case.act_dtype]
    return {
        "out": VERIFY_ULPS * eps * ref_out_absmax,
        "ssm_state": VERIFY_ULPS * eps * ref_ssm_absmax,
        "conv_state": 0.0,
    }


def check_standalone(case, ours: ErrorReport) -> list[str]:
    """Why ours fails the stand-alone tolerance (empty list: passes)."""
    tol = verify_tolerances(case, ours.out_ref_absmax, ours.ssm_ref_absmax)
    problems = [
        f"{name}: error {getattr(ours, name):.3e} > tolerance {tol[name]:.3e}"
        for name in ("out", "ssm_state", "conv_state")
        if _bad(getattr(ours, name), tol[name])
    ]
    return problems + check_contract_extras(ours)
