"""Questions 3 to 5 of :mod:`caovan.sm75.vllm_decisions`, asked of the installed vLLM on the simulated platform:
the FlashInfer sampler, the GDN prefill backend, the quantization methods' capability floors and the model dtypes.

Each function returns its answer, or raises :class:`~caovan.sm75.vllm_attention.Unanswerable` with the reason when
this release has nothing to ask; the classes and functions asked are found by probing, never by version.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import inspect
import os
import types
from collections.abc import Collection, Iterator
from typing import Any

from .vllm_attention import MachineBound, Unanswerable
from .vllm_platform import SimulatedPlatform, is_machine_bound

#: Where vLLM's GDN layer lives, one place per family of releases (the adapters' families say which is which);
#: the first that imports is asked.
GDN_LAYER_MODULES = (
    "vllm.model_executor.layers.mamba.gdn.qwen_gdn_linear_attn",
    "vllm.model_executor.layers.mamba.gdn_linear_attn",
    "vllm.model_executor.models.qwen3_next",
)
#: Qwen3.5 / Qwen3.6 / Qwen3-Next GDN head sizes (some resolutions depend on linear_key_head_dim).
GDN_HEAD_DIM = 128
#: The quantization methods 2080 Ti users load, as vLLM's ``--quantization`` names them.
QUANT_METHODS = ("awq", "awq_marlin", "gptq_marlin", "compressed-tensors")
#: compressed-tensors W4A16 checkpoints run this scheme, whose floor is its own.
WNA16_SCHEME = ("vllm.model_executor.layers.quantization.compressed_tensors.schemes", "CompressedTensorsWNA16")
SAMPLER_MODULE = "vllm.v1.sample.ops.topk_topp_sampler"
SAMPLER_ENV = "VLLM_USE_FLASHINFER_SAMPLER"


def flashinfer_package() -> tuple[bool, str]:
    """Whether the ``flashinfer`` package vLLM imports is installed in this environment, and a phrase saying so
    (vLLM's CUDA wheels depend on flashinfer-python from some release on; older ones leave it optional)."""
    if importlib.util.find_spec("flashinfer") is None:
        return False, "the flashinfer package is not installed here"
    try:
        from importlib.metadata import version

        return True, f"flashinfer-python {version('flashinfer-python')} is installed here"
    except Exception:  # installed some other way (no distribution metadata)
        return True, "a flashinfer package is installed here"


@contextlib.contextmanager
def _env(name: str, value: str | None) -> Iterator[None]:
    saved = os.environ.get(name)
    if value is None:
        os.environ.pop(name, None)
    else:
        os.environ[name] = value
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = saved


def _ask_sampler(sim: SimulatedPlatform, ask: Any, what: str, env_value: str | None) -> dict[str, Any]:
    """``ask()`` -> (uses FlashInfer, vLLM's answer in words), with ``VLLM_USE_FLASHINFER_SAMPLER`` at
    ``env_value``."""
    start = len(sim.logs)
    with _env(SAMPLER_ENV, env_value):
        try:
            uses, answer = ask()
        except Exception as exc:  # vLLM refuses the opt-in on this device (RuntimeError with its reason)
            if is_machine_bound(exc):
                raise Unanswerable(f"{what} asked this machine's GPU: {type(exc).__name__}: {exc}") from None
            return {"uses_flashinfer": False, "refusal": f"{type(exc).__name__}: {exc}", "log": sim.log_messages(start)}
    return {"uses_flashinfer": uses, "answer": answer, "log": sim.log_messages(start)}


def flashinfer_sampler(sim: SimulatedPlatform) -> dict[str, Any]:
    """Question 3b: vLLM's top-k/top-p sampler on the device, with ``VLLM_USE_FLASHINFER_SAMPLER`` unset (vLLM's
    default) and set to 1 (opted in): whether it takes FlashInfer, and the lines it logged about it. Up to vLLM 0.33
    ``TopKTopPSampler`` is built and the forward method it picks read (``forward_cuda`` is FlashInfer's); from 0.34
    the class is gone and the same module's ``flashinfer_sampler_supported()`` is asked."""
    try:
        module = importlib.import_module(SAMPLER_MODULE)
    except Exception as exc:  # a release with the sampler elsewhere
        raise Unanswerable(f"{SAMPLER_MODULE} does not import: {type(exc).__name__}: {exc}") from None
    sampler_cls = getattr(module, "TopKTopPSampler", None)
    decide = getattr(module, "flashinfer_sampler_supported", None)
    if isinstance(sampler_cls, type):
        what = "TopKTopPSampler()"

        def ask() -> tuple[bool, str]:
            method = getattr(getattr(sampler_cls(), "forward", None), "__name__", None)
            flashinfer = method == "forward_cuda"
            return flashinfer, f"TopKTopPSampler picks {method}" + (" (FlashInfer)" if flashinfer else "")
    elif callable(decide):
        what = "flashinfer_sampler_supported()"

        def ask() -> tuple[bool, str]:
            supported = bool(decide())
            return supported, f"{what} says {'yes' if supported else 'no'}"
    else:
        raise Unanswerable(f"{SAMPLER_MODULE} has neither TopKTopPSampler nor flashinfer_sampler_supported")
    default = _ask_sampler(sim, ask, what, None)
    opted_in = _ask_sampler(sim, ask, what, "1")
    usable = opted_in["uses_flashinfer"]
    said = [line for line in opted_in["log"] + default["log"] if "flashinfer" in line.lower()]
    if opted_in.get("refusal"):
        reason = opted_in["refusal"]
    elif usable:
        reason = f"{opted_in['answer']} with {SAMPLER_ENV}=1" + (
            "; vLLM uses it by default" if default["uses_flashinfer"] else f"; off unless {SAMPLER_ENV}=1"
        )
    else:
        reason = f"{opted_in['answer']} even with {SAMPLER_ENV}=1" + (f": {said[0]}" if said else "")
    return {"usable": usable, "used_by_default": default["uses_flashinfer"], "reason": reason}


def _stand_in_vllm_config(prefill_backend: str) -> types.SimpleNamespace:
    """The parts of a VllmConfig vLLM's GDN prefill resolution reads, for a Qwen3.5/3.6 model in fp16."""
    import torch

    text_config = types.SimpleNamespace(
        linear_key_head_dim=GDN_HEAD_DIM, linear_value_head_dim=GDN_HEAD_DIM, model_type="qwen3_5_text"
    )
    model_config = types.SimpleNamespace(hf_text_config=text_config, hf_config=text_config, dtype=torch.float16)
    return types.SimpleNamespace(additional_config={"gdn_prefill_backend": prefill_backend}, model_config=model_config)


def _resolver_answer(resolve: Any, module_name: str) -> dict[str, Any]:
    result = resolve(_stand_in_vllm_config("auto"))
    chosen = result[-1] if isinstance(result, tuple) else result
    return {
        "chosen": str(chosen),
        "how": f"{module_name}.{resolve.__name__}() called with gdn_prefill_backend 'auto' and GDN head size "
        f"{GDN_HEAD_DIM} on the simulated device",
    }


def _current_vllm_config(prefill_backend: str) -> contextlib.AbstractContextManager[Any]:
    """A default VllmConfig with ``gdn_prefill_backend`` set, made current as vLLM does while it builds a model
    (a CustomOp refuses to be built without one)."""
    config = importlib.import_module("vllm.config")
    setter, config_cls = getattr(config, "set_current_vllm_config", None), getattr(config, "VllmConfig", None)
    if not callable(setter) or not isinstance(config_cls, type):
        raise Unanswerable("vllm.config has no set_current_vllm_config / VllmConfig to build the GDN prefill op under")
    return setter(config_cls(additional_config={"gdn_prefill_backend": prefill_backend}))


def _custom_op_answer(sim: SimulatedPlatform, module: types.ModuleType, cls: type) -> dict[str, Any]:
    """Build the GDN prefill op as a layer does: its ``__init__`` reads ``gdn_prefill_backend`` from the current
    vLLM config and keeps ``forward_cuda`` (FlashInfer) or ``forward_native`` (Triton/FLA)."""
    start = len(sim.logs)
    with _current_vllm_config("auto"):
        op = cls()
    method = getattr(getattr(op, "_forward_method", None), "__name__", None)
    said = [line for line in sim.log_messages(start) if "GDN prefill" in line]
    chosen = {"forward_cuda": "flashinfer", "forward_native": "triton"}.get(method or "")
    if chosen is None:
        raise Unanswerable(
            f"{module.__name__}.{cls.__name__}() kept {method!r}, neither forward_cuda nor forward_native"
        )
    return {
        "chosen": chosen,
        "how": f"{module.__name__}.{cls.__name__}() built with gdn_prefill_backend 'auto' on the simulated device "
        f"kept {method}" + (f" (vLLM logged: {said[0]})" if said else ""),
    }


def gdn_prefill_backend(sim: SimulatedPlatform) -> dict[str, Any]:
    """Question 4: the GDN prefill backend vLLM resolves ``auto`` to on the device, asked of the first GDN layer
    module that imports: its resolution function, else the custom op that reads the setting, else (no setting in
    this release) the FLA Triton function the layer calls directly."""
    failures = []
    for module_name in GDN_LAYER_MODULES:
        if not module_exists(module_name):
            continue
        try:
            module = importlib.import_module(module_name)
        except Exception as exc:  # not this family's place; said if no place answers
            failures.append(f"{module_name}: {type(exc).__name__}: {exc}")
            continue
        resolve = getattr(module, "_resolve_gdn_prefill_backend", None)
        if callable(resolve):
            return _resolver_answer(resolve, module_name)
        for cls in vars(module).values():
            if isinstance(cls, type) and cls.__module__ == module_name and _reads_prefill_setting(cls):
                return _custom_op_answer(sim, module, cls)
        direct = getattr(module, "chunk_gated_delta_rule", None)
        if callable(direct) and str(getattr(direct, "__module__", "")).startswith("vllm.model_executor.layers.fla"):
            return {
                "chosen": "triton",
                "how": f"this vLLM has no gdn_prefill_backend setting: {module_name} calls FLA's Triton "
                f"chunk_gated_delta_rule ({direct.__module__}) directly, on every device",
            }
        failures.append(f"{module_name}: no prefill resolution, custom op or FLA chunk_gated_delta_rule found")
    raise Unanswerable("no GDN layer module answers: " + ("; ".join(failures) or "none of them is in this vLLM"))


def _reads_prefill_setting(cls: type) -> bool:
    init = cls.__dict__.get("__init__")
    try:
        return init is not None and "gdn_prefill_backend" in inspect.getsource(init)
    except (OSError, TypeError):
        return False


def module_exists(dotted: str) -> bool:
    """Whether ``dotted`` can be found (its parent packages imported to look); False where a parent is absent."""
    try:
        return importlib.util.find_spec(dotted) is not None
    except (ImportError, ValueError):  # a parent package missing or broken
        return False


def _quant_registry() -> types.ModuleType:
    return importlib.import_module("vllm.model_executor.layers.quantization")


def quantization(sim: SimulatedPlatform) -> list[dict[str, Any]]:
    """Question 5a: each method's ``get_min_capability()`` (vLLM refuses a checkpoint whose method needs more
    than the device's capability, before loading it), and compressed-tensors' W4A16 scheme's own floor."""
    device = sim.capability.major * 10 + sim.capability.minor
    try:
        get_config = _quant_registry().get_quantization_config
    except Exception as exc:  # the registry moved
        raise Unanswerable(f"vllm.model_executor.layers.quantization.get_quantization_config: {exc}") from None
    found: list[tuple[str, Any]] = []
    out: list[dict[str, Any]] = []
    for method in QUANT_METHODS:
        try:
            found.append((method, get_config(method)))
        except Exception as exc:  # a method this release does not have
            out.append({"method": method, "min_capability": None, "ok_on_device": None, "reason": str(exc)})
    try:
        found.append(("compressed-tensors W4A16", getattr(importlib.import_module(WNA16_SCHEME[0]), WNA16_SCHEME[1])))
    except Exception as exc:  # the scheme moved
        out.append(
            {"method": "compressed-tensors W4A16", "min_capability": None, "ok_on_device": None, "reason": str(exc)}
        )
    for method, cls in found:
        try:
            floor = int(cls.get_min_capability())
        except Exception as exc:  # an abstract or moved classmethod
            out.append({"method": method, "min_capability": None, "ok_on_device": None, "reason": str(exc)})
            continue
        ok = device >= floor
        reason = None if ok else f"{cls.__name__}.get_min_capability() is {floor}, the device's capability {device}"
        out.append(
            {"method": method, "min_capability": floor, "ok_on_device": ok, "reason": reason, "class": cls.__name__}
        )
    return sorted(out, key=lambda entry: [*QUANT_METHODS, "compressed-tensors W4A16"].index(entry["method"]))


def model_dtypes(sim: SimulatedPlatform) -> list[dict[str, Any]]:
    """Question 5b: the platform's ``check_if_supports_dtype`` for float16 and bfloat16 (what vLLM runs on the
    model dtype at start-up), with its message where it refuses."""
    import torch

    check = getattr(sim.platform, "check_if_supports_dtype", None)
    if not callable(check):
        raise Unanswerable("the CUDA platform has no check_if_supports_dtype")
    out = []
    for name in ("float16", "bfloat16"):
        try:
            check(getattr(torch, name))
        except Exception as exc:  # vLLM's refusal (ValueError with its message)
            out.append({"dtype": name, "ok": False, "message": str(exc)})
        else:
            out.append({"dtype": name, "ok": True, "message": None})
    return out


def kv_platform_check(sim: SimulatedPlatform) -> Any:
    """The platform-wide KV-cache dtype check that older releases run on the engine arguments
    (``is_kv_cache_dtype_supported``) as ``(dtype, backend or None) -> refusal or None``; it reads the backend from
    VLLM_ATTENTION_BACKEND, set for the call.  Releases without it: a check that refuses nothing."""
    check = getattr(sim.platform, "is_kv_cache_dtype_supported", None)
    if not callable(check):
        return lambda dtype, backend: None

    def judge(dtype: str, backend: str | None) -> str | None:
        if dtype == "auto":
            return None  # the engine arguments run the check only on an explicit dtype
        with _env("VLLM_ATTENTION_BACKEND", backend):
            try:
                ok = check(dtype, None)
            except Exception as exc:  # its own failure is its answer, unless it asked this machine's GPU
                message = f"is_kv_cache_dtype_supported({dtype!r}) raised {type(exc).__name__}: {exc}"
                if is_machine_bound(exc):
                    raise MachineBound(message) from None
                return message
        if ok:
            return None
        chosen = f" with VLLM_ATTENTION_BACKEND={backend}" if backend else ""
        return (
            f"CudaPlatform.is_kv_cache_dtype_supported({dtype!r}){chosen} is False: "
            f"the engine arguments refuse --kv-cache-dtype {dtype} for the V1 engine"
        )

    return judge


def import_ahead(cuda_module: types.ModuleType, capability: tuple[int, int], questions: Collection[str]) -> list[str]:
    """Import, on this machine's own platform, the modules the questions will ask, before the simulation starts.

    Some vLLM modules choose at import time by platform (``if current_platform.is_cuda(): import the CUDA-only
    extension``); imported during the simulation on a machine without a driver they would fail for that lack,
    which is no answer about the device.  Imported first, they are what this machine imports, and only vLLM's
    decisions run on the simulated device.  Returns what failed to import (each question then says so itself).
    """
    failed = []

    def attempt(label: str, load: Any) -> None:
        try:
            load()
        except Exception as exc:  # asked again in the simulation, where the question reports it
            failed.append(f"{label}: {type(exc).__name__}: {exc}")

    modules = [
        *(GDN_LAYER_MODULES if "gdn_prefill_backend" in questions else ()),
        *((SAMPLER_MODULE,) if "flashinfer_sampler" in questions else ()),
        *((WNA16_SCHEME[0],) if "quantization" in questions else ()),
    ]
    for module_name in modules:
        if module_exists(module_name):
            attempt(module_name, lambda name=module_name: importlib.import_module(name))
    for method in QUANT_METHODS if "quantization" in questions else ():
        attempt(method, lambda method=method: _quant_registry().get_quantization_config(method))
    priorities = getattr(cuda_module, "_get_backend_priorities", None)
    if callable(priorities) and {"attention_backends", "kv_cache_dtypes", "flashinfer_attention"} & set(questions):
        from .vllm_attention import keyword_call

        device = importlib.import_module("vllm.platforms.interface").DeviceCapability(*capability)
        try:
            members = keyword_call(priorities, {"use_mla": False, "device_capability": device})
        except Exception as exc:  # judged without its list then
            members = []
            failed.append(f"_get_backend_priorities: {type(exc).__name__}: {exc}")
        for member in members:
            if callable(getattr(member, "get_class", None)):
                attempt(member.name, member.get_class)
    return failed
