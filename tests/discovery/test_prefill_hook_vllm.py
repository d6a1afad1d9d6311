"""Where caovan's GDN prefill goes in, probed on the real vLLM of the row (tier ``discovery``): the family's prefill
call is where its record says (``prefill_route``), and FLA's ``chunk_gated_delta_rule`` takes the keywords caovan's
hook and its bench baseline pass. A release that moves the call fails here, before any engine starts."""

from __future__ import annotations

import importlib
import inspect

import pytest

from caovan.adapters.prefill_hook import KNOWN_KEYWORDS, PREFILL_NAME, hook_problem
from caovan.adapters.registry import recognised_family

pytestmark = pytest.mark.discovery

#: What vLLM's prefill branch passes in every served family (0.12 - 0.34), and caovan's baseline too.
PASSED = ("q", "k", "v", "g", "beta", "initial_state", "output_final_state", "cu_seqlens", "use_qk_l2norm_in_kernel")


@pytest.fixture(scope="module")
def served_family(vllm_module):
    family, refusal = recognised_family()
    if refusal is not None:
        pytest.skip(f"caovan does not serve vLLM {vllm_module.__version__}: {refusal}")
    return family


def test_the_prefill_call_is_where_the_family_record_says(served_family):
    assert hook_problem(served_family) is None
    module = importlib.import_module(served_family.gdn_module)
    if served_family.prefill_route == "module_function":
        fla = importlib.import_module(served_family.fla_ops_module)
        assert getattr(module, PREFILL_NAME) is getattr(fla, PREFILL_NAME), "the GDN module calls another function"
    else:
        source = inspect.getsource(getattr(module, served_family.gdn_class).__init__)
        assert f"self.{PREFILL_NAME} = ChunkGatedDeltaRule()" in source


def test_fla_prefill_takes_what_caovan_passes_and_knows_its_keywords(served_family):
    fla = getattr(importlib.import_module(served_family.fla_ops_module), PREFILL_NAME)
    parameters = inspect.signature(fla).parameters
    missing = [name for name in PASSED if name not in parameters]
    assert not missing, f"{served_family.fla_ops_module}.{PREFILL_NAME} lost {missing}"
    unknown = sorted(set(parameters) - KNOWN_KEYWORDS)
    # A new keyword set by vLLM's call would send every prefill back to vLLM (counted as a fallback): caovan must
    # learn it first.
    assert not unknown, f"{PREFILL_NAME} takes keywords caovan's hook does not know: {unknown}"


def test_the_baselines_chunk_metadata_is_flas_own(served_family, monkeypatch):
    """``VllmPrefill.chunk_metadata`` makes on the host what vLLM's metadata builder hands FLA (its ``index.py``)."""
    import torch

    from caovan.bench.vllm_prefill_path import FLA_CHUNK, VllmPrefill

    baseline = VllmPrefill(served_family)
    cu_seqlens = torch.tensor([0, 1, 65, 200, 200, 463], dtype=torch.int32)
    made = baseline.chunk_metadata(cu_seqlens)
    if not baseline.takes_chunk_metadata:
        assert made == {}
        pytest.skip(f"{served_family.fla_ops_module}.{PREFILL_NAME} takes no chunk metadata (before vLLM 0.20)")
    index = importlib.import_module(f"{served_family.fla_ops_module}.index")
    if hasattr(index, "async_tensor_h2d"):
        # vLLM 0.34's copy to the device pins host memory, which needs a driver; a plain copy is the same values.
        monkeypatch.setattr(index, "async_tensor_h2d", lambda data, device, dtype, **_: data.to(device, dtype))
    # FLA's own helpers move their result to the device of cu_seqlens; on the host that is the CPU.
    assert torch.equal(made["chunk_indices"], index.prepare_chunk_indices(cu_seqlens, FLA_CHUNK))
    assert torch.equal(made["chunk_offsets"], index.prepare_chunk_offsets(cu_seqlens, FLA_CHUNK))
