import os

import pytest
from helpers.gpu_visibility import hide_gpus_where_there_are_none

# The discovery tier imports the real vLLM on machines without a GPU; vLLM then picks its CPU/unspecified
# platform instead of failing on a missing driver.  GPU tiers keep whatever the runner exposes.
os.environ.setdefault("VLLM_LOGGING_LEVEL", "INFO")
hide_gpus_where_there_are_none()  # helpers/gpu_visibility.py says why


@pytest.fixture
def served_release():
    """Skip, with the refusal, where the installed vLLM lands in a family caovan recognises but does not serve: the
    checks of what caovan does with such a vLLM (its serve command, its engine runner) have nothing to check."""
    from caovan.adapters import select_adapter

    selection = select_adapter()
    if selection.refused is not None:
        pytest.skip(f"caovan does not serve this release, nor serve models with it: {selection.reason}")
