"""Whether this test process hid the GPUs itself, so that skip reasons do not blame the user's CUDA_VISIBLE_DEVICES.

Why: vLLM before 0.12 (``vllm/triton_utils/importing.py``) puts a placeholder in place of ``triton.language`` when no
Triton driver is active, unless ``CUDA_VISIBLE_DEVICES`` is set and empty; its GDN module then fails to import
(``tl.exp`` missing) and discovery would find no family on a machine without a GPU. ``tests/conftest.py`` sets it
empty there, as ``caovan.matrix.envinfo`` does for its own probe, and says so here.
"""

from __future__ import annotations

import os

from caovan.cli import cuda_visible_note

hidden_by_conftest = False


def hide_gpus_where_there_are_none() -> None:
    global hidden_by_conftest
    if "CUDA_VISIBLE_DEVICES" in os.environ:
        return
    try:
        import torch
    except ImportError:
        return
    if not torch.cuda.is_available():
        os.environ["CUDA_VISIBLE_DEVICES"] = ""
        hidden_by_conftest = True


def visible_note() -> str:
    """``cuda_visible_note()``, unless the empty value is the one the test process set on a machine with no GPU."""
    return "" if hidden_by_conftest else cuda_visible_note()
