"""``caovan serve``'s and ``caovan doctor``'s use of :mod:`caovan.sm75.vllm_decisions` on the real GPU.

``caovan serve`` reads the user's ``--dtype``, ``--kv-cache-dtype`` and attention backend (``--attention-backend``,
``--attention-config`` / ``-ac``, a ``--config`` file's keys, or VLLM_ATTENTION_BACKEND where this vLLM reads it)
as vLLM reads them, asks the installed vLLM what it decides for them on the visible GPU's compute capability, and
stops before ``vllm serve`` loads anything when vLLM would refuse one: one line naming the flag, vLLM's reason and
what to use instead.  An explicit flag of the user's is never rewritten.  ``caovan doctor`` lists every refusal.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from caovan.serving.serve_flags import ServeArgsError, dotted_value, find_flag
from caovan.sm75 import vllm_decisions
from caovan.sm75.vllm_decisions import backend_refusal, dtype_refusal, kv_accepted, kv_refusal, valid_backends

#: vLLM's --dtype spellings of the two dtypes it judges per device (float32 is never refused for the device).
_MODEL_DTYPES = {"half": "float16", "float16": "float16", "bfloat16": "bfloat16"}
ATTENTION_BACKEND_ENV = "VLLM_ATTENTION_BACKEND"
#: The questions serve needs answered (the others cost imports it does not need).
SERVE_QUESTIONS = ("attention_backends", "kv_cache_dtypes", "model_dtypes")


@dataclass(frozen=True)
class UserSetting:
    """One device-dependent setting as the user gave it: ``where`` is how to name it back to them."""

    where: str  # "--kv-cache-dtype", "--config serve.yaml: kv-cache-dtype", "VLLM_ATTENTION_BACKEND"
    value: str

    def __str__(self) -> str:
        joiner = "=" if self.where.isupper() else " "
        return f"{self.where}{joiner}{self.value}"


@dataclass(frozen=True)
class DeviceSettings:
    """The user's settings vLLM judges per device; None where the user left vLLM's default."""

    dtype: UserSetting | None = None
    kv_cache_dtype: UserSetting | None = None
    attention_backend: UserSetting | None = None

    def __bool__(self) -> bool:
        return any((self.dtype, self.kv_cache_dtype, self.attention_backend))


def _last(args: Sequence[str], long: str, short: str | None = None) -> UserSetting | None:
    plain = [use for use in find_flag(args, long, short) if not use.key_path]
    if not plain:
        return None
    return UserSetting(args[plain[-1].index].split("=", 1)[0], plain[-1].value)


def _attention_config_backend(
    args: Sequence[str], config_path: str | None, config: Mapping[str, Any]
) -> UserSetting | None:
    """The backend an ``--attention-config`` (JSON, or dotted ``--attention-config.backend``) names."""
    uses = find_flag(args, "--attention-config", "-ac")
    dotted = [use for use in uses if use.key_path == ("backend",)]
    if dotted:
        return UserSetting("--attention-config.backend", str(dotted_value(dotted[-1].value)))
    plain = [use for use in uses if not use.key_path]
    if plain:
        try:
            value = json.loads(plain[-1].value)
        except json.JSONDecodeError:
            return None  # vLLM's own parser refuses it, with its message
        if isinstance(value, dict) and value.get("backend"):
            return UserSetting(f"{args[plain[-1].index].split('=', 1)[0]} backend", str(value["backend"]))
        return None
    file_value = config.get("attention-config")
    if isinstance(file_value, dict) and file_value.get("backend"):
        return UserSetting(f"--config {config_path}: attention-config backend", str(file_value["backend"]))
    return None


def user_settings(
    args: Sequence[str],
    config_path: str | None,
    config: Mapping[str, Any],
    environ: Mapping[str, str],
    vllm_env_names: Collection[str] | None = None,
) -> DeviceSettings:
    """The user's device-dependent settings, read where vLLM reads them (the command line over a ``--config``
    file; VLLM_ATTENTION_BACKEND only where this vLLM reads that variable)."""

    def flag_or_file(long: str) -> UserSetting | None:
        given = _last(args, long)
        key = long.removeprefix("--")
        if given is None and config.get(key) not in (None, ""):
            given = UserSetting(f"--config {config_path}: {key}", str(config[key]))
        return given

    backend = flag_or_file("--attention-backend") or _attention_config_backend(args, config_path, config)
    reads_env = vllm_env_names is None or ATTENTION_BACKEND_ENV in vllm_env_names
    if backend is None and reads_env and environ.get(ATTENTION_BACKEND_ENV):
        backend = UserSetting(ATTENTION_BACKEND_ENV, environ[ATTENTION_BACKEND_ENV])
    return DeviceSettings(flag_or_file("--dtype"), flag_or_file("--kv-cache-dtype"), backend)


def _capability_text(doc: dict[str, Any]) -> str:
    major, minor = doc["capability"]
    return f"sm_{major}{minor}"


def refusal_line(settings: DeviceSettings, doc: dict[str, Any]) -> str | None:
    """The first of the user's settings vLLM refuses on the device of ``doc``, as one line (the flag, vLLM's
    reason, what to use instead); None when vLLM takes them all, or could not be asked about one."""
    line = _first_refusal(settings, doc)
    if line is None:
        return None
    # One line whatever vLLM's message holds; its messages end in a full stop, before which "; use" would sit.
    return " ".join(line.split()).replace(".; use ", "; use ")


def _first_refusal(settings: DeviceSettings, doc: dict[str, Any]) -> str | None:
    gpu = _capability_text(doc)
    if settings.dtype is not None:
        dtype = _MODEL_DTYPES.get(settings.dtype.value.lower())
        message = dtype_refusal(doc, dtype) if dtype else None
        if message:
            return f"{settings.dtype}: vLLM refuses it on this GPU ({gpu}): {message}; use --dtype half instead"
    backend = settings.attention_backend.value.upper() if settings.attention_backend else None
    if backend is not None:
        message = backend_refusal(doc, backend)
        if message:
            others = [name for name in valid_backends(doc) if name != backend]
            instead = f"one of {', '.join(others)}, or leave it out" if others else "leave it out"
            return f"{settings.attention_backend}: vLLM refuses it on this GPU ({gpu}): {message}; use {instead}"
    if settings.kv_cache_dtype is not None:
        kv = settings.kv_cache_dtype.value
        message = kv_refusal(doc, kv, backend)
        if message:
            with_backend = f" with {backend}" if backend else ""
            taken = " or ".join([d for d in kv_accepted(doc) if d != kv] if backend is None else ["auto"]) or "auto"
            return (
                f"{settings.kv_cache_dtype}: vLLM refuses it{with_backend} on this GPU ({gpu}): {message}; use "
                f"--kv-cache-dtype {taken} instead (auto: the model dtype, fp16 with --dtype half)"
            )
    return None


def visible_gpu() -> tuple[tuple[int, int], str] | None:
    """The compute capability and name of the GPU torch sees with the lowest capability (the one vLLM refuses most
    on; one vLLM is started on all of them); None without a GPU."""
    try:
        import torch

        if not torch.cuda.is_available():
            return None
        devices = [(torch.cuda.get_device_capability(i), i) for i in range(torch.cuda.device_count())]
        capability, index = min(devices)
        return tuple(capability), torch.cuda.get_device_name(index)
    except Exception:  # no usable CUDA here: nothing to judge against
        return None


def judge_on_visible_gpu(settings: DeviceSettings) -> str | None:
    """:func:`refusal_line` for the visible GPU, asking the installed vLLM only when the user set something it
    judges per device; None without a GPU (vllm serve then fails on that, said elsewhere)."""
    if not settings:
        return None
    gpu = visible_gpu()
    if gpu is None:
        return None
    capability, name = gpu
    doc = vllm_decisions.probe_vllm_decisions(
        capability,
        kv_cache_dtypes=[settings.kv_cache_dtype.value] if settings.kv_cache_dtype else [],
        attention_backends=[settings.attention_backend.value] if settings.attention_backend else [],
        device_name=name,
        real_device=True,
        questions=SERVE_QUESTIONS,
    )
    return refusal_line(settings, doc)


def check_serve_settings(
    args: Sequence[str],
    config_path: str | None,
    config: Mapping[str, Any],
    environ: Mapping[str, str],
    vllm_env_names: Collection[str] | None,
    judge: Callable[[DeviceSettings], str | None] | None = None,
) -> None:
    """:class:`ServeArgsError` with the one line when vLLM refuses one of the user's settings on this GPU."""
    settings = user_settings(args, config_path, config, environ, vllm_env_names)
    if not settings:
        return  # nothing the user set is judged per GPU: vLLM is not asked (nor imported)
    refusal = (judge or judge_on_visible_gpu)(settings)
    if refusal:
        raise ServeArgsError(refusal)


