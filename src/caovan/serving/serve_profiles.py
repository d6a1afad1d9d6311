"""``caovan serve``'s start-up profiles (Turbo3's DynamicTP, AutoMem and Elastic-KV), applied to the command it builds.

Each profile fills a sizing flag the user left out, from the GPUs measured now, the model folder
(:mod:`caovan.profiles`) and what the installed vLLM takes on the GPUs' capability; a flag the user gave, on the
command line or in a ``--config`` file, is kept and only checked. Each decision is one note with its numbers, and
the last note predicts the KV cache vLLM will report. What cannot be served (no TP fits, a TP with too few GPUs, a
share of memory the tightest GPU does not have, a context the user fixed that does not fit) stops ``caovan serve``
before vLLM starts, in one line. Where the profiles cannot measure (no local model folder, no GPU, a quantized
folder without weights, a layout they do not follow), they say so and add nothing: vLLM's defaults stand.
``--caovan-no-profile`` turns them off; the mode is ``--caovan-profile``, else ``CAOVAN_PROFILE``, else normal.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from caovan.model_check import ModelCheckError
from caovan.profiles import Gpu, GpuInventoryError, ModelFacts, ProfileError, read_model_facts
from caovan.profiles.kv_layout import KvLayoutError, kv_dtype_bytes
from caovan.profiles.kv_prediction import AskVllm
from caovan.profiles.modes import DEFAULT_MODE, MODES
from caovan.profiles.sizing import ServeRequest, size_server
from caovan.profiles.vllm_kv_cache import vllm_kv_report
from caovan.serving.serve_flags import ServeArgsError, dotted_value, find_flag, flag_name, json_object, user_value

NOT_APPLIED = "profiles: not applied, vLLM's defaults stand"
MODE_ENV = "CAOVAN_PROFILE"


@functools.lru_cache(maxsize=8)
def vllm_kv_cache_dtypes(capability: tuple[int, int], name: str) -> tuple[str, ...] | str:
    """The KV-cache dtypes the installed vLLM's own selection takes on a GPU of ``capability``
    (:func:`caovan.sm75.vllm_decisions.kv_accepted`), or why it could not be asked. Asked on vLLM's CUDA platform
    made to report the capability: no CUDA context is opened in the process that then becomes vLLM. A dtype for
    which vLLM picks FlashInfer is left out where the flashinfer package is not installed (vLLM would fail to
    import the backend it picked)."""
    from caovan.sm75.vllm_decisions import kv_accepted, probe_vllm_decisions
    from caovan.sm75.vllm_questions import flashinfer_package

    doc = probe_vllm_decisions(capability, device_name=name, questions=("attention_backends", "kv_cache_dtypes"))
    picked = {entry["dtype"]: entry["auto"].get("backend") for entry in doc.get("kv_cache_dtypes", [])}
    installed, package = flashinfer_package()
    accepted = tuple(d for d in kv_accepted(doc) if installed or picked.get(d) != "FLASHINFER")
    if accepted:
        return accepted
    if kv_accepted(doc):
        return f"vLLM picks FLASHINFER for every KV-cache dtype it takes here, but {package}"
    return "; ".join(f"{u['question']}: {u['why']}" for u in doc["unanswered"]) or "vLLM takes none of them"


@dataclass(frozen=True)
class ProfileProbes:
    """What the profiles ask the installed vLLM (the tests give stand-ins): the KV-cache dtypes it takes on a GPU,
    and its own KV cache planning (None: the profiles' arithmetic alone)."""

    kv_cache_dtypes: Callable[[Gpu], Sequence[str] | str]
    ask_vllm: AskVllm | None


VLLM_PROBES = ProfileProbes(lambda gpu: vllm_kv_cache_dtypes(gpu.capability, gpu.name), vllm_kv_report)


def profile_mode(cli_value: str | None, environ: Mapping[str, str]) -> tuple[str, str]:
    """(mode, where it came from): ``--caovan-profile``, else ``CAOVAN_PROFILE``, else the default."""
    if cli_value is not None:
        chosen, source = cli_value, "--caovan-profile"
    elif environ.get(MODE_ENV):
        chosen, source = environ[MODE_ENV], MODE_ENV
    else:
        return DEFAULT_MODE, "default"
    if chosen not in MODES:
        raise ServeArgsError(f"{source} {chosen!r}: expected one of {', '.join(MODES)}")
    return chosen, source


def _text(args: Sequence[str], config: Mapping[str, Any], long: str, short: str | None = None) -> str | None:
    value = user_value(args, config, long, short)
    return None if value is None else str(value).strip()


def _number(text: str | None, flag: str, kind: type) -> Any:
    if text is None:
        return None
    try:
        return kind(text)
    except ValueError:
        raise ServeArgsError(f"{flag} {text!r}: not a number") from None


_SUFFIXES = {"k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12, "K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}


def tokens_value(text: str | None, flag: str) -> int | None:
    """A token count as vLLM's ``human_readable_int`` reads it (``32k`` 32000, ``32K`` 32768); None: not given.

    Mirrored, not imported: the profiles are pure functions that run before vLLM is imported. The discovery tier
    holds this reader to every row's own ``human_readable_int`` (``tests/discovery/test_serve_command_vllm_parser.py``).
    """
    if text is None:
        return None
    text = text.strip()
    found = re.fullmatch(r"(\d+(?:\.\d+)?)([kmgtKMGT])", text)
    if found and (found.group(2).islower() or "." not in found.group(1)):
        return int(float(found.group(1)) * _SUFFIXES[found.group(2)])
    value = _number(text, flag, int)
    if value < 1:
        raise ServeArgsError(f"{flag} {text}: at least 1 token")
    return value


def _switch(args: Sequence[str], config: Mapping[str, Any], name: str) -> bool | None:
    """A boolean vLLM flag (``--NAME`` / ``--no-NAME``, or the ``--config`` file's key): the last one given."""
    given = None
    for token in args:
        if token == "--":
            break
        if flag_name(token) == f"--{name}":
            given = True
        elif flag_name(token) == f"--no-{name}":
            given = False
    return given if given is not None else config.get(name)


def _speculative(args: Sequence[str], config: Mapping[str, Any], facts: ModelFacts) -> tuple[int, int, str | None]:
    """(tokens per step, attention layers its drafter adds, a note where the drafter is not counted) of the
    speculative config vLLM will read (the user's, or AutoSpec's, already in ``args``)."""
    uses = find_flag(args, "--speculative-config", "-sc")
    dotted = {use.key_path[-1]: dotted_value(use.value) for use in uses if use.key_path}
    plain = [use for use in uses if not use.key_path]
    if dotted:
        spec: Any = dotted
    elif plain:
        try:
            spec = json_object(plain[-1].value, "--speculative-config")
        except ServeArgsError:
            spec = None  # vLLM's parser judges it; "None" and "" turn it off
    else:
        spec = config.get("speculative-config")
        spec = json_object(spec, "--config speculative-config") if isinstance(spec, str) and spec.strip() else spec
    if not isinstance(spec, dict):
        return 0, 0, None
    method = str(spec.get("method") or "")
    tokens = spec.get("num_speculative_tokens")
    if method.endswith("mtp"):
        return (tokens if isinstance(tokens, int) else facts.mtp_layers), facts.mtp_layers, None
    steps = tokens if isinstance(tokens, int) else 0
    return steps, 0, f"speculative method {method or '?'}: its drafter's own KV cache is not counted"


def serve_request(args: Sequence[str], config: Mapping[str, Any], facts: ModelFacts) -> tuple[ServeRequest, list[str]]:
    """What the user fixed, read where vLLM reads it, and notes on what the profiles do not count."""
    max_len = _text(args, config, "--max-model-len")
    auto_len = max_len is not None and (max_len == "-1" or max_len.lower() == "auto")
    # vLLM 0.21's MambaModelConfig: without prefix caching (off by default for hybrid models) the GDN state is kept
    # in mode "none" whatever was asked; with it, "align" for models without Mamba prefix-caching support.
    mamba_mode = "none"
    if _switch(args, config, "enable-prefix-caching"):
        mamba_mode = _text(args, config, "--mamba-cache-mode") or "align"
    tokens, drafter, note = _speculative(args, config, facts)
    request = ServeRequest(
        tp=_number(_text(args, config, "--tensor-parallel-size", "-tp"), "--tensor-parallel-size", int),
        share=_number(_text(args, config, "--gpu-memory-utilization"), "--gpu-memory-utilization", float),
        kv_dtype=_text(args, config, "--kv-cache-dtype"),
        max_model_len=None if auto_len else tokens_value(max_len, "--max-model-len"),
        max_model_len_auto=auto_len,
        max_num_seqs=tokens_value(_text(args, config, "--max-num-seqs"), "--max-num-seqs"),
        max_num_batched_tokens=tokens_value(
            _text(args, config, "--max-num-batched-tokens"), "--max-num-batched-tokens"
        ),
        block_size=tokens_value(_text(args, config, "--block-size"), "--block-size"),
        mamba_cache_mode=mamba_mode,
        speculative_tokens=tokens,
        drafter_layers=drafter,
    )
    return request, [note] if note else []


def profile_flags(
    model_folder: Path | None,
    args: Sequence[str],
    config: Mapping[str, Any],
    measure_gpus: Callable[[], list[Gpu]],
    mode: str | None = None,
    environ: Mapping[str, str] | None = None,
    probes: ProfileProbes | None = None,
) -> tuple[list[str], list[str]]:
    """(arguments to add, notes) for the command whose vLLM arguments are ``args`` (AutoSpec's included), in
    ``mode`` (:data:`caovan.profiles.modes.MODES`; None: :func:`profile_mode`); ServeArgsError where what was
    asked cannot be served. ``probes``: None asks the installed vLLM (:data:`VLLM_PROBES`)."""
    mode, source = profile_mode(mode, environ or {})
    probes = probes or VLLM_PROBES
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
    request, notes = serve_request(args, config, facts)
    if request.kv_dtype is not None and kv_dtype_bytes(request.kv_dtype, facts.dtype) is None:
        # vLLM judges the value itself; the profiles just cannot size it
        return [], [f"{NOT_APPLIED}: --kv-cache-dtype {request.kv_dtype}: its bytes per value are unknown to them"]
    lowest = min(gpus, key=lambda gpu: gpu.capability)
    accepted = probes.kv_cache_dtypes(lowest) if request.kv_dtype is None else ()
    try:
        sizing = size_server(
            facts, gpus, kv_accepted=accepted, request=request, mode=MODES[mode], ask_vllm=probes.ask_vllm
        )
    except KvLayoutError as exc:
        return [], [f"{NOT_APPLIED}: {exc}"]
    except ProfileError as exc:
        raise ServeArgsError(str(exc)) from None
    lines = [line.render() for line in sizing.lines]
    return sizing.added_args, [f"profiles: {mode} mode ({source})", *lines, *notes, sizing.prediction.render()]
