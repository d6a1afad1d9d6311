"""What every serve-tier test needs before it starts a vLLM process: a GPU, caovan's entry point, the environment."""

from __future__ import annotations

import os
from importlib import metadata
from pathlib import Path

import pytest
from helpers.gpu_visibility import visible_note as cuda_visible_note

from caovan import PLUGIN_NAME

#: The line Turbo3 users look for once a request has been served by caovan's kernels (written out here, not
#: imported from caovan: the tests check the words users rely on).
ACTIVE_LINE = "Caovan SM75 Turbo3 ACTIVE DISPATCH confirmed"


def require_cuda(gpus: int = 1) -> None:
    try:
        import torch
    except ImportError as exc:
        pytest.skip(f"no CUDA GPU: torch is not importable ({exc})")
    if not torch.cuda.is_available():
        pytest.skip(f"no CUDA GPU: the serve tier starts real vLLM engines{cuda_visible_note()}")
    if torch.cuda.device_count() < gpus:
        pytest.skip(
            f"{gpus} CUDA GPUs needed (tensor parallel {gpus}), {torch.cuda.device_count()} visible"
            f"{cuda_visible_note()}"
        )


def require_plugin_entry_point() -> None:
    entry_points = metadata.entry_points(group="vllm.general_plugins")
    ours = [ep for ep in entry_points if ep.name == PLUGIN_NAME]
    if not ours:
        pytest.fail(
            f"vLLM cannot load caovan: no '{PLUGIN_NAME}' entry point in group vllm.general_plugins "
            "(install the package, e.g. `pip install -e .`; PYTHONPATH alone gives no entry point)"
        )


def engine_env(case_dir: Path, **extra: str) -> dict[str, str]:
    """The environment of one vLLM process of the tier: offline, plugins restricted to caovan, counters at exit."""
    env = dict(os.environ)
    for key in ("CAOVAN_REQUIRE_TURBO3", "CAOVAN_LOG_COUNTERS", "VLLM_PLUGINS", "CAOVAN_SERVE_AUTOSPEC"):
        env.pop(key, None)
    env.update(
        {
            "VLLM_USE_FLASHINFER_SAMPLER": "0",
            # Turbo3 users who restrict plugins must list this name; the tier does the same.
            "VLLM_PLUGINS": PLUGIN_NAME,
            "VLLM_LOGGING_LEVEL": "INFO",
            "VLLM_CONFIGURE_LOGGING": "1",
            "CAOVAN_COUNTERS_FILE": str(case_dir / "counters-{pid}.json"),
            "PYTHONUNBUFFERED": "1",
            "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
            "VLLM_NO_USAGE_STATS": "1",
            "DO_NOT_TRACK": "1",
            **extra,
        }
    )
    return env
