"""Questions 1 and 2 of :mod:`caovan.sm75.vllm_decisions`: which attention backends, and which KV-cache dtypes with
each, the installed vLLM's CUDA platform takes on the simulated device.

Each answer is the platform's own ``get_attn_backend_cls``, asked as vLLM's attention selector asks it at start-up
(a backend the user named, or none for vLLM's choice), for a Qwen3.5/3.6 full-attention layer: head size 256,
float16, no MLA.  Its signature differs across releases (separate arguments, an ``AttentionSelectorConfig``, a
``use_v1`` flag): the call is built from the parameter names it has, never from a version number.  A refusal is
the exception it raises, quoted as vLLM wrote it.
"""

from __future__ import annotations

import enum
import importlib
import inspect
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from .vllm_platform import is_machine_bound

#: The layer judged: Qwen3.5 / Qwen3.6 / Qwen3-Next full-attention layers have head_dim 256; a 2080 Ti runs fp16.
HEAD_SIZE = 256
#: The KV-cache dtypes asked about; "auto" is the model dtype (fp16 with --dtype half).
KV_CACHE_DTYPES = ("auto", "fp8", "fp8_e4m3", "fp8_e5m2")
#: Where releases keep the attention selector's config tuple (newest first).
_SELECTOR_MODULES = ("vllm.v1.attention.selector", "vllm.attention.selector")


class Unanswerable(Exception):
    """This vLLM cannot be asked the question (an API is absent or takes what caovan cannot fill): the reason."""


class MachineBound(Exception):
    """vLLM's code asked this machine's GPU itself and failed for want of one: no answer about the device."""


def keyword_call(func: Callable[..., Any], values: dict[str, Any]) -> Any:
    """``func`` called with the entries of ``values`` it has parameters for; :class:`Unanswerable` when it also
    requires one caovan has no value for (the release's API moved on, and a guess would be no answer)."""
    try:
        parameters = inspect.signature(func).parameters
    except (TypeError, ValueError) as exc:
        raise Unanswerable(f"{getattr(func, '__qualname__', func)} has no readable signature: {exc}") from None
    kwargs = {}
    for name, parameter in parameters.items():
        if parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD):
            continue
        if name in values:
            kwargs[name] = values[name]
        elif parameter.default is parameter.empty:
            raise Unanswerable(f"{getattr(func, '__qualname__', func)} requires {name!r}, which caovan cannot fill")
    return func(**kwargs)


def _refusal_text(exc: BaseException) -> str:
    """vLLM's refusals are ValueErrors whose text says it all; anything else is named by its type."""
    text = str(exc).strip() or type(exc).__name__
    return f"{type(exc).__name__}: {text}" if not isinstance(exc, ValueError) else text


#: Where releases define that enum, for one whose CUDA platform does not import it by name.
_REGISTRY_MODULES = (
    "vllm.v1.attention.backends.registry",
    "vllm.attention.backends.registry",
    "vllm.platforms.interface",
)


def _backend_enums(module: Any) -> list[type[enum.Enum]]:
    return [
        value
        for name, value in vars(module).items()
        if isinstance(value, type)
        and issubclass(value, enum.Enum)
        and "Backend" in name
        and "mamba" not in name.lower()
        and "FLASH_ATTN" in value.__members__
    ]


def backend_enum(cuda_module: Any) -> type[enum.Enum]:
    """The enum of attention backends the CUDA platform compares its ``selected_backend`` with: the one it imports
    (``AttentionBackendEnum`` or the older ``_Backend``), else the registry's; its Mamba counterpart left out."""
    found = _backend_enums(cuda_module)
    for dotted in _REGISTRY_MODULES:
        if found:
            break
        try:
            found = _backend_enums(importlib.import_module(dotted))
        except Exception:  # not this release's place
            continue
    if not found:
        raise Unanswerable(f"no enum of attention backends with a FLASH_ATTN member in {cuda_module.__name__}")
    return found[0]


def _selector_config_class() -> type | None:
    for dotted in _SELECTOR_MODULES:
        try:
            module = importlib.import_module(dotted)
        except Exception:  # an absent or broken module: the next place, or a release with separate arguments
            continue
        cls = getattr(module, "AttentionSelectorConfig", None)
        if isinstance(cls, type) and hasattr(cls, "_fields"):
            return cls
    return None


@dataclass
class Selection:
    """What ``get_attn_backend_cls`` did for one request: the class path it chose, or vLLM's refusal."""

    path: str | None
    refusal: str | None

    @property
    def class_name(self) -> str | None:
        return self.path.rsplit(".", 1)[-1] if self.path else None


