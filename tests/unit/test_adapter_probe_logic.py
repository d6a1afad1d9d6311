"""Probe bookkeeping and family selection, with stand-in adapters (no vLLM needed)."""

import importlib.util
import types
from pathlib import Path

import pytest

from caovan.adapters import base as adapters_base
from caovan.adapters import registry
from caovan.adapters.base import GdnAdapter, Prober, has_argument, version_in


class _Adapter(GdnAdapter):
    def install(self) -> str:
        return "installed"

    def uninstall(self) -> bool:
        return True


class _Passing(_Adapter):
    family_id = "fam-pass"
    version_hint = ">=0.20,<0.22"
    description = ""

    def _probe(self, p: Prober) -> None:
        p.record("thing", True, "present")


class _Failing(_Adapter):
    family_id = "fam-fail"
    version_hint = ">=0.22"
    description = ""

    def _probe(self, p: Prober) -> None:
        p.record("a", True, "present")
        p.module("caovan_no_such_module_xyz")
        p.record("c", False, "gone")


class _Crashing(_Adapter):
    family_id = "fam-crash"
    version_hint = ">=0"
    description = ""

    def _probe(self, p: Prober) -> None:
        raise KeyError("boom")


def test_report_reason_names_first_missing_hook():
    report = _Failing().probe()
    assert not report.ok
    assert report.reason.startswith("missing caovan_no_such_module_xyz: import failed: ModuleNotFoundError")
    assert report.reason.endswith("(+1 more)")


def test_probe_never_raises():
    report = _Crashing().probe()
    assert not report.ok and "KeyError" in report.reason


def test_selection_prefers_passing_family(monkeypatch):
    monkeypatch.setattr(registry, "installed_vllm_version", lambda: "0.21.0")
    sel = registry.select_adapter((_Failing, _Passing))
    assert sel.family_id == "fam-pass"
    assert sel.reason == "family=fam-pass"


def test_selection_hint_uses_the_version_it_ordered_by(monkeypatch):
    # The reason and the reports carry the version the selection read once, never a second reading (here: none,
    # as in a venv without vLLM while the selection is given 0.21.0).
    monkeypatch.setattr(registry, "installed_vllm_version", lambda: "0.21.0")
    monkeypatch.setattr(adapters_base, "installed_vllm_version", lambda: None)
    assert registry.select_adapter((_Passing,)).reason == "family=fam-pass"
    monkeypatch.setattr(registry, "installed_vllm_version", lambda: "0.23.1")
    selection = registry.select_adapter((_Passing, _Failing))  # the hinted (failing) family is probed first
    assert [(r.family_id, r.vllm_version) for r in selection.reports] == [
        ("fam-fail", "0.23.1"),
        ("fam-pass", "0.23.1"),
    ]
    assert _Passing().probe().vllm_version is None  # a probe on its own reads the installed version
    monkeypatch.setattr(registry, "installed_vllm_version", lambda: "0.19.0")
    assert registry.select_adapter((_Passing,)).reason.endswith("(outside its version hint; chosen by probing)")


def test_unlisted_release_lands_by_probe(monkeypatch):
    monkeypatch.setattr(registry, "installed_vllm_version", lambda: "0.21.7")
    monkeypatch.setattr("caovan.adapters.base.installed_vllm_version", lambda: "0.21.7")
    sel = registry.select_adapter((_Passing,))
    assert sel.family_id == "fam-pass"
    monkeypatch.setattr(registry, "installed_vllm_version", lambda: "0.23.1")
    monkeypatch.setattr("caovan.adapters.base.installed_vllm_version", lambda: "0.23.1")
    sel = registry.select_adapter((_Passing,))
    assert sel.family_id == "fam-pass"
    assert "outside its version hint; chosen by probing" in sel.reason


def test_refusal_says_why(monkeypatch):
    monkeypatch.setattr(registry, "installed_vllm_version", lambda: "0.23.1")
    sel = registry.select_adapter((_Failing,))
    assert sel.adapter is None
    assert sel.reason.startswith(
        "no GDN family matches vLLM 0.23.1: closest family fam-fail (1 of 3 hook points found); "
        "moved: caovan_no_such_module_xyz (import failed: ModuleNotFoundError"
    )
    assert sel.reason.endswith("; c (gone)")


