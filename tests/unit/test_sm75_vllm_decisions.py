"""Unit tests of :mod:`caovan.sm75.vllm_decisions` and :mod:`caovan.serving.device_refusals` against a fake vLLM.

The fake is a tiny ``vllm`` package written to a temporary folder and imported in place of the real one (whose
modules are put back afterwards): a CUDA platform whose own ``get_device_capability`` fails as it does without a
driver, an attention backend enum, and two backends — ``FLASH_ATTN``, planted to refuse devices below 8.0 with its
own reason, and ``TRITON_ATTN``, planted to refuse the fp8 KV cache with its own message.  Both read the device
through a ``current_platform`` they imported at module level, as vLLM's backends do, so the answers show the
simulation reached them.  The real vLLM is asked by the sm75 tier (tests/sm75/test_vllm_decisions.py).
"""

from __future__ import annotations

import importlib
import json
import os
import sys
import textwrap

import pytest

from caovan.serving import device_refusals
from caovan.serving.serve_flags import ServeArgsError
from caovan.sm75.vllm_attention import Unanswerable, keyword_call
from caovan.sm75.vllm_decisions import QUESTIONS, probe_vllm_decisions, summary

PLANTED_CAPABILITY_REASON = "planted: FLASH_ATTN needs compute capability 8.0"
PLANTED_KV_MESSAGE = "planted: TRITON_ATTN keeps no fp8 KV cache"
PLANTED_BF16_MESSAGE = "planted: Bfloat16 needs compute capability 8.0"

FAKE_VLLM = {
    "vllm/__init__.py": "",
    "vllm/platforms/__init__.py": """
        from .interface import Platform, UnspecifiedPlatform

        current_platform = UnspecifiedPlatform()
    """,
    "vllm/platforms/interface.py": """
        from typing import NamedTuple


        class DeviceCapability(NamedTuple):
            major: int
            minor: int

            def to_int(self):
                return self.major * 10 + self.minor


        class Platform:
            _enum = "unspecified"

            def is_cuda(self):
                return self._enum == "cuda"

            @classmethod
            def get_device_capability(cls, device_id=0):
                return None

            @classmethod
            def has_device_capability(cls, capability, device_id=0):
                current = cls.get_device_capability(device_id=device_id)
                if current is None:
                    return False
                if isinstance(capability, tuple):
                    return current >= capability
                return current.to_int() >= capability


        class UnspecifiedPlatform(Platform):
            pass
    """,
    "vllm/platforms/cuda.py": """
        import enum

        import torch

        from .interface import Platform


        class AttentionBackendEnum(enum.Enum):
            FLASH_ATTN = "vllm.fake_backends.FlashAttentionBackend"
            TRITON_ATTN = "vllm.fake_backends.TritonAttentionBackend"
            ROCM_ATTN = "vllm.fake_backends.RocmAttentionBackend"

            def get_class(self):
                import importlib

                module, name = self.value.rsplit(".", 1)
                return getattr(importlib.import_module(module), name)


        def _get_backend_priorities(use_mla, device_capability):
            return [AttentionBackendEnum.FLASH_ATTN, AttentionBackendEnum.TRITON_ATTN]


        class CudaPlatform(Platform):
            _enum = "cuda"

            @classmethod
            def get_device_capability(cls, device_id=0):
                raise RuntimeError("Found no NVIDIA driver on your system")

            @classmethod
            def has_device_capability(cls, capability, device_id=0):
                raise RuntimeError("NVML asked: no NVIDIA driver on your system")

            @classmethod
            def get_device_name(cls, device_id=0):
                raise RuntimeError("NVML asked: no NVIDIA driver on your system")

            @classmethod
            def get_attn_backend_cls(cls, selected_backend, head_size, dtype, kv_cache_dtype, block_size, use_mla):
                if selected_backend is not None:
                    reasons = selected_backend.get_class().validate_configuration(head_size, kv_cache_dtype)
                    if reasons:
                        raise ValueError(
                            f"Selected backend {selected_backend} is not valid for this configuration. "
                            f"Reason: {reasons}"
                        )
                    return selected_backend.value
                invalid = {}
                for backend in _get_backend_priorities(use_mla, cls.get_device_capability()):
                    reasons = backend.get_class().validate_configuration(head_size, kv_cache_dtype)
                    if not reasons:
                        return backend.value
                    invalid[backend.name] = reasons
                raise ValueError(f"No valid attention backend found for cuda. Reasons: {invalid}.")

            @classmethod
            def check_if_supports_dtype(cls, dtype):
                if dtype == torch.bfloat16 and not cls.has_device_capability(80):
                    raise ValueError("planted: Bfloat16 needs compute capability 8.0")
    """,
    "vllm/fake_backends.py": """
        from vllm.platforms import current_platform


        class FlashAttentionBackend:
            @classmethod
            def validate_configuration(cls, head_size, kv_cache_dtype):
                if not current_platform.has_device_capability(80):
                    return ["planted: FLASH_ATTN needs compute capability 8.0"]
                return []


        class TritonAttentionImpl:
            def __init__(self, num_heads, head_size, scale, num_kv_heads, kv_cache_dtype, logits_soft_cap=None):
                if kv_cache_dtype == "fp8_e4m3" and not current_platform.has_device_capability(89):
                    raise ValueError("planted: the impl refuses fp8_e4m3 below 8.9")


        class TritonAttentionBackend:
            @staticmethod
            def get_impl_cls():
                return TritonAttentionImpl

            @classmethod
            def validate_configuration(cls, head_size, kv_cache_dtype):
                if not current_platform.is_cuda():
                    return ["not on CUDA"]
                if kv_cache_dtype == "fp8":
                    return ["planted: TRITON_ATTN keeps no fp8 KV cache"]
                return []


        class RocmAttentionBackend:
            @classmethod
            def validate_configuration(cls, head_size, kv_cache_dtype):
                return []
    """,
}