@dataclass
class AttentionProbe:
    """vLLM's attention selection on the simulated platform, called with the arguments this release takes."""

    platform: Any
    cuda_module: Any
    capability: Any
    dtype: Any  # torch.float16
    backends: type[enum.Enum] = field(init=False)
    _config_class: type | None = field(init=False)

    def __post_init__(self) -> None:
        if not callable(getattr(self.platform, "get_attn_backend_cls", None)):
            raise Unanswerable("the CUDA platform has no get_attn_backend_cls")
        self.backends = backend_enum(self.cuda_module)
        self._config_class = _selector_config_class()

    @property
    def validates(self) -> bool:
        """Whether this release's backends carry ``validate_configuration`` (a capability check per backend);
        where they do not, the platform's selection is the only judge (it may take any backend it knows)."""
        for dotted in ("vllm.v1.attention.backend", "vllm.attention.backends.abstract"):
            try:
                module = importlib.import_module(dotted)
            except Exception:  # the next place
                continue
            base = getattr(module, "AttentionBackend", None)
            if base is not None:
                return callable(getattr(base, "validate_configuration", None))
        return False

    def _values(self, backend: enum.Enum | None, kv_cache_dtype: str) -> dict[str, Any]:
        values: dict[str, Any] = {
            "selected_backend": backend,
            "head_size": HEAD_SIZE,
            "dtype": self.dtype,
            "kv_cache_dtype": kv_cache_dtype,
            "block_size": None,
            "use_v1": True,
            "use_mla": False,
            "has_sink": False,
            "use_sparse": False,
            "use_mm_prefix": False,
            "attn_type": "decoder",
            "num_heads": None,
            "device_capability": self.capability,
        }
        if self._config_class is not None:
            cls = self._config_class
            missing = [f for f in cls._fields if f not in values and f not in getattr(cls, "_field_defaults", {})]
            if missing:
                raise Unanswerable(f"{cls.__name__} requires {', '.join(missing)}, which caovan cannot fill")
            values["attn_selector_config"] = cls(**{f: values[f] for f in cls._fields if f in values})
        return values

    def select(self, backend: enum.Enum | None, kv_cache_dtype: str = "auto") -> Selection:
        """The platform's answer for ``backend`` (None: vLLM's own choice) with ``kv_cache_dtype``;
        :class:`MachineBound` where vLLM's code asked this machine's (absent) GPU instead."""
        values = self._values(backend, kv_cache_dtype)
        try:
            path = keyword_call(self.platform.get_attn_backend_cls, values)
        except Unanswerable:
            raise
        except Exception as exc:  # vLLM's refusal (ValueError), or whatever the backend's import raised
            if is_machine_bound(exc):
                raise MachineBound(_refusal_text(exc)) from None
            return Selection(None, _refusal_text(exc))
        if not path:
            return Selection(None, f"get_attn_backend_cls returned {path!r}")
        return Selection(str(path), None)

    def candidates(self) -> list[str] | None:
        """The backends vLLM's CUDA selection tries, in its order, for this device (None: the release has no such
        list; its selection is written out in ``get_attn_backend_cls``)."""
        priorities = getattr(self.cuda_module, "_get_backend_priorities", None)
        if not callable(priorities):
            return None
        try:
            ordered = keyword_call(priorities, {"use_mla": False, "device_capability": self.capability})
        except Exception:  # its shape moved: no list, each backend is still judged
            return None
        return [member.name for member in ordered]

    def members(self) -> list[enum.Enum]:
        """Every backend the enum names that can be asked for (a placeholder without a class path is not)."""
        return [m for m in self.backends if m.value not in ("", None)]

    def member(self, name: str) -> enum.Enum | None:
        return self.backends.__members__.get(name.upper())


def _normalized(name: str) -> str:
    return name.lower().replace("_", "").removesuffix("backend")


