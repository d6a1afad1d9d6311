"""The GDN head shapes against the kernels' envelope (:mod:`caovan.kernels.gdn_spec_decode.envelope`, which the
kernel entry and the vLLM adapter check too), and how the heads split per tensor-parallel rank."""

from __future__ import annotations

from caovan.kernels.gdn_spec_decode import envelope

from .architectures import GDN_HEAD_FIELDS, GdnArchitecture
from .config import Fields, ModelCheckError
from .report import STATUS_FAIL, STATUS_PASS, STATUS_WARN, ModelReport

#: Tensor-parallel sizes reported per rank (Turbo3 targets TP=2 on 2 x RTX 2080 Ti).
REPORTED_TENSOR_PARALLEL_SIZES = (1, 2)

#: The GDN conv activation when the config has no ``hidden_act`` (the default of vLLM's Qwen3-Next and
#: Qwen3.5 config classes).
DEFAULT_HIDDEN_ACT = "silu"

#: The check an envelope problem is reported under, by the envelope parameter it is about.
_ENVELOPE_CHECKS = {
    "num_k_heads": "head_ratio",
    "num_v_heads": "head_ratio",
    "head_k_dim": "key_head_dim",
    "head_v_dim": "value_head_dim",
    "conv_width": "conv_width",
    "activation": "activation",
}


def read_gdn_heads(text: Fields, family: GdnArchitecture | None, report: ModelReport) -> dict[str, int] | None:
    missing = [name for name in GDN_HEAD_FIELDS if not text.has(name)]
    if missing and family is not None:
        # A GDN architecture's config must say its head shapes; vLLM's silent defaults would make
        # this check answer for a different model.
        raise ModelCheckError(
            f"{text.config_path}: {text.where(missing[0])} missing: needed for the GDN layers of {family.name}"
        )
    if missing:
        report.facts["gdn_heads"] = None
        report._add(
            "gdn_heads",
            STATUS_FAIL,
            "linear_attention layers without GatedDeltaNet head fields (missing "
            f"{', '.join(text.where(name) for name in missing)}): not the layout the kernels serve",
        )
        return None
    values = {name: text.get_int(name, minimum=1) for name in GDN_HEAD_FIELDS}
    heads = {
        "num_key_heads": values["linear_num_key_heads"],
        "num_value_heads": values["linear_num_value_heads"],
        "key_head_dim": values["linear_key_head_dim"],
        "value_head_dim": values["linear_value_head_dim"],
        "conv_kernel_width": values["linear_conv_kernel_dim"],
    }
    report.facts["gdn_heads"] = dict(heads)
    return heads  # type: ignore[return-value]


def check_gdn_heads(heads: dict[str, int], activation: str | None, report: ModelReport) -> None:
    num_k, num_v = heads["num_key_heads"], heads["num_value_heads"]
    k_dim, v_dim, width = heads["key_head_dim"], heads["value_head_dim"], heads["conv_kernel_width"]
    activation = activation if activation is not None else DEFAULT_HIDDEN_ACT
    # FAIL lines are the envelope's problems (the adapter would refuse the layer for the same ones).
    failed: dict[str, list[str]] = {}
    for problem in envelope.envelope_problems(
        num_k_heads=num_k,
        num_v_heads=num_v,
        head_k_dim=k_dim,
        head_v_dim=v_dim,
        conv_width=width,
        activation=activation,
    ):
        failed.setdefault(_ENVELOPE_CHECKS[problem.parameter], []).append(problem)

    def fail(check: str) -> bool:
        if check in failed:
            report._add(check, STATUS_FAIL, "; ".join(failed[check]))
        return check in failed

    report.facts["gdn_heads"]["value_heads_per_key_head"] = num_v // num_k if num_v % num_k == 0 else None
    if not fail("head_ratio"):
        report._add("head_ratio", STATUS_PASS, f"HV/H = {num_v}/{num_k} = {num_v // num_k}")

    if "key_head_dim" in failed:
        fail("key_head_dim")
    elif k_dim != envelope.TUNED_KEY_HEAD_DIM:
        report._add(
            "key_head_dim",
            STATUS_WARN,
            f"K={k_dim}: supported, but launch configs were tuned for K={envelope.TUNED_KEY_HEAD_DIM}",
        )
    else:
        report._add("key_head_dim", STATUS_PASS, f"K={k_dim} (the tuned case)")

    if "value_head_dim" in failed:
        fail("value_head_dim")
    elif v_dim % envelope.SM75_VALUE_BLOCK != 0:
        report._add(
            "value_head_dim",
            STATUS_WARN,
            f"V={v_dim}: supported, but the SM75 tile BV={envelope.SM75_VALUE_BLOCK} leaves a masked tail tile",
        )
    elif v_dim != envelope.TUNED_VALUE_HEAD_DIM:
        report._add(
            "value_head_dim",
            STATUS_WARN,
            f"V={v_dim}: supported, but launch configs were tuned for V={envelope.TUNED_VALUE_HEAD_DIM}",
        )
    else:
        report._add("value_head_dim", STATUS_PASS, f"V={v_dim} (the tuned case)")

    if not fail("conv_width"):
        report._add("conv_width", STATUS_PASS, f"conv width {width}")
    if not fail("activation"):
        report._add("activation", STATUS_PASS, f"conv activation {activation}")

    per_rank = []
    impossible = []
    for tp in REPORTED_TENSOR_PARALLEL_SIZES:
        undivided = [f"{label}={count}" for label, count in (("H", num_k), ("HV", num_v)) if count % tp]
        if undivided:
            per_rank.append({"tp": tp, "divisible": False, "not_divisible": undivided})
            impossible.append(f"TP={tp} ({', '.join(undivided)} not divisible by {tp})")
            continue
        per_rank.append(
            {
                "tp": tp,
                "divisible": True,
                "num_key_heads": num_k // tp,
                "num_value_heads": num_v // tp,
                "conv_dim": (2 * num_k * k_dim + num_v * v_dim) // tp,
            }
        )
    report.facts["tensor_parallel"] = per_rank
    if impossible:
        report._add(
            "tensor_parallel",
            STATUS_WARN,
            f"GDN heads do not split for {'; '.join(impossible)}",
        )
    else:
        sizes = ", ".join(str(tp) for tp in REPORTED_TENSOR_PARALLEL_SIZES)
        report._add("tensor_parallel", STATUS_PASS, f"GDN heads split evenly for TP={sizes}")
