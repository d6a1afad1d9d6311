"""The sm75 tier's ``kernels`` part: the row's real GDN layer's Triton kernels, compiled for sm_75 with its Triton.

One child process (``python -m caovan.sm75.kernel_verdicts``, fresh imports so that vLLM sizes its autotune lists
for a 7.5 device) records the launches of vLLM's own layer at real per-GPU shapes and judges each kernel. The tests
here check that the recorder reached what it must reach — found by name from the installed family's record, never
from a list kept per release — and that every kernel has a verdict. The verdicts themselves (runs / cannot) are
findings, written to the row's result; a release where a kernel cannot run still passes this tier.
``CAOVAN_SM75_DEEP=1`` compiles every config of every call.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from caovan.sm75 import write_part
from caovan.sm75.part_cache import cached_part

pytestmark = pytest.mark.sm75

CHILD_TIMEOUT_S = 3600  # a cold compile cache on a 2-core machine; warm it takes seconds


def _run_child(out, deep: bool) -> dict:
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="")  # vLLM imports without a GPU only with this set
    env.pop("TRITON_INTERPRET", None)  # compiles, never interprets
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    command = [sys.executable, "-m", "caovan.sm75.kernel_verdicts", "--out", str(out), *(["--deep"] if deep else [])]
    proc = subprocess.run(command, env=env, capture_output=True, text=True, timeout=CHILD_TIMEOUT_S)
    log = (proc.stdout + "\n" + proc.stderr)[-6000:]
    if proc.returncode != 0 or not out.exists():
        pytest.fail(f"python -m caovan.sm75.kernel_verdicts ended with {proc.returncode}:\n{log}")
    print(proc.stdout.strip())
    return json.loads(out.read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def kernels_part(tmp_path_factory):
    deep = os.environ.get("CAOVAN_SM75_DEEP", "") == "1"
    out = tmp_path_factory.mktemp("sm75") / "kernels.json"
    # The part is a function of caovan's files and the installed vLLM / torch / Triton: made once per change.
    document, cached = cached_part("kernels", lambda: _run_child(out, deep), extra=[deep])
    if cached:
        print(f"kernels part from the cache (same caovan and installed files): {document['verdict']}")
    write_part("kernels", document)  # first: the findings stand whatever the checks below say
    return document


@pytest.fixture(scope="module")
def family(kernels_part):
    """The installed family as the child found it (its record's refusal and spec-path functions)."""
    if kernels_part["family_refusal"]:
        reason = kernels_part["family_refusal"]
        pytest.skip(f"caovan refuses family {kernels_part['family']} ({reason}): the layer rig builds served ones")
    return kernels_part


def _kernels_of(document, step):
    return {k["kernel"] for k in document["kernels"] if step in k["steps"]}


def test_vllm_sized_its_kernels_for_the_7_5_device(kernels_part):
    # A kernel module imported before the device view made its import-time choices for this machine.
    assert kernels_part["imported_before_the_device_view"] == []


def test_every_shape_and_state_dtype_reached_the_layer(kernels_part, family):
    assert kernels_part["unreached"] == [], "\n".join(kernels_part["unreached"])
    assert all(c["launches"] for c in kernels_part["combinations"]), kernels_part["combinations"]


def test_the_prefill_kernels_are_found_by_name(kernels_part, family):
    prefill = _kernels_of(kernels_part, "prefill")
    assert any("chunk" in name for name in prefill), f"no FLA chunk kernel in the prefill step: {sorted(prefill)}"
    assert any("conv1d" in name for name in prefill), f"no causal conv1d kernel in the prefill step: {sorted(prefill)}"


def test_the_spec_decode_kernels_are_found_by_name(kernels_part, family):
    # The functions the family record says the spec path calls each launch a kernel named after them.
    spec = _kernels_of(kernels_part, "spec-decode")
    for function in family["family_spec_path"]:
        assert any(function in name for name in spec), f"{function}: no kernel of that name in {sorted(spec)}"


def test_every_kernel_has_a_verdict(kernels_part, family):
    lines = []
    for kernel in kernels_part["kernels"]:
        assert kernel["verdict"] in ("runs", "cannot", "unchecked"), kernel
        call = next((c for c in kernel["calls"] if c["verdict"] == kernel["verdict"]), kernel["calls"][0])
        detail = call.get("config") if kernel["verdict"] == "runs" else call.get("reason")
        lines.append(f"{kernel['verdict']:9} {kernel['kernel']}: {detail}")
    assert kernels_part["caovan"], "caovan's own kernels were not compiled"
    print("\n".join(lines))


def test_caovans_prefill_kernels_compile_for_sm75_with_this_rows_triton(kernels_part, family):
    # The sm_75 gate runs with the CI's Triton; each row's Triton compiles the prefill's sm75 entry here.
    from caovan.kernels.gdn_prefill.aot import KERNEL_NAMES

    prefill = [k for k in kernels_part["caovan"] if k["kernel"] in KERNEL_NAMES]
    assert {k["kernel"] for k in prefill} == set(KERNEL_NAMES), "caovan's prefill kernels were not compiled"
    cannot = [f"{k['kernel']} ({k['seen_in']}): {k['reason']}" for k in prefill if k["verdict"] != "runs"]
    assert not cannot, "\n".join(cannot)
    for k in prefill:
        print(f"{k['kernel']} ({k['seen_in']}): {k['registers']} registers, {k['spill_bytes']} B spilled")
