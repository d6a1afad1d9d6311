"""The adapter interface: one adapter per family of vLLM releases whose GDN internals look alike.

An adapter never trusts a version number: ``probe()`` imports the installed vLLM and checks every class,
method signature and module attribute the adapter will touch, and reports each one found or missing with
the reason.  The version range is only a hint (it orders the probing and is shown in diagnostics).
"""

from __future__ import annotations

import importlib
import inspect
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, ClassVar

from packaging.specifiers import SpecifierSet
from packaging.version import InvalidVersion, Version

from ..signatures import has_argument, has_leading_arguments


@dataclass(frozen=True)
class HookPoint:
    """One thing an adapter needs from vLLM: ``found`` and, either way, ``detail`` saying where or why not."""

    name: str
    found: bool
    detail: str


@dataclass(frozen=True)
class ProbeReport:
    family_id: str
    version_hint: str
    vllm_version: str | None
    hook_points: tuple[HookPoint, ...] = field(default_factory=tuple)

    @property
    def ok(self) -> bool:
        return bool(self.hook_points) and all(h.found for h in self.hook_points)

    @property
    def hint_matches(self) -> bool:
        return version_in(self.vllm_version, self.version_hint)

    @property
    def reason(self) -> str:
        if self.ok:
            return f"all {len(self.hook_points)} hook points found"
        missing = [h for h in self.hook_points if not h.found]
        if not missing:
            return "nothing probed"
        first = missing[0]
        more = f" (+{len(missing) - 1} more)" if len(missing) > 1 else ""
        return f"missing {first.name}: {first.detail}{more}"

    def as_dict(self) -> dict[str, Any]:
        return {
            "family": self.family_id,
            "version_hint": self.version_hint,
            "vllm_version": self.vllm_version,
            "hint_matches": self.hint_matches,
            "ok": self.ok,
            "reason": self.reason,
            "hook_points": [{"name": h.name, "found": h.found, "detail": h.detail} for h in self.hook_points],
        }


def version_in(version: str | None, spec: str) -> bool:
    if not version:
        return False
    try:
        # Dev and local builds (0.21.1.dev3+gabc) count as the release they lead to.
        return Version(Version(version).base_version) in SpecifierSet(spec)
    except InvalidVersion:
        return False


def installed_vllm_version() -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("vllm")
    except PackageNotFoundError:
        return None


class Prober:
    """Collects hook points; each check records found/missing instead of raising."""

    def __init__(self) -> None:
        self.points: list[HookPoint] = []

    def record(self, name: str, found: bool, detail: str) -> bool:
        self.points.append(HookPoint(name, found, detail))
        return found

    def module(self, dotted: str) -> Any | None:
        try:
            mod = importlib.import_module(dotted)
        except Exception as exc:  # any import failure means this family's layout is absent
            self.record(dotted, False, f"import failed: {type(exc).__name__}: {exc}")
            return None
        self.record(dotted, True, "importable")
        return mod

    def attribute(self, owner: Any, attr: str, label: str) -> Any | None:
        if owner is None:
            self.record(label, False, "owner missing")
            return None
        try:
            value = getattr(owner, attr, None)
        except Exception as exc:  # a module __getattr__ (lazy import) or a property can raise anything
            self.record(label, False, f"attribute access raised {type(exc).__name__}: {exc}")
            return None
        if value is None:
            self.record(label, False, "attribute not present")
            return None
        self.record(label, True, "present")
        return value

    def subclass(self, cls: Any, base: Any, label: str) -> bool:
        ok = isinstance(cls, type) and isinstance(base, type) and issubclass(cls, base)
        return self.record(label, ok, "subclass" if ok else f"not a subclass of {getattr(base, '__name__', base)}")

    def arguments(
        self, func: Callable[..., Any] | None, names: Iterable[str], label: str, leading: bool = False
    ) -> bool:
        """vllm-spyre's ``has_argument`` idea: detect a feature by the parameters a callable accepts.

        ``leading``: ``names`` must also be the method's first parameters after ``self``, in this order — for the
        methods caovan overrides or wraps, whose arguments arrive, or are passed on, by position."""
        names = tuple(names)
        if func is None:
            return self.record(label, False, "callable missing")
        missing = [n for n in names if not has_argument(func, n)]
        if missing:
            return self.record(label, False, f"parameters missing: {', '.join(missing)}")
        if leading and not has_leading_arguments(func, names):
            return self.record(label, False, f"parameters not in the order self, {', '.join(names)}: {_shape(func)}")
        return self.record(label, True, "signature has " + ", ".join(names))

    def fields(self, cls: Any, names: Iterable[str], label: str) -> bool:
        if cls is None:
            return self.record(label, False, "class missing")
        present = set(getattr(cls, "__dataclass_fields__", {})) | set(getattr(cls, "__annotations__", {}))
        missing = [n for n in names if n not in present and not hasattr(cls, n)]
        if missing:
            return self.record(label, False, f"fields missing: {', '.join(missing)}")
        return self.record(label, True, f"{len(list(names))} fields present")

    def equals(self, value: Any, expected: Any, label: str) -> bool:
        ok = value == expected
        return self.record(label, ok, f"== {expected!r}" if ok else f"is {value!r}, expected {expected!r}")


def lookup(owner: Any, attr: str) -> Any | None:
    """``getattr(owner, attr, None)`` that never raises: the next check then reports the hook point missing."""
    try:
        return getattr(owner, attr, None)
    except Exception:
        return None


def _shape(func: Callable[..., Any]) -> str:
    try:
        return f"{getattr(func, '__name__', 'callable')}{inspect.signature(func)}"
    except (TypeError, ValueError):
        return repr(func)


class GdnAdapter(ABC):
    """One vLLM family.  Subclasses set ``family_id`` (shown to users) and ``version_hint`` (a PEP 440 range)."""

    family_id: ClassVar[str]
    version_hint: ClassVar[str]
    description: ClassVar[str]

    def probe(self, vllm_version: str | None = None) -> ProbeReport:
        """Every hook point's finding; ``vllm_version``: the version to report (the one a selection ordered the
        families by), else the installed one, read now."""
        prober = Prober()
        try:
            self._probe(prober)
        except Exception as exc:  # a probe must report, never raise into vLLM
            prober.record("probe", False, f"{type(exc).__name__}: {exc}")
        return ProbeReport(
            family_id=self.family_id,
            version_hint=self.version_hint,
            vllm_version=vllm_version if vllm_version is not None else installed_vllm_version(),
            hook_points=tuple(prober.points),
        )

    @abstractmethod
    def _probe(self, prober: Prober) -> None:
        """Record every hook point this family needs through ``prober``."""

    @abstractmethod
    def install(self) -> str:
        """Put caovan's override in place (idempotent); returns what happened, for the status line.  All or
        nothing: when it raises, whatever it had patched is already undone (the plugin then reports inert)."""

    @abstractmethod
    def uninstall(self) -> bool:
        """Take the override out again; True when there was one."""
