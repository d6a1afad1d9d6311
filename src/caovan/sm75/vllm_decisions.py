"""What the installed vLLM decides for a device of a given compute capability (7.5 unless told): the ``vllm`` part
of the ``sm75`` tier's findings, and what ``caovan doctor`` and ``caovan serve`` ask for the real GPU.

:func:`probe_vllm_decisions` runs vLLM's own selection and validation code on its CUDA platform made to report
the capability (:mod:`caovan.sm75.vllm_platform`) and answers:

1. which attention backends are valid, with vLLM's reason where one is refused, and which it picks itself;
2. which KV-cache dtypes each backend takes (``auto`` is the model dtype, fp16 with ``--dtype half``);
3. whether FlashInfer attention and the FlashInfer sampler are usable;
4. which GDN prefill backend ``auto`` resolves to;
5. the quantization methods' capability floors, and whether float16 / bfloat16 models are allowed.

Everything is found by probing (classes, signatures, attributes); a question this release cannot be asked is
listed in ``unanswered`` with the reason, never guessed.  The document is JSON-able; its shape is
:func:`empty_document`'s.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Collection, Iterable
from typing import Any

from .kv_cache_kernels import impl_refusal, kernel_refusal
from .vllm_attention import (
    HEAD_SIZE,
    KV_CACHE_DTYPES,
    AttentionProbe,
    Unanswerable,
    judge_backends,
    judge_kv_cache_dtypes,
)
from .vllm_platform import (
    SimulatedPlatform,
    captured_vllm_logs,
    import_cuda_platform_module,
    simulated_cuda_platform,
)
from .vllm_questions import (
    flashinfer_package,
    flashinfer_sampler,
    gdn_prefill_backend,
    import_ahead,
    kv_platform_check,
    model_dtypes,
    quantization,
)

#: The questions, as ``unanswered`` names them.
QUESTIONS = (
    "attention_backends",
    "kv_cache_dtypes",
    "flashinfer_attention",
    "flashinfer_sampler",
    "gdn_prefill_backend",
    "quantization",
    "model_dtypes",
)


def empty_document(capability: tuple[int, int]) -> dict[str, Any]:
    """The document with every answer still empty."""
    return {
        "capability": list(capability),
        "attention_backends": [],
        "kv_cache_dtypes": [],
        "flashinfer": {"attention": None, "sampler": None},
        "gdn_prefill_backend": {"chosen": None, "how": None},
        "quantization": [],
        "model_dtypes": [],
        "unanswered": [],
    }


def _ask(doc: dict[str, Any], question: str, answer: Callable[[], Any]) -> Any:
    """``answer()``, or None with ``question`` listed in ``unanswered`` and why (an absent API, or any failure of
    the probe itself: a probe reports, it never raises)."""
    try:
        return answer()
    except Unanswerable as exc:
        why = str(exc)
    except Exception as exc:  # the release's code failed in a way the probe did not foresee: said, not hidden
        why = f"{type(exc).__name__}: {exc}"
    doc["unanswered"].append({"question": question, "why": why})
    return None


def _flashinfer_attention(judged: list[dict[str, Any]]) -> dict[str, Any]:
    entry = next((b for b in judged if b["name"] == "FLASHINFER"), None)
    if entry is None:
        raise Unanswerable("this vLLM's attention backends have no FLASHINFER")
    installed, package = flashinfer_package()
    if not entry["valid"]:
        return {"usable": False, "reason": f"{entry['reason']} ({package})"}
    if not installed:
        # An older selection takes the name without importing the backend, which then fails to import.
        return {"usable": False, "reason": f"vLLM's CUDA selection takes FLASHINFER on this device, but {package}"}
    return {"usable": True, "reason": f"vLLM's CUDA selection takes FLASHINFER on this device; {package}"}


def probe_vllm_decisions(
    capability: tuple[int, int] = (7, 5),
    *,
    kv_cache_dtypes: Iterable[str] = KV_CACHE_DTYPES,
    attention_backends: Iterable[str] = (),
    device_name: str | None = None,
    real_device: bool = False,
    questions: Collection[str] = QUESTIONS,
) -> dict[str, Any]:
    """The installed vLLM's decisions for a device of ``capability`` (see the module docstring).

    ``kv_cache_dtypes`` / ``attention_backends``: asked besides the defaults (a user's own ``--kv-cache-dtype``,
    ``--attention-backend``).  ``device_name`` / ``real_device``: a real GPU of this capability is the current
    device (doctor, serve): vLLM's few questions to the device itself go to it.  ``questions``: the ones to ask
    (serve needs three); the others are listed in ``not_asked``.
    """
    capability = (int(capability[0]), int(capability[1]))
    doc = empty_document(capability)
    asked = [q for q in QUESTIONS if q in questions]
    if len(asked) < len(QUESTIONS):
        doc["not_asked"] = [q for q in QUESTIONS if q not in asked]
    started = time.monotonic()
    with contextlib.ExitStack() as stack:
        try:
            import vllm  # noqa: F401  (the release asked)

            with captured_vllm_logs([]):
                cuda_module, stubbed = import_cuda_platform_module()
                imported_ahead = import_ahead(cuda_module, capability, asked)
            imported = time.monotonic()
            sim = stack.enter_context(
                simulated_cuda_platform(capability, device_name=device_name, real_device=real_device)
            )
        except Exception as exc:  # no vLLM, or no CUDA platform in it to ask: every question is unanswered
            why = f"vLLM's CUDA platform cannot be set up: {type(exc).__name__}: {exc}"
            doc["unanswered"] = [{"question": q, "why": why} for q in asked]
            return doc
        doc["platform"] = {
            "class": type(sim.platform).__mro__[1].__qualname__,
            "stubbed_extensions": stubbed,
            "simulated": not real_device,
            "import_failures": imported_ahead,
        }
        _answer(doc, sim, asked, list(kv_cache_dtypes), list(attention_backends))
    # Importing vLLM's modules that hold the decisions (the GDN layer, the FlashInfer backend) takes most of it.
    doc["seconds"] = {"imports": round(imported - started, 2), "decisions": round(time.monotonic() - imported, 2)}
    return doc


def _answer(
    doc: dict[str, Any], sim: SimulatedPlatform, asked: list[str], kv_cache_dtypes: list[str], named: list[str]
) -> None:
    """Fill ``doc`` with the answers to ``asked`` on the simulated platform ``sim``."""
    import torch

    if {"attention_backends", "kv_cache_dtypes", "flashinfer_attention"} & set(asked):
        _attention(doc, sim, asked, torch.float16, kv_cache_dtypes, named)
    if "flashinfer_sampler" in asked:
        doc["flashinfer"]["sampler"] = _ask(doc, "flashinfer_sampler", lambda: flashinfer_sampler(sim))
    if "gdn_prefill_backend" in asked:
        prefill = _ask(doc, "gdn_prefill_backend", lambda: gdn_prefill_backend(sim))
        if prefill is not None:
            doc["gdn_prefill_backend"] = prefill
    if "quantization" in asked:
        doc["quantization"] = _ask(doc, "quantization", lambda: quantization(sim)) or []
    if "model_dtypes" in asked:
        doc["model_dtypes"] = _ask(doc, "model_dtypes", lambda: model_dtypes(sim)) or []


def _attention(
    doc: dict[str, Any],
    sim: SimulatedPlatform,
    asked: list[str],
    dtype: Any,
    kv_cache_dtypes: list[str],
    named: list[str],
) -> None:
    """Questions 1, 2 and 3a: they share vLLM's attention selection."""
    probe = _ask(
        doc, "attention_backends", lambda: AttentionProbe(sim.platform, sim.cuda_module, sim.capability, dtype)
    )
    judged = _ask(doc, "attention_backends", lambda: judge_backends(probe, named)) if probe is not None else None
    if judged is None:
        for question in ("kv_cache_dtypes", "flashinfer_attention"):
            if question in asked:
                doc["unanswered"].append({"question": question, "why": "vLLM's attention selection could not be asked"})
        return
    doc["attention_backends"] = judged["backends"]
    doc["attention"] = {
        "candidates": judged["candidates"],
        "auto": judged["auto"],
        "backends_validate_themselves": judged["validates"],
        "how": "each backend named to the CUDA platform's get_attn_backend_cls (as --attention-backend NAME does) "
        f"for a head-size-{HEAD_SIZE} float16 decoder layer; auto: no backend named",
    }
    doc["unanswered"] += [
        {"question": f"attention_backends {i['name']}", "why": i["why"]} for i in judged["not_judged"]
    ]
    if "kv_cache_dtypes" in asked:
        # Asked of the backends vLLM's own selection tries on this device (of every valid one where the release
        # keeps no such list), and of those the caller named.
        kv_backends = judged["candidates"] or [b["name"] for b in judged["backends"] if b["valid"]]
        kv_backends = list(dict.fromkeys([*kv_backends, *(name.upper() for name in named)]))
        dtypes = list(dict.fromkeys([*KV_CACHE_DTYPES, *kv_cache_dtypes]))
        check = kv_platform_check(sim)
        capability = tuple(doc["capability"])

        def backend_check(kv_dtype: str, name: str, path: str) -> str | None:
            return impl_refusal(path, kv_dtype) or kernel_refusal(name, kv_dtype, dtype, sim.platform, capability)

        kv = _ask(
            doc, "kv_cache_dtypes", lambda: judge_kv_cache_dtypes(probe, kv_backends, dtypes, check, backend_check)
        )
        if kv is not None:
            doc["kv_cache_dtypes"], not_judged = kv
            doc["unanswered"] += not_judged
    if "flashinfer_attention" in asked:
        doc["flashinfer"]["attention"] = _ask(
            doc, "flashinfer_attention", lambda: _flashinfer_attention(judged["backends"])
        )