@pytest.fixture
def fake_vllm(tmp_path):
    """The fake ``vllm`` importable in place of the real one; the real one's modules come back afterwards."""
    for relative, text in FAKE_VLLM.items():
        path = tmp_path / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text), encoding="utf-8")
    real = {name: sys.modules.pop(name) for name in list(sys.modules) if name.split(".")[0] == "vllm"}
    sys.path.insert(0, str(tmp_path))
    importlib.invalidate_caches()
    try:
        yield tmp_path
    finally:
        sys.path.remove(str(tmp_path))
        for name in [name for name in sys.modules if name.split(".")[0] == "vllm"]:
            del sys.modules[name]
        sys.modules.update(real)
        importlib.invalidate_caches()


def _backend(doc: dict, name: str) -> dict:
    return next(b for b in doc["attention_backends"] if b["name"] == name)


def _kv(doc: dict, dtype: str) -> dict:
    return next(k for k in doc["kv_cache_dtypes"] if k["dtype"] == dtype)


def test_a_planted_backend_that_refuses_7_5_shows_up_with_its_reason(fake_vllm):
    doc = probe_vllm_decisions((7, 5))
    flash = _backend(doc, "FLASH_ATTN")
    assert flash["valid"] is False and PLANTED_CAPABILITY_REASON in flash["reason"]
    assert flash["reason"].startswith("Selected backend AttentionBackendEnum.FLASH_ATTN is not valid")
    assert _backend(doc, "TRITON_ATTN")["valid"] is True
    assert doc["attention"]["candidates"] == ["FLASH_ATTN", "TRITON_ATTN"]  # ROCM_ATTN is not on CUDA's list
    assert doc["attention"]["auto"]["backend"] == "TRITON_ATTN"
    json.dumps(doc)


def test_a_kv_dtype_refused_with_a_message_shows_up_with_it(fake_vllm):
    doc = probe_vllm_decisions((7, 5))
    fp8 = _kv(doc, "fp8")
    assert fp8["accepted_by"] == []
    refused = {r["backend"]: r["message"] for r in fp8["refused_by"]}
    assert PLANTED_KV_MESSAGE in refused["TRITON_ATTN"] and PLANTED_CAPABILITY_REASON in refused["FLASH_ATTN"]
    # vLLM's own choice has nothing left to pick: its refusal quotes both reasons.
    assert fp8["auto"]["backend"] is None and PLANTED_KV_MESSAGE in fp8["auto"]["refusal"]
    assert _kv(doc, "fp8_e5m2")["accepted_by"] == ["TRITON_ATTN"]
    assert any(
        line.startswith("  kv fp8: accepted by none; REFUSED: No valid attention backend") for line in summary(doc)
    )


