"""What the attention kernels vLLM selected can run beyond its selection's checks (caovan.sm75.kv_cache_kernels)."""

from __future__ import annotations

import pytest

from caovan.sm75.kv_cache_kernels import kernel_refusal, query_quant_dtypes, query_quant_refusal, triton_type_refusal

torch = pytest.importorskip("torch", reason="the fp8 dtypes are torch's")
pytest.importorskip("triton", reason="the installed Triton is what is asked")


class _Platform:
    @staticmethod
    def fp8_dtype():
        return torch.float8_e4m3fn


def test_triton_refuses_e4m3_below_sm_89_and_compiles_it_from_there():
    assert "fp8e4nv not supported" in triton_type_refusal("fp8e4nv", (7, 5))
    assert "fp8e4nv not supported" in triton_type_refusal("fp8e4nv", (8, 6))
    assert triton_type_refusal("fp8e4nv", (8, 9)) is None


@pytest.mark.parametrize(("capability", "refused"), [((7, 5), True), ((8, 0), True), ((9, 0), False)])
def test_an_fp8_cache_on_triton_attn_follows_what_triton_compiles(capability, refused):
    why = kernel_refusal("TRITON_ATTN", "fp8", torch.float16, _Platform(), capability)
    assert (why is not None) == refused, why
    if refused:
        assert why.startswith("TRITON_ATTN reads an fp8 cache as float8_e4m3fn, which Triton cannot compile here")


def test_flash_attention_3_takes_an_fp8_cache_only_for_a_bfloat16_model():
    float16 = kernel_refusal("FLASH_ATTN", "fp8_e4m3", torch.float16, _Platform(), (9, 0))
    assert float16 is not None and "output must have dtype BF16" in float16
    assert kernel_refusal("FLASH_ATTN", "fp8_e4m3", torch.bfloat16, _Platform(), (9, 0)) is None


@pytest.mark.parametrize("backend", ["TRITON_ATTN", "FLASH_ATTN", "FLASHINFER"])
def test_a_16_bit_cache_is_never_refused_here(backend):
    assert kernel_refusal(backend, "auto", torch.float16, _Platform(), (7, 5)) is None


class _FlashImpl:
    supports_quant_query_input = True


class _PlainImpl:
    supports_quant_query_input = False


def test_an_fp8_query_backend_refuses_the_cache_dtypes_vllms_forward_does_not_quantise_for():
    accepted = frozenset({"fp8", "fp8_e4m3", "nvfp4"})
    why = query_quant_refusal(_FlashImpl(), "fp8_e5m2", accepted)
    assert why is not None and "asserts the cache dtype is one of fp8, fp8_e4m3, nvfp4" in why
    assert query_quant_refusal(_FlashImpl(), "fp8_e4m3", accepted) is None
    assert query_quant_refusal(_FlashImpl(), "auto", accepted) is None
    assert query_quant_refusal(_PlainImpl(), "fp8_e5m2", accepted) is None


def test_the_installed_vllm_still_asserts_e4m3_before_quantising_a_query():
    """Fails once vLLM's Attention.forward stops asserting the set (then the refusal can go)."""
    pytest.importorskip("vllm", reason="the assertion is read from the installed vLLM")
    accepted = query_quant_dtypes()
    assert accepted is not None and "fp8_e4m3" in accepted and "fp8_e5m2" not in accepted, accepted
