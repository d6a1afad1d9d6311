import pytest


@pytest.fixture(scope="session")
def vllm_module():
    # Real vLLM of the row, never a stand-in: a missing vLLM is a failure of the tier, not a skip.
    import vllm

    return vllm
