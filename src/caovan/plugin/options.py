"""caovan's user options: the keys of vLLM's ``--additional-config`` and the environment.

Turbo3 users enable the plugin in two styles, both accepted here:

* 0.1.3 style: ``{"caovan_sm75_turbo3": true}``
* 0.4.x style: ``{"caovan": true, "caovan_mode": "auto", "caovan_require_turbo3": true}``

and, as Turbo3 0.4.33 added, ``"caovan_prefill": true`` beside either: caovan's own GDN prefill (GDNCore) too.

and ``CAOVAN_REQUIRE_TURBO3=1`` in the environment.  vLLM only hands ``additional_config`` to code that runs
while the model is built, so these options are read at layer construction, never at plugin load.
Any key starting with ``caovan`` (in any letter case) that is not listed here is a mistake (a typo would otherwise
silently leave the plugin off), so it is an error naming the key.  Likewise a ``CAOVAN_*`` environment variable
caovan does not read is never ignored silently: the plugin logs one warning line naming each (``unknown_env``).

How the environment is judged is one function, :func:`check_environment`: the plugin's start-up acts on it (a FAIL
stops vLLM, a WARN is logged), ``caovan doctor`` reports it (a FAIL is its FAIL), and ``caovan serve`` refuses a
FAIL before starting vLLM.  A doctor that judged on its own once passed a ``CAOVAN_REQUIRE_TURBO3`` value the
start-up refused.
"""

from __future__ import annotations

import difflib
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

Mode = Literal["auto", "on", "off"]
MODES: tuple[Mode, ...] = ("auto", "on", "off")

REQUIRE_ENV = "CAOVAN_REQUIRE_TURBO3"
#: Set by ``caovan serve`` when its AutoSpec chose the MTP depth (the routing line says ``speculative_config=auto``).
AUTOSPEC_ENV = "CAOVAN_SERVE_AUTOSPEC"
_ENV_TRUE = frozenset({"1", "true", "yes", "on"})
_ENV_FALSE = frozenset({"", "0", "false", "no", "off"})

#: Every ``caovan*`` key of ``additional_config`` with the values it accepts (used in error messages).
KNOWN_KEYS: dict[str, str] = {
    "caovan_sm75_turbo3": "true or false",
    "caovan": "true or false",
    "caovan_mode": '"auto", "on" or "off"',
    "caovan_require_turbo3": "true or false",
    "caovan_prefill": "true or false",
}


#: Every ``CAOVAN_*`` environment variable caovan reads, with who reads it.  The matrix tooling's and the test
#: suites' count too: they are set in environments where vLLM (and so the plugin) also runs.
KNOWN_ENV: dict[str, str] = {
    REQUIRE_ENV: "plugin: require mode",
    "CAOVAN_CACHE_DIR": "plugin: JIT cache folder",
    "CAOVAN_COUNTERS_FILE": "plugin: dispatch counters written at exit",
    "CAOVAN_LOG_COUNTERS": "plugin: dispatch counters logged at exit",
    "CAOVAN_GUARDS_APPLIED": "plugin: set by its own environment guard for the processes vLLM starts",
    AUTOSPEC_ENV: "plugin: set by caovan serve when its AutoSpec chose the MTP depth",
    "CAOVAN_PROFILE": "caovan serve: the start-up profiles' mode when --caovan-profile is not given",
    "CAOVAN_RUNNER": "matrix (nox)",
    "CAOVAN_TIERS": "matrix (nox)",
    "CAOVAN_REDO": "matrix (nox)",
    "CAOVAN_STRICT": "matrix (nox)",
    "CAOVAN_WHEELHOUSE": "matrix (nox)",
    "CAOVAN_SYSTEM_SITE_PACKAGES": "matrix (nox)",
    "CAOVAN_MATRIX_CACHE": "matrix (nox)",
    "CAOVAN_SITE": "matrix (tools/run-gpu-row-offline.sh)",
    "CAOVAN_TIER_FINDINGS_DIR": "matrix: where a tier's tests write their findings (set by the matrix run)",
    "CAOVAN_SM75_CACHE_DIR": "sm75 tier: its compile and part cache (default build/sm75-compile-cache)",
    "CAOVAN_SM75_DEEP": "sm75 tier: 1 compiles every autotune config of every kernel call",
    "CAOVAN_SERVE_DTYPE": "serve tests",
    "CAOVAN_SERVE_LOGPROB_TOL": "serve tests",
    "CAOVAN_SERVE_JOBS": "serve tests",
    "CAOVAN_SERVE_TIMEOUT_S": "serve tests",
    "CAOVAN_SERVE_ARTIFACTS": "serve tests",
    "CAOVAN_WRITE_GOLDEN": "unit tests: 1 rewrites the profiles' golden output (tests/unit/test_profiles_golden.py)",
}