# --- reading a document -------------------------------------------------------------------------------------------


def valid_backends(doc: dict[str, Any]) -> list[str]:
    """The attention backends vLLM takes on the device, those its own selection tries first (when it keeps a list)."""
    valid = [b["name"] for b in doc.get("attention_backends", []) if b.get("valid")]
    candidates = (doc.get("attention") or {}).get("candidates") or []
    return [n for n in candidates if n in valid] + [n for n in valid if n not in candidates]


def backend_refusal(doc: dict[str, Any], name: str) -> str | None:
    """vLLM's reason for refusing backend ``name`` on the device; None where it takes it or was not asked."""
    entry = next((b for b in doc.get("attention_backends", []) if b["name"] == name.upper()), None)
    return None if entry is None or entry.get("valid") else entry.get("reason")


def kv_refusal(doc: dict[str, Any], dtype: str, backend: str | None = None) -> str | None:
    """vLLM's reason for refusing KV-cache dtype ``dtype`` on the device, with ``backend`` named or (None) with
    the backend vLLM picks itself; None where it is taken or was not asked."""
    entry = next((k for k in doc.get("kv_cache_dtypes", []) if k["dtype"] == dtype), None)
    if entry is None:
        return None
    if backend is None:
        return entry["auto"].get("refusal")
    refused = next((r for r in entry["refused_by"] if r["backend"] == backend.upper()), None)
    return None if refused is None else refused["message"]


