"""``caovan serve``'s start-up profiles (Turbo3's DynamicTP and AutoMem), applied to the command it builds.

Each profile fills a sizing flag the user left out, from the GPUs measured now and the model folder
(:mod:`caovan.profiles`); a flag the user gave, on the command line or in a ``--config`` file, is kept and only
checked. Each decision is one note with its numbers. What cannot be served (no TP fits, a TP with too few GPUs, a
share of memory the tightest GPU does not have) stops ``caovan serve`` before vLLM starts, in one line. Where the
profiles cannot measure (no local model folder, no GPU, a quantized folder without weights), they say so and add
nothing: vLLM's defaults stand. ``--caovan-no-profile`` turns them off.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from caovan.model_check import ModelCheckError
from caovan.profiles import Gpu, GpuInventoryError, ProfileError, read_model_facts, size_server
from caovan.profiles.model_facts import DTYPE_BYTES
from caovan.profiles.modes import DEFAULT_MODE, MODES
from caovan.serving.serve_flags import ServeArgsError, user_value

NOT_APPLIED = "profiles: not applied, vLLM's defaults stand"


def _user_value(args: Sequence[str], config: Mapping[str, Any], long: str, short: str | None = None) -> str | None:
    value = user_value(args, config, long, short)
    return None if value is None else str(value)


def _number(text: str | None, flag: str, kind: type) -> Any:
    if text is None:
        return None
    try:
        return kind(text)
    except ValueError:
        raise ServeArgsError(f"{flag} {text!r}: not a number") from None


def profile_flags(
    model_folder: Path | None,
    args: Sequence[str],
    config: Mapping[str, Any],
    measure_gpus: Callable[[], list[Gpu]],
    mode: str = DEFAULT_MODE,
) -> tuple[list[str], list[str]]:
    """(arguments to add, notes) for the profiles in ``mode`` (:data:`caovan.profiles.modes.MODES`);
    ServeArgsError where what was asked cannot be served."""
    if mode not in MODES:
        raise ServeArgsError(f"--caovan-profile {mode!r}: expected one of {', '.join(MODES)}")
    if model_folder is None:
        return [], [f"{NOT_APPLIED}: the model is not a local folder (its config.json and weights are needed)"]
    try:
        facts = read_model_facts(model_folder)
    except ModelCheckError as exc:
        return [], [f"{NOT_APPLIED}: {exc}"]
    try:
        gpus = measure_gpus()
    except GpuInventoryError as exc:
        return [], [f"{NOT_APPLIED}: no GPU measured ({exc})"]
    user_tp = _number(_user_value(args, config, "--tensor-parallel-size", "-tp"), "--tensor-parallel-size", int)
    user_share = _number(_user_value(args, config, "--gpu-memory-utilization"), "--gpu-memory-utilization", float)
    kv_dtype = _user_value(args, config, "--kv-cache-dtype") or "auto"
    kv_dtype = facts.dtype if kv_dtype == "auto" else kv_dtype
    if kv_dtype not in DTYPE_BYTES:  # vLLM judges the value itself; the profiles just cannot size it
        return [], [f"{NOT_APPLIED}: --kv-cache-dtype {kv_dtype}: its bytes per value are unknown to them"]
    # The context the server will hold: the user's --max-model-len where it is a plain number (vLLM also takes
    # forms like 32k, and -1 for the model's own), else the model's.
    max_len = _user_value(args, config, "--max-model-len")
    if max_len is not None and max_len.isdigit() and int(max_len) > 0:
        facts = dataclasses.replace(facts, max_positions=int(max_len))
    try:
        tp_line, mem_line = size_server(
            facts, gpus, kv_dtype=kv_dtype, user_tp=user_tp, user_share=user_share, mode=MODES[mode]
        )
    except ProfileError as exc:
        raise ServeArgsError(str(exc)) from None
    added = [token for line in (tp_line, mem_line) if not line.kept for token in (line.flag, line.value)]
    return added, [f"profiles: {mode} mode", tp_line.render(), mem_line.render()]