#: Switches Turbo3 users may still set, with what they do here (nothing).
RETIRED_ENV: dict[str, str] = {
    "CAOVAN_GDN_LEGACY_DISABLE": "it has no effect, caovan has no legacy bridge",
}


def unknown_env(environ: Mapping[str, str] | None = None) -> list[str]:
    """One description per ``CAOVAN_*`` variable (any letter case) caovan does not read, sorted by name."""
    env = os.environ if environ is None else environ
    described = []
    for name in sorted(n for n in env if n.upper().startswith("CAOVAN_") and n not in KNOWN_ENV):
        if name in RETIRED_ENV:
            described.append(f"{name} ({RETIRED_ENV[name]})")
            continue
        close = difflib.get_close_matches(name.upper(), KNOWN_ENV, n=1, cutoff=0.75)
        described.append(f"{name} (not read by caovan{f'; did you mean {close[0]}?' if close else ''})")
    return described


class CaovanConfigError(ValueError):
    """A caovan option is malformed; the message names the key and the accepted values."""


class CaovanRequireError(RuntimeError):
    """Require mode is on and caovan cannot activate; the message says why."""


@dataclass(frozen=True)
class CaovanOptions:
    """What the user asked for.

    ``enabled``: take over the GDN speculative-decode core where the model is compatible.
    ``mode``: ``off`` never acts; ``auto`` acts when an enable key is true; ``on`` acts even without one.
    ``require``: refuse to run unaccelerated — start-up fails with the reason instead of a silent fallback.
    ``source``: where the decision came from, for the status line.
    ``prefill``: take over the GDN prefill (FLA's ``chunk_gated_delta_rule``) too; only with ``enabled``.
    """

    enabled: bool = False
    mode: Mode = "auto"
    require: bool = False
    source: str = "default (off)"
    prefill: bool = False


def _bool_key(config: Mapping[str, Any], key: str, where: str) -> bool | None:
    if key not in config:
        return None
    value = config[key]
    if not isinstance(value, bool):
        raise CaovanConfigError(f"{where}: key {key!r} must be {KNOWN_KEYS[key]}, got {type(value).__name__} {value!r}")
    return value


def env_flag(name: str, environ: Mapping[str, str] | None = None, meaning: str = "on") -> bool:
    """A boolean ``CAOVAN_*`` switch: 1/true/yes/on or 0/false/no/off (or unset); anything else is an error."""
    env = os.environ if environ is None else environ
    raw = env.get(name, "")
    value = raw.strip().lower()
    if value in _ENV_TRUE:
        return True
    if value in _ENV_FALSE:
        return False
    raise CaovanConfigError(f"environment variable {name}={raw!r} is not understood: use 1 ({meaning}) or 0 (do not)")


def env_setting(name: str, environ: Mapping[str, str] | None = None) -> str:
    """``NAME=value`` as the user set it, for messages: a user who wrote ``yes`` or `` 1 `` must recognise it."""
    env = os.environ if environ is None else environ
    raw = env.get(name, "")
    return f"{name}={raw}" if raw and raw == raw.strip() else f"{name}={raw!r}"