def kv_accepted(doc: dict[str, Any]) -> list[str]:
    """The KV-cache dtypes vLLM's own selection takes on the device."""
    return [k["dtype"] for k in doc.get("kv_cache_dtypes", []) if k["auto"].get("backend")]


def dtype_refusal(doc: dict[str, Any], dtype: str) -> str | None:
    entry = next((d for d in doc.get("model_dtypes", []) if d["dtype"] == dtype), None)
    return None if entry is None or entry["ok"] else entry["message"]


def summary(doc: dict[str, Any]) -> list[str]:
    """A few lines for a person: what vLLM takes and refuses on the device."""
    cap = ".".join(str(x) for x in doc["capability"])
    lines = [f"vLLM's decisions for compute capability {cap}:"]
    refused = [b for b in doc["attention_backends"] if not b["valid"]]
    candidates = (doc.get("attention") or {}).get("candidates")
    if doc["attention_backends"]:
        auto = (doc.get("attention") or {}).get("auto") or {}
        lines.append(
            f"  attention: valid {', '.join(valid_backends(doc)) or 'none'}; vLLM picks "
            f"{auto.get('backend') or 'none: ' + str(auto.get('refusal'))}"
        )
        if not (doc.get("attention") or {}).get("backends_validate_themselves", True):
            lines.append("    (this vLLM's backends do not check the device themselves: a named one is taken as named)")
        shown = [b for b in refused if not b.get("ignored") and (candidates is None or b["name"] in candidates)]
        for b in shown:
            lines.append(f"    refused {b['name']}: {b['reason']}")
        if len(refused) > len(shown):
            lines.append(f"    (+{len(refused) - len(shown)} names vLLM's CUDA selection ignores or does not list)")
    for k in doc["kv_cache_dtypes"]:
        auto = k["auto"]
        if auto.get("refusal"):
            verdict = f"REFUSED: {auto['refusal']}"
        else:
            verdict = (
                f"vLLM picks {auto['backend']}" if auto.get("backend") else f"unanswered: {auto.get('unanswered')}"
            )
        lines.append(f"  kv {k['dtype']}: accepted by {', '.join(k['accepted_by']) or 'none'}; {verdict}")
    for part in ("attention", "sampler"):
        fi = doc["flashinfer"].get(part)
        if fi:
            lines.append(f"  flashinfer {part}: {'usable' if fi['usable'] else 'NOT usable'} ({fi['reason']})")
    prefill = doc["gdn_prefill_backend"]
    if prefill.get("chosen"):
        lines.append(f"  GDN prefill: {prefill['chosen']} ({prefill['how']})")
    for q in doc["quantization"]:
        state = "?" if q["ok_on_device"] is None else ("ok" if q["ok_on_device"] else "REFUSED")
        lines.append(f"  quant {q['method']}: min capability {q['min_capability']} -> {state}")
    for d in doc["model_dtypes"]:
        lines.append(f"  dtype {d['dtype']}: {'ok' if d['ok'] else 'REFUSED: ' + str(d['message'])}")
    for u in doc["unanswered"]:
        lines.append(f"  unanswered {u['question']}: {u['why']}")
    return lines
