"""Dispatch counters and the once-per-process activation line.

Users grep the activation line (Turbo3 wording) to know the kernels really run; tests read the counters.
Counters count Python-level calls of the layer core: under full CUDA graphs the core runs at capture only
and replays are invisible here, so the engine tests that count calls run eagerly.

``CAOVAN_COUNTERS_FILE``: when set, each process writes its counters as JSON at exit to this path, with
``{pid}`` replaced by the process id (vLLM runs the model in worker processes the caller cannot inspect).  vLLM
starts its engine core and, with tensor parallelism, its workers as ``multiprocessing`` children, by default
forked: such a child ends with ``os._exit`` after running multiprocessing's finalizers, never ``atexit``'s, so the
exit hook is registered with both (it runs once per process).
``CAOVAN_LOG_COUNTERS=1``: also log the counters at exit (a boolean switch like the others: 1/true/yes/on or
0/false/no/off).  Neither ever makes the exit fail: a value that cannot be used is one warning line.
"""

from __future__ import annotations

import atexit
import json
import multiprocessing.util
import os
import threading
from collections import Counter
from pathlib import Path
from typing import Any

from caovan.log import logger

from .options import CaovanConfigError, env_flag

ACTIVE_LINE = "Caovan SM75 Turbo3 ACTIVE DISPATCH confirmed"
#: Turbo3 0.4.33's line for its own GDN prefill, logged once per process when caovan's prefill first runs.
PREFILL_ACTIVE_LINE = "[Caovan GDNCore] ACTIVE REAL PREFILL"

_lock = threading.Lock()
_dispatched: Counter[str] = Counter()
_fallbacks: Counter[str] = Counter()
_activation_logged = False
_prefill_logged = False
#: The process that registered the exit hook / wrote its counters (a forked child inherits these values).
_exit_hook_pid: int | None = None
_written_pid: int | None = None


def record_dispatch(kind: str, family: str, kernels: tuple[str, ...], layer: str) -> None:
    global _activation_logged
    _dispatched[kind] += 1
    if not _activation_logged:
        with _lock:
            if not _activation_logged:
                _activation_logged = True
                logger.info("%s: family=%s layer=%s kernels=%s", ACTIVE_LINE, family, layer, ",".join(kernels))


def record_prefill(family: str, kernels: tuple[str, ...]) -> None:
    """One prefill call through caovan's GDN prefill (counted as ``dispatched["prefill"]``)."""
    global _prefill_logged
    _dispatched["prefill"] += 1
    if not _prefill_logged:
        with _lock:
            if not _prefill_logged:
                _prefill_logged = True
                logger.info(
                    "%s: family=%s backend=caovan_gdncore kernels=%s", PREFILL_ACTIVE_LINE, family, ",".join(kernels)
                )


def record_fallback(reason: str) -> None:
    _fallbacks[reason] += 1


def snapshot() -> dict[str, Any]:
    return {
        "pid": os.getpid(),
        "activation_logged": _activation_logged,
        "prefill_logged": _prefill_logged,
        "dispatched": dict(_dispatched),
        "fallbacks": dict(_fallbacks),
    }


def reset() -> None:
    global _activation_logged, _prefill_logged
    _dispatched.clear()
    _fallbacks.clear()
    _activation_logged = False
    _prefill_logged = False


def _at_exit() -> None:
    global _written_pid
    if _written_pid == os.getpid():
        return  # the finalizer and atexit both ran in this process
    _written_pid = os.getpid()
    snap = snapshot()
    try:
        log_counters = env_flag("CAOVAN_LOG_COUNTERS", meaning="log the counters")
    except CaovanConfigError as exc:
        logger.warning("caovan dispatch counters not logged: %s", exc)
        log_counters = False
    if log_counters:
        logger.info("caovan dispatch counters: %s", json.dumps(snap, sort_keys=True))
    target = os.environ.get("CAOVAN_COUNTERS_FILE")
    if target:
        path = Path(target.replace("{pid}", str(os.getpid())))
        try:
            tmp = path.with_name(path.name + ".tmp")  # ValueError for a path naming no file ("." or "/")
            tmp.write_text(json.dumps(snap, sort_keys=True))
            os.replace(tmp, path)
        except (OSError, ValueError) as exc:  # a traceback at exit helps nobody: say where and why, once
            logger.warning(
                "caovan dispatch counters not written: CAOVAN_COUNTERS_FILE=%s: %s: %s",
                target,
                type(exc).__name__,
                getattr(exc, "strerror", None) or exc,
            )


def install_exit_hook() -> None:
    """Called when a layer is taken over, so processes that never build one write nothing."""
    global _exit_hook_pid
    with _lock:
        if _exit_hook_pid != os.getpid():
            _exit_hook_pid = os.getpid()
            atexit.register(_at_exit)
            multiprocessing.util.Finalize(None, _at_exit, exitpriority=0)