def vllm_plugins_leaves_out(plugin: str, environ: Mapping[str, str] | None = None) -> str | None:
    """Why ``VLLM_PLUGINS`` keeps vLLM from loading ``plugin``; None when it does not (unset, or listed).

    As vLLM 0.21 reads it (``envs.VLLM_PLUGINS``, ``plugins.load_plugins_by_group``): split on commas, each item
    compared as written, so ``"a, caovan_sm75_turbo3"`` does not load caovan and ``""`` loads no plugin at all.
    """
    env = os.environ if environ is None else environ
    raw = env.get("VLLM_PLUGINS")
    if raw is None or plugin in raw.split(","):
        return None
    spaced = [item for item in raw.split(",") if item.strip() == plugin]
    hint = f" (vLLM does not strip spaces: {spaced[0]!r})" if spaced else ""
    return f"VLLM_PLUGINS={raw!r} does not list {plugin}{hint}: vLLM will not load caovan"


def require_from_env(environ: Mapping[str, str] | None = None) -> bool:
    """``CAOVAN_REQUIRE_TURBO3`` as a bool; any other value than the usual spellings is an error."""
    return env_flag(REQUIRE_ENV, environ, "require")


FAIL = "FAIL"
WARN = "WARN"


@dataclass(frozen=True)
class EnvFinding:
    """One verdict on caovan's environment: FAIL stops start-up, WARN is logged and start-up goes on."""

    level: Literal["FAIL", "WARN"]
    #: The variable judged, or ``CAOVAN_*`` for the unknown ones together.
    setting: str
    message: str


def check_environment(environ: Mapping[str, str] | None = None) -> list[EnvFinding]:
    """Every ``CAOVAN_*`` environment setting judged as the plugin's start-up judges it (:mod:`caovan.plugin` raises
    on a FAIL and logs each WARN), FAILs first; [] when nothing is wrong.

    * ``CAOVAN_REQUIRE_TURBO3`` that is no boolean: FAIL. It may be a user trying to require caovan, so start-up
      refuses to guess either way.
    * ``CAOVAN_LOG_COUNTERS`` that is no boolean: WARN, the counters are not logged (they never fail an exit).
    * ``CAOVAN_*`` variables caovan does not read: one WARN naming each (:func:`unknown_env`).
    """
    env = os.environ if environ is None else environ
    findings = []
    try:
        require_from_env(env)
    except CaovanConfigError as exc:
        findings.append(EnvFinding(FAIL, REQUIRE_ENV, str(exc)))
    try:
        env_flag("CAOVAN_LOG_COUNTERS", env, "log the counters")
    except CaovanConfigError as exc:
        findings.append(EnvFinding(WARN, "CAOVAN_LOG_COUNTERS", f"{exc}; the dispatch counters are not logged"))
    unknown = unknown_env(env)
    if unknown:  # a switch the user believes in must not be ignored silently
        findings.append(EnvFinding(WARN, "CAOVAN_*", f"environment variables caovan ignores: {', '.join(unknown)}"))
    return findings


def _unknown_keys_message(unknown: list[str], where: str) -> str:
    """Every unknown ``caovan*`` key at once (a vLLM start is minutes: one typo per restart is too slow), each with
    the key it most likely means."""
    named, typos = [], []
    for key in unknown:
        if key.lower() in KNOWN_KEYS:
            named.append(f"{key!r} (did you mean {key.lower()!r}?)")
            continue
        named.append(repr(key))
        close = difflib.get_close_matches(key.lower(), KNOWN_KEYS, n=1, cutoff=0.75)
        if close:
            typos.append(f"{close[0]!r}" + (f" for {key!r}" if len(unknown) > 1 else ""))
    accepted = ", ".join(f"{k} ({v})" for k, v in KNOWN_KEYS.items())
    s = "s" if len(unknown) > 1 else ""
    hint = f"; did you mean {', '.join(typos)}?" if typos else ""
    return f"{where}: unknown key{s} {', '.join(named)}; caovan accepts: {accepted}{hint}"