def judge_backends(probe: AttentionProbe, extra: Iterable[str] = ()) -> dict[str, Any]:
    """Question 1: each backend as ``--attention-backend NAME`` (or VLLM_ATTENTION_BACKEND) names it, and the one
    vLLM picks itself.  A backend whose answer needed this machine's GPU is in ``not_judged`` with the reason."""
    candidates = probe.candidates()
    # Where the release keeps a list, its backends are the question (others are for other platforms or MLA
    # models, and some cannot even be imported without their GPU); without one, every backend the enum names.
    names = list(candidates) if candidates is not None else [m.name for m in probe.members()]
    names += [name.upper() for name in extra if name.upper() not in names]
    judged, not_judged = [], []
    try:
        chosen = probe.select(None)
    except MachineBound as exc:
        chosen = Selection(None, None)
        not_judged.append({"name": "vLLM's own choice", "why": str(exc)})
    for name in names:
        member = probe.member(name)
        if member is None:
            # Not a backend of this vLLM at all: its own argument parser refuses the name, on any GPU.
            not_judged.append({"name": name, "why": f"{probe.backends.__name__} has no member {name}"})
            continue
        try:
            selection = probe.select(member)
        except MachineBound as exc:
            not_judged.append({"name": name, "why": str(exc)})
            continue
        entry: dict[str, Any] = {
            "name": name,
            "valid": selection.refusal is None,
            "reason": selection.refusal,
            "candidate": None if candidates is None else name in candidates,
            "class": selection.path,
        }
        if selection.path and not _loads_itself(member, selection, chosen):
            # An older selection passes a backend it does not handle on to its own default: that is not this one.
            entry["valid"] = False
            entry["reason"] = f"vLLM's CUDA selection does not use {name}: it loads {selection.path} instead"
            entry["ignored"] = True
        judged.append(entry)
    return {
        "backends": judged,
        "not_judged": not_judged,
        "candidates": candidates,
        "auto": {"backend": _name_of(probe, chosen), "class": chosen.path, "refusal": chosen.refusal},
        "validates": probe.validates,
    }


def _loads_itself(member: enum.Enum, selection: Selection, chosen: Selection) -> bool:
    """Whether naming ``member`` made vLLM load ``member``'s class: its own class path where the enum carries one;
    otherwise (an older enum of numbers) anything but the class vLLM loads with no backend named, unless that
    class is ``member``'s by name (FLEX_ATTENTION and FlexAttentionBackend)."""
    if isinstance(member.value, str):
        return member.value.rsplit(".", 1)[-1] == selection.class_name
    if selection.path != chosen.path:
        return True
    return _normalized(member.name) == _normalized(selection.class_name or "")


def _name_of(probe: AttentionProbe, selection: Selection) -> str | None:
    if selection.path is None:
        return None
    for member in probe.members():
        if isinstance(member.value, str) and member.value.rsplit(".", 1)[-1] == selection.class_name:
            return member.name
    for member in probe.members():
        if _normalized(member.name) == _normalized(selection.class_name or ""):
            return member.name
    return selection.class_name


def judge_kv_cache_dtypes(
    probe: AttentionProbe,
    backends: list[str],
    dtypes: Iterable[str],
    platform_check: Callable[[str, str | None], str | None],
    backend_check: Callable[[str, str, str], str | None] = lambda dtype, name, path: None,
) -> tuple[list[dict[str, Any]], list[dict[str, str]]]:
    """Question 2: each KV-cache dtype with each of ``backends`` (selected by name, as the user would) and with
    vLLM's own choice; and what could not be judged here, with why.  ``platform_check(dtype, backend or None)``:
    the refusal of the platform-wide KV check older releases run on the engine arguments (None: accepted, or no
    such check); it may raise :class:`MachineBound` too.  ``backend_check(dtype, backend name, class path)``: the
    selected backend's own refusal beyond the selection (:mod:`caovan.sm75.kv_cache_kernels`)."""
    out, not_judged = [], []
    for dtype in dtypes:
        accepted, refused = [], []
        for name in backends:
            member = probe.member(name)
            if member is None:
                continue  # not a backend of this vLLM (its parser refuses the name): nothing to pair a dtype with
            try:
                selection = probe.select(member, dtype)
                refusal = selection.refusal or platform_check(dtype, name)
                refusal = refusal or backend_check(dtype, name, selection.path or "")
            except MachineBound as exc:
                not_judged.append({"question": f"kv_cache_dtypes {dtype} with {name}", "why": str(exc)})
                continue
            if refusal is not None:
                refused.append({"backend": name, "message": refusal})
            else:
                accepted.append(name)
        auto: dict[str, Any] = {"backend": None, "refusal": None}
        try:
            chosen = probe.select(None, dtype)
            name = _name_of(probe, chosen)
            auto["refusal"] = chosen.refusal or platform_check(dtype, None)
            if auto["refusal"] is None and name is not None:
                auto["refusal"] = backend_check(dtype, name, chosen.path or "")
            auto["backend"] = None if auto["refusal"] else name
        except MachineBound as exc:
            auto["unanswered"] = str(exc)
            not_judged.append({"question": f"kv_cache_dtypes {dtype} with vLLM's own choice", "why": str(exc)})
        out.append({"dtype": dtype, "accepted_by": accepted, "refused_by": refused, "auto": auto})
    return out, not_judged
