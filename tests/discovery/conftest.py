import os

import pytest

# Probing must behave the same with or without a GPU; hide CUDA before vLLM is first imported.
os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")


@pytest.fixture(scope="session")
def vllm_module():
    # Real vLLM of the row, never a stand-in: a missing vLLM is a failure of the tier, not a skip.
    import vllm

    return vllm