def parse_options(
    additional_config: Mapping[str, Any] | str | None,
    environ: Mapping[str, str] | None = None,
    where: str = "--additional-config",
) -> CaovanOptions:
    """Read caovan's options from vLLM's ``additional_config`` (a dict, or its JSON text) and the environment.

    A non-dict config object of the kind vLLM also accepts (one with ``compute_hash()``) has no caovan keys.

    Keys that do not start with ``caovan`` belong to vLLM or other plugins and are ignored.
    """
    if additional_config is None:
        config: Mapping[str, Any] = {}
    elif isinstance(additional_config, str):
        try:
            config = json.loads(additional_config) if additional_config.strip() else {}
        except json.JSONDecodeError as exc:
            raise CaovanConfigError(f"{where}: not valid JSON ({exc})") from None
    elif not isinstance(additional_config, Mapping) and callable(getattr(additional_config, "compute_hash", None)):
        # vLLM types the field ``dict | SupportsHash``: a platform or another plugin may pass its own config
        # object. It holds no caovan keys, so caovan is off; an error here would stop vLLM over someone else's
        # setting.
        config = {}
    else:
        config = additional_config
    if not isinstance(config, Mapping):
        raise CaovanConfigError(f"{where}: must be a JSON object, got {type(config).__name__}")

    # Any letter case: {"CAOVAN": true} would otherwise leave the plugin silently off.
    unknown = sorted(str(k) for k in config if str(k).lower().startswith("caovan") and k not in KNOWN_KEYS)
    if unknown:
        raise CaovanConfigError(_unknown_keys_message(unknown, where))

    legacy = _bool_key(config, "caovan_sm75_turbo3", where)
    modern = _bool_key(config, "caovan", where)
    require_cfg = _bool_key(config, "caovan_require_turbo3", where)
    mode = config.get("caovan_mode", "auto")
    if mode not in MODES:
        folded = mode.strip().lower() if isinstance(mode, str) else None
        hint = f' (values are lower case: did you mean "{folded}"?)' if folded in MODES else ""
        raise CaovanConfigError(f"{where}: key 'caovan_mode' must be {KNOWN_KEYS['caovan_mode']}, got {mode!r}{hint}")
    if legacy is not None and modern is not None and legacy != modern:
        # JSON spelling (true, not True): what the user wrote and will search their command line for.
        raise CaovanConfigError(
            f"{where}: 'caovan_sm75_turbo3'={json.dumps(legacy)} and 'caovan'={json.dumps(modern)} contradict each "
            "other; keep one"
        )
    switch = legacy if legacy is not None else modern
    switch_key = "caovan_sm75_turbo3" if legacy is not None else "caovan"
    if switch is False and mode == "on":
        raise CaovanConfigError(f"{where}: '{switch_key}'=false contradicts 'caovan_mode'=\"on\"; keep one")

    require_env = require_from_env(environ)
    require = bool(require_cfg) or require_env

    if mode == "off":
        enabled, source = False, "caovan_mode=off"
    elif mode == "on":
        enabled, source = True, "caovan_mode=on"
    elif switch:
        enabled, source = True, f"{switch_key}=true"
    elif switch is False:
        enabled, source = False, f"{switch_key}=false"
    elif "caovan_mode" in config:
        # "auto" alone reads like "on when it can" to a Turbo3 user: say the enable key is what is missing.
        enabled, source = False, 'caovan_mode=auto without "caovan": true'
    else:
        enabled, source = False, "default (off)"

    if require and not enabled:
        by = "caovan_require_turbo3=true" if require_cfg else env_setting(REQUIRE_ENV, environ)
        raise CaovanConfigError(
            f"{by} asks caovan to refuse running unaccelerated, but caovan is not enabled ({source}); "
            f'add {{"caovan": true}} to --additional-config or drop the require switch'
        )
    prefill = _bool_key(config, "caovan_prefill", where)
    if prefill and not enabled:
        raise CaovanConfigError(
            f"{where}: 'caovan_prefill'=true asks for caovan's GDN prefill, but caovan is not enabled ({source}); "
            'add "caovan": true beside it or drop it'
        )
    return CaovanOptions(enabled=enabled, mode=mode, require=require, source=source, prefill=bool(prefill))