def test_the_answers_follow_the_capability_asked(fake_vllm):
    doc = probe_vllm_decisions((9, 0))
    assert _backend(doc, "FLASH_ATTN")["valid"] is True and doc["attention"]["auto"]["backend"] == "FLASH_ATTN"
    assert {d["dtype"]: d["ok"] for d in doc["model_dtypes"]} == {"float16": True, "bfloat16": True}
    # FLASH_ATTN takes fp8 in its selection, but FlashAttention 3 cannot give the float16 layer's output.
    fp8 = _kv(doc, "fp8")["auto"]
    assert fp8["backend"] is None and "output must have dtype BF16" in fp8["refusal"]
    assert _kv(doc, "auto")["auto"]["backend"] == "FLASH_ATTN"


def test_a_kv_dtype_the_backend_s_impl_refuses_is_refused_with_its_message(fake_vllm):
    e4m3 = _kv(probe_vllm_decisions((7, 5)), "fp8_e4m3")
    assert e4m3["auto"] == {"backend": None, "refusal": (
        "TritonAttentionImpl refuses it when the model's layers are built: planted: the impl refuses fp8_e4m3 below 8.9"
    )}  # fmt: skip
    assert "TRITON_ATTN" not in e4m3["accepted_by"]
    assert "TRITON_ATTN" in _kv(probe_vllm_decisions((9, 0)), "fp8_e5m2")["accepted_by"]


def test_bfloat16_is_refused_below_8_0_with_the_platforms_message(fake_vllm):
    doc = probe_vllm_decisions((7, 5))
    assert {d["dtype"]: (d["ok"], d["message"]) for d in doc["model_dtypes"]} == {
        "float16": (True, None),
        "bfloat16": (False, PLANTED_BF16_MESSAGE),
    }


def test_questions_this_release_cannot_be_asked_are_unanswered_with_why(fake_vllm):
    doc = probe_vllm_decisions((7, 5))
    unanswered = {u["question"]: u["why"] for u in doc["unanswered"]}
    # The fake has no sampler, GDN layer, quantization registry, nor FLASHINFER backend.
    assert set(unanswered) == {"flashinfer_attention", "flashinfer_sampler", "gdn_prefill_backend", "quantization"}
    assert all(unanswered.values())
    assert "no FLASHINFER" in unanswered["flashinfer_attention"]
    assert doc["gdn_prefill_backend"] == {"chosen": None, "how": None} and doc["quantization"] == []
    assert set(QUESTIONS) - set(unanswered) == {"attention_backends", "kv_cache_dtypes", "model_dtypes"}


def test_the_probe_puts_every_platform_reference_back(fake_vllm):
    import vllm.fake_backends
    import vllm.platforms

    original = vllm.platforms.current_platform
    probe_vllm_decisions((7, 5))
    assert vllm.platforms.current_platform is original
    assert vllm.fake_backends.current_platform is original  # a module that imported it by name


def test_a_vllm_without_a_cuda_platform_leaves_every_question_unanswered(fake_vllm):
    (fake_vllm / "vllm/platforms/cuda.py").write_text("raise ImportError('no CUDA platform in this build')\n")
    importlib.invalidate_caches()
    doc = probe_vllm_decisions((7, 5))
    assert [u["question"] for u in doc["unanswered"]] == list(QUESTIONS)
    assert all("no CUDA platform in this build" in u["why"] for u in doc["unanswered"])


def test_an_argument_caovan_cannot_fill_is_unanswerable_not_guessed():
    def get_attn_backend_cls(selected_backend, head_size, some_new_argument):
        return "chosen"

    assert keyword_call(lambda head_size, extra=1: head_size, {"head_size": 256, "unused": 1}) == 256
    with pytest.raises(Unanswerable, match="requires 'some_new_argument'"):
        keyword_call(get_attn_backend_cls, {"selected_backend": None, "head_size": 256})


# --- the user's settings, as serve reads them and judges them against a document ---------------------------------


