import pytest


@pytest.fixture(scope="session")
def vllm_module():
    # Real vLLM of the row, never a stand-in: a missing vLLM is a failure of the tier, not a skip.
    import vllm

    return vllm


@pytest.fixture(scope="session")
def vllm_serve_parser():
    """vLLM's ``vllm serve`` parser in one child process for the session (see helpers/vllm_serve_parser.py)."""
    from helpers.vllm_serve_parser import VllmServeParser

    with VllmServeParser() as parser:
        yield parser
