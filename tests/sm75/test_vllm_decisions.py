"""The sm75 tier's ``vllm`` part: what the row's own vLLM decides for a compute-capability 7.5 device (attention
backends, KV-cache dtypes, FlashInfer, the GDN prefill backend, quantization floors, model dtypes), asked of its
selection and validation code on its CUDA platform made to report 7.5 (:mod:`caovan.sm75.vllm_decisions`), and
written as the findings part ``vllm``.

The tests pass when every question was answered or listed as unanswered with the reason, whatever the answers;
at least one attention backend must be judged on every release.  ``-s`` prints the answers.  The last test shows
``caovan serve`` stopping on a setting this vLLM really refuses on 7.5, found by the probe.
"""

from __future__ import annotations

import json
import time

import pytest

from caovan.sm75.findings import write_part
from caovan.sm75.part_cache import cached_part
from caovan.sm75.vllm_decisions import QUESTIONS, probe_vllm_decisions, summary

pytestmark = pytest.mark.sm75


def _probe() -> dict:
    started = time.perf_counter()
    import vllm  # noqa: F401  (timed apart from the probe)

    imported = time.perf_counter()
    doc = probe_vllm_decisions((7, 5))
    print(f"\n(importing vLLM: {imported - started:.1f} s; probe: {doc.get('seconds')})")
    return doc


@pytest.fixture(scope="module")
def decisions():
    # The answers are a function of caovan's files and the installed vLLM / torch / Triton: asked once per change
    # (caovan.sm75.part_cache); the tests below that run the probe again compare with them.
    doc, cached = cached_part("vllm", _probe)
    print(("\n(from the part cache)\n" if cached else "\n") + "\n".join(summary(doc)))
    return doc


def _unanswered(doc: dict, question: str) -> list[dict]:
    """The unanswered entries of ``question`` ("attention_backends FLASH_ATTN" is one backend of it)."""
    return [u for u in doc["unanswered"] if u["question"].split(" ")[0] == question]


def test_vllm_decisions_for_7_5_are_complete_and_written(decisions):
    doc = decisions
    json.dumps(doc)  # a findings part must be JSON
    write_part("vllm", doc)
    assert doc["capability"] == [7, 5]
    for entry in doc["unanswered"]:
        assert entry["question"].split(" ")[0] in QUESTIONS and entry["why"], entry

    judged = [b for b in doc["attention_backends"] if isinstance(b["valid"], bool)]
    assert judged, f"no attention backend judged on this release: {_unanswered(doc, 'attention_backends')}"
    for backend in judged:
        assert backend["valid"] or backend["reason"], f"{backend['name']} refused without vLLM's reason"

    answered = {
        "attention_backends": bool(judged),
        "kv_cache_dtypes": {k["dtype"] for k in doc["kv_cache_dtypes"]} >= {"auto", "fp8", "fp8_e4m3", "fp8_e5m2"},
        "flashinfer_attention": doc["flashinfer"]["attention"] is not None,
        "flashinfer_sampler": doc["flashinfer"]["sampler"] is not None,
        "gdn_prefill_backend": bool(doc["gdn_prefill_backend"]["chosen"] and doc["gdn_prefill_backend"]["how"]),
        "quantization": bool(doc["quantization"]),
        "model_dtypes": {d["dtype"] for d in doc["model_dtypes"]} == {"float16", "bfloat16"},
    }
    for question, ok in answered.items():
        assert ok or _unanswered(doc, question), f"{question}: neither answered nor listed as unanswered"

    for kv in doc["kv_cache_dtypes"]:
        assert all(r["message"] for r in kv["refused_by"]), kv
        assert kv["auto"].get("backend") or kv["auto"].get("refusal") or kv["auto"].get("unanswered"), kv
    for part in ("attention", "sampler"):
        found = doc["flashinfer"][part]
        assert found is None or (isinstance(found["usable"], bool) and found["reason"]), found
    for quant in doc["quantization"]:
        assert isinstance(quant["min_capability"], int) or quant["reason"], quant
        if quant["ok_on_device"] is False:
            assert quant["reason"], quant
    for dtype in doc["model_dtypes"]:
        assert dtype["ok"] or dtype["message"], dtype


def test_the_probe_leaves_vllm_as_it_found_it(decisions):
    import sys

    import torch
    from vllm import platforms

    before = platforms.current_platform
    capability = torch.cuda.get_device_capability
    again = probe_vllm_decisions((7, 5), questions=("attention_backends", "model_dtypes"))
    assert platforms.current_platform is before and torch.cuda.get_device_capability is capability
    simulated = [
        name
        for name, module in list(sys.modules.items())
        if name.startswith("vllm") and type(vars(module).get("current_platform")).__name__.startswith("Simulated")
    ]
    assert not simulated, f"modules still see the simulated platform: {simulated}"
    # Asked twice in one process, vLLM answers the same (no cache kept an answer of the simulated device).
    assert again["attention_backends"] == decisions["attention_backends"]
    assert again["model_dtypes"] == decisions["model_dtypes"]


def _a_real_refusal(doc: dict) -> tuple[str, str, str] | None:
    """(flag, value, vLLM's message) of a setting this vLLM refuses on 7.5, found by the probe."""
    for kv in doc["kv_cache_dtypes"]:
        if kv["auto"].get("refusal"):
            return "--kv-cache-dtype", kv["dtype"], kv["auto"]["refusal"]
    candidates = (doc.get("attention") or {}).get("candidates")
    for backend in doc["attention_backends"]:
        if backend["valid"] is False and (candidates is None or backend["name"] in candidates):
            return "--attention-backend", backend["name"], backend["reason"]
    for dtype in doc["model_dtypes"]:
        if not dtype["ok"]:
            return "--dtype", dtype["dtype"], dtype["message"]
    return None


def test_serve_stops_on_a_setting_this_vllm_refuses_on_7_5(decisions, tmp_path, monkeypatch, capsys):
    from caovan import cli
    from caovan.bench.model_folders import write_tiny_qwen3_next
    from caovan.serving import device_refusals

    refusal = _a_real_refusal(decisions)
    if refusal is None:
        pytest.skip("this vLLM refuses none of the settings asked on 7.5 (kv dtypes, backends, dtypes): no refusal")
    flag, value, message = refusal
    # A 2080 Ti stands in for the GPU; the decisions are the real vLLM's, on its simulated 7.5 platform.
    monkeypatch.setattr(device_refusals, "visible_gpu", lambda: ((7, 5), "stand-in RTX 2080 Ti"))
    real_probe = device_refusals.vllm_decisions.probe_vllm_decisions

    def simulated_probe(*args, **kwargs):
        return real_probe(*args, **{**kwargs, "real_device": False})  # no 7.5 GPU here to answer for itself

    monkeypatch.setattr(device_refusals.vllm_decisions, "probe_vllm_decisions", simulated_probe)
    model = write_tiny_qwen3_next(tmp_path / "next")
    status = cli.main(["serve", str(model), "--caovan-dry-run", flag, value])
    out, err = capsys.readouterr()
    print(f"\ncaovan serve {flag} {value} on 7.5: exit {status}\n{err}")
    assert status == 2 and out == ""
    assert len(err.splitlines()) == 1
    assert err.startswith(f"caovan serve: error: {flag} {value}: vLLM refuses it") and message in err