def _doc(capability=(7, 5)) -> dict:
    """A document as the probe writes it: FLASH_ATTN refused on the device, fp8 refused by every backend."""
    return {
        "capability": list(capability),
        "attention_backends": [
            {"name": "FLASH_ATTN", "valid": False, "reason": PLANTED_CAPABILITY_REASON, "candidate": True},
            {"name": "TRITON_ATTN", "valid": True, "reason": None, "candidate": True},
        ],
        "attention": {"candidates": ["FLASH_ATTN", "TRITON_ATTN"], "auto": {"backend": "TRITON_ATTN"}},
        "kv_cache_dtypes": [
            {"dtype": "auto", "accepted_by": ["TRITON_ATTN"], "refused_by": [], "auto": {"backend": "TRITON_ATTN"}},
            {
                "dtype": "fp8",
                "accepted_by": [],
                "refused_by": [{"backend": "TRITON_ATTN", "message": PLANTED_KV_MESSAGE}],
                "auto": {"backend": None, "refusal": f"No valid attention backend found: {PLANTED_KV_MESSAGE}"},
            },
        ],
        "model_dtypes": [
            {"dtype": "float16", "ok": True, "message": None},
            {"dtype": "bfloat16", "ok": False, "message": PLANTED_BF16_MESSAGE},
        ],
        "quantization": [{"method": "gptq_marlin", "min_capability": 80, "ok_on_device": False, "reason": "floor 80"}],
        "flashinfer": {"attention": None, "sampler": None},
        "unanswered": [],
    }


def _settings(args, config=None, environ=None, names=None):
    return device_refusals.user_settings(args, "serve.yaml" if config else None, config or {}, environ or {}, names)


def test_the_users_settings_are_read_where_vllm_reads_them():
    settings = _settings(["--dtype=bfloat16", "--kv-cache-dtype", "fp8", "-ac", '{"backend": "FLASH_ATTN"}'])
    assert (str(settings.dtype), str(settings.kv_cache_dtype), str(settings.attention_backend)) == (
        "--dtype bfloat16",
        "--kv-cache-dtype fp8",
        "-ac backend FLASH_ATTN",
    )
    assert str(_settings(["--attention-config.backend", "FLASH_ATTN"]).attention_backend) == (
        "--attention-config.backend FLASH_ATTN"
    )
    from_file = _settings([], {"kv-cache-dtype": "fp8", "attention-backend": "flash_attn"})
    assert str(from_file.kv_cache_dtype) == "--config serve.yaml: kv-cache-dtype fp8"
    assert from_file.attention_backend.value == "flash_attn"
    assert str(_settings(["--kv-cache-dtype", "auto"], {"kv-cache-dtype": "fp8"}).kv_cache_dtype) == (
        "--kv-cache-dtype auto"  # the command line wins over the file, as in vLLM
    )
    env = {"VLLM_ATTENTION_BACKEND": "FLASH_ATTN"}
    assert str(_settings([], environ=env).attention_backend) == "VLLM_ATTENTION_BACKEND=FLASH_ATTN"
    assert _settings([], environ=env, names={"VLLM_RPC_TIMEOUT"}).attention_backend is None  # not read there
    assert not _settings(["--port", "8000", "--", "--dtype", "bfloat16"])  # after "--": not a flag


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (
            ["--dtype", "bfloat16"],
            f"--dtype bfloat16: vLLM refuses it on this GPU (sm_75): {PLANTED_BF16_MESSAGE}; use --dtype half instead",
        ),
        (
            ["--attention-backend", "flash_attn"],
            f"--attention-backend flash_attn: vLLM refuses it on this GPU (sm_75): {PLANTED_CAPABILITY_REASON}; use "
            "one of TRITON_ATTN, or leave it out",
        ),
        (
            ["--kv-cache-dtype", "fp8"],
            f"--kv-cache-dtype fp8: vLLM refuses it on this GPU (sm_75): No valid attention backend found: "
            f"{PLANTED_KV_MESSAGE}; use --kv-cache-dtype auto instead (auto: the model dtype, fp16 with --dtype half)",
        ),
        (
            ["--kv-cache-dtype", "fp8", "--attention-backend", "TRITON_ATTN"],
            f"--kv-cache-dtype fp8: vLLM refuses it with TRITON_ATTN on this GPU (sm_75): {PLANTED_KV_MESSAGE}; use "
            "--kv-cache-dtype auto instead (auto: the model dtype, fp16 with --dtype half)",
        ),
    ],
)
def test_a_refused_setting_is_one_line_with_vllms_reason_and_what_to_use(args, line):
    assert device_refusals.refusal_line(_settings(args), _doc()) == line