def refusals(doc: dict[str, Any]) -> list[dict[str, str]]:
    """Every setting vLLM refuses on the device of ``doc``, with its message (for ``caovan doctor``)."""
    out = []
    for entry in doc.get("model_dtypes", []):
        if not entry["ok"]:
            out.append({"setting": f"--dtype {entry['dtype']}", "message": entry["message"]})
    candidates = (doc.get("attention") or {}).get("candidates")
    for entry in doc.get("attention_backends", []):
        # A name an older selection ignores (a backend of another platform) is no refusal worth a line.
        if not entry["valid"] and not entry.get("ignored") and (candidates is None or entry["name"] in candidates):
            out.append({"setting": f"--attention-backend {entry['name']}", "message": entry["reason"]})
    for entry in doc.get("kv_cache_dtypes", []):
        if entry["auto"].get("refusal"):
            out.append({"setting": f"--kv-cache-dtype {entry['dtype']}", "message": entry["auto"]["refusal"]})
    for entry in doc.get("quantization", []):
        if entry.get("ok_on_device") is False:
            out.append({"setting": f"--quantization {entry['method']}", "message": entry["reason"]})
    sampler = (doc.get("flashinfer") or {}).get("sampler")
    if sampler and not sampler["usable"]:
        out.append({"setting": "VLLM_USE_FLASHINFER_SAMPLER=1", "message": sampler["reason"]})
    return out