def test_no_vllm(monkeypatch):
    monkeypatch.setattr(registry, "installed_vllm_version", lambda: None)
    assert registry.select_adapter((_Passing,)).reason == "vLLM is not installed"


def test_version_hint_handles_dev_builds():
    assert version_in("0.21.1.dev3+gabc", ">=0.20.0,<0.22")
    assert not version_in("0.22.0rc1", ">=0.20.0,<0.22")
    assert not version_in("not-a-version", ">=0")
    assert not version_in(None, ">=0")


def test_has_argument():
    def f(a, *, b=1):
        return a

    assert has_argument(f, "b") and not has_argument(f, "c") and not has_argument(42, "a")


def _discovery_test_module():
    """tests/discovery/test_vllm_interface.py, loaded by path (tests/ is no package)."""
    path = Path(__file__).resolve().parents[1] / "discovery" / "test_vllm_interface.py"
    spec = importlib.util.spec_from_file_location("_discovery_vllm_interface", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_discovery_tier_fails_for_a_release_no_adapter_serves(monkeypatch):
    # docs/adding-a-vllm-version.md: a new family's release fails discovery; a refusal must not pass the tier.
    discovery = _discovery_test_module()
    monkeypatch.setattr(registry, "installed_vllm_version", lambda: "0.23.1")
    refusal = registry.select_adapter((_Failing,))
    monkeypatch.setattr(discovery, "installed_vllm_version", lambda: "0.23.1")
    monkeypatch.setattr(discovery, "select_adapter", lambda: refusal)
    with pytest.raises(AssertionError, match="no GDN family matches vLLM 0.23.1"):
        discovery.test_installed_vllm_lands_in_its_family(types.SimpleNamespace(__version__="0.23.1"))


def test_discovery_tier_passes_a_release_that_lands_by_probing(monkeypatch):
    discovery = _discovery_test_module()
    monkeypatch.setattr(registry, "installed_vllm_version", lambda: "0.9.5")
    monkeypatch.setattr("caovan.adapters.base.installed_vllm_version", lambda: "0.9.5")
    landed = registry.select_adapter((_Passing,))
    monkeypatch.setattr(discovery, "installed_vllm_version", lambda: "0.9.5")
    monkeypatch.setattr(discovery, "select_adapter", lambda: landed)
    discovery.test_installed_vllm_lands_in_its_family(types.SimpleNamespace(__version__="0.9.5"))


def test_the_closest_family_is_the_one_with_the_most_hook_points_found(monkeypatch):
    class _Closer(_Adapter):
        family_id = "fam-closer"
        version_hint = ">=0.30"
        description = ""

        def _probe(self, p: Prober) -> None:
            for name in "abcdefgh":
                p.record(name, True, "present")
            for name in "stuvwxyz":
                p.record(name, False, f"{name} moved")

    monkeypatch.setattr(registry, "installed_vllm_version", lambda: "0.23.1")
    sel = registry.select_adapter((_Failing, _Closer))
    assert sel.adapter is None
    assert sel.reason == (
        "no GDN family matches vLLM 0.23.1: closest family fam-closer (8 of 16 hook points found); moved: "
        "s (s moved); t (t moved); u (u moved); v (v moved); w (w moved); x (x moved); +2 more"
    )
    assert [r.family_id for r in sel.reports] == ["fam-fail", "fam-closer"], "every family probed for a refusal"


class _RaisingOwner:
    """A module whose ``__getattr__`` raises something else than AttributeError (a lazy import that fails)."""

    def __getattr__(self, name):
        raise ImportError(f"cannot import {name}: libcuda.so.1 missing")


def test_an_attribute_that_raises_is_a_missing_hook_point_not_the_end_of_the_probe():
    class _Probing(_Adapter):
        family_id = "fam-raising"
        version_hint = ">=0"
        description = ""

        def _probe(self, p: Prober) -> None:
            p.attribute(_RaisingOwner(), "GatedDeltaNetAttention", "GatedDeltaNetAttention class")
            p.record("later", True, "present")

    report = _Probing().probe()
    assert [(h.name, h.found) for h in report.hook_points] == [
        ("GatedDeltaNetAttention class", False),
        ("later", True),
    ]
    assert report.reason == (
        "missing GatedDeltaNetAttention class: attribute access raised ImportError: "
        "cannot import GatedDeltaNetAttention: libcuda.so.1 missing"
    )