def test_settings_vllm_takes_or_was_not_asked_about_pass():
    for args in (["--dtype", "half"], ["--dtype", "float32"], ["--attention-backend", "TRITON_ATTN"], ["--x"]):
        assert device_refusals.refusal_line(_settings(args), _doc()) is None
    assert device_refusals.refusal_line(_settings(["--kv-cache-dtype", "int8_per_token_head"]), _doc()) is None


def test_serve_settings_are_judged_only_when_the_user_set_one():
    asked = []

    def judge(settings):
        asked.append(settings)
        return "refused"

    device_refusals.check_serve_settings(["--port", "1"], None, {}, {}, None, judge)
    assert asked == []  # nothing to judge: vLLM is not even asked
    assert device_refusals.judge_on_visible_gpu(device_refusals.DeviceSettings()) is None
    with pytest.raises(ServeArgsError, match="^refused$"):
        device_refusals.check_serve_settings(["--dtype", "bfloat16"], None, {}, {}, None, judge)


def test_without_a_gpu_nothing_is_asked(monkeypatch):
    monkeypatch.setattr(device_refusals, "visible_gpu", lambda: None)
    monkeypatch.setattr(device_refusals.vllm_decisions, "probe_vllm_decisions", lambda *a, **k: pytest.fail("asked"))
    assert device_refusals.judge_on_visible_gpu(_settings(["--dtype", "bfloat16"])) is None


def test_the_visible_gpu_is_asked_about_with_its_own_capability(monkeypatch):
    calls = []

    def probe(capability, **kwargs):
        calls.append((capability, kwargs))
        return _doc(capability)

    monkeypatch.setattr(device_refusals, "visible_gpu", lambda: ((7, 5), "NVIDIA GeForce RTX 2080 Ti"))
    monkeypatch.setattr(device_refusals.vllm_decisions, "probe_vllm_decisions", probe)
    line = device_refusals.judge_on_visible_gpu(_settings(["--kv-cache-dtype", "fp8_e4m3", "-ac", '{"backend": "X"}']))
    assert line is None  # neither is refused in the stand-in document
    ((capability, kwargs),) = calls
    assert capability == (7, 5) and kwargs["real_device"] is True
    assert kwargs["device_name"] == "NVIDIA GeForce RTX 2080 Ti"
    assert kwargs["kv_cache_dtypes"] == ["fp8_e4m3"] and kwargs["attention_backends"] == ["X"]


def test_doctor_lists_every_refusal_of_a_document():
    found = {r["setting"]: r["message"] for r in device_refusals.refusals(_doc())}
    assert found == {
        "--dtype bfloat16": PLANTED_BF16_MESSAGE,
        "--attention-backend FLASH_ATTN": PLANTED_CAPABILITY_REASON,
        "--kv-cache-dtype fp8": f"No valid attention backend found: {PLANTED_KV_MESSAGE}",
        "--quantization gptq_marlin": "floor 80",
    }


def test_a_release_without_the_sampler_class_is_asked_through_its_decision_function(monkeypatch):
    # vLLM 0.34: TopKTopPSampler is gone; flashinfer_sampler_supported() decides, and raises when the user opted in.
    import types

    from caovan.sm75 import vllm_questions

    reason = "FlashInfer top-p/top-k sampling unavailable: unsupported compute capability 7.5."

    def flashinfer_sampler_supported():
        if os.environ.get(vllm_questions.SAMPLER_ENV) == "1":
            raise RuntimeError(reason)
        return False

    module = types.ModuleType(vllm_questions.SAMPLER_MODULE)
    module.flashinfer_sampler_supported = flashinfer_sampler_supported
    monkeypatch.setitem(sys.modules, vllm_questions.SAMPLER_MODULE, module)
    sim = types.SimpleNamespace(logs=[], log_messages=lambda since=0: [])
    answer = vllm_questions.flashinfer_sampler(sim)
    assert answer == {"usable": False, "used_by_default": False, "reason": f"RuntimeError: {reason}"}
    del module.flashinfer_sampler_supported  # neither the class nor the function: unanswered, with why
    with pytest.raises(Unanswerable, match="neither TopKTopPSampler nor flashinfer_sampler_supported"):
        vllm_questions.flashinfer_sampler(sim)
