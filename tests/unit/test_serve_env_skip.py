"""The serve tier's no-GPU skip (tests/serve/serve_env.py): its reason lands in result files and docs/compat.md."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from helpers import gpu_visibility  # noqa: E402

# tests/serve is not a package; load the module by path.
_PATH = Path(__file__).resolve().parents[1] / "serve" / "serve_env.py"
_spec = importlib.util.spec_from_file_location("_serve_env_under_test", _PATH)
serve_env = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(serve_env)


@pytest.mark.parametrize(
    ("value", "note"),
    [("", "; CUDA_VISIBLE_DEVICES='' hides every GPU"), ("3", "; CUDA_VISIBLE_DEVICES='3' is set"), (None, "")],
)
def test_no_gpu_skip_names_the_cuda_visible_devices_that_may_hide_it(monkeypatch, value, note):
    monkeypatch.setattr(gpu_visibility, "hidden_by_conftest", False)  # the value is the user's
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    if value is None:
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    else:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", value)
    with pytest.raises(pytest.skip.Exception) as skipped:
        serve_env.require_cuda()
    # Not tests/discovery/conftest.py: it stopped emptying CUDA_VISIBLE_DEVICES, so naming it misleads.
    assert str(skipped.value) == f"no CUDA GPU: the serve tier starts real vLLM engines{note}"


def test_the_empty_value_the_test_process_set_on_a_gpu_less_machine_is_not_blamed(monkeypatch):
    # tests/conftest.py empties CUDA_VISIBLE_DEVICES where torch sees no GPU (vLLM before 0.12 needs it to import).
    monkeypatch.setattr(gpu_visibility, "hidden_by_conftest", True)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    with pytest.raises(pytest.skip.Exception) as skipped:
        serve_env.require_cuda()
    assert str(skipped.value) == "no CUDA GPU: the serve tier starts real vLLM engines"
