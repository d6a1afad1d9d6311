"""Environment facts: never fail on a broken environment, record the adapter family defensively."""

from __future__ import annotations

import json
import sys
import types

import pytest

from caovan.matrix import envinfo


def test_host_kind():
    assert envinfo.host_kind({}) == "local"
    assert envinfo.host_kind({"CI": "true"}) == "ci"
    github = {"GITHUB_ACTIONS": "true", "RUNNER_ENVIRONMENT": "self-hosted", "CI": "true"}
    assert envinfo.host_kind(github) == "self-hosted"


def test_gather_without_family_has_the_fields_result_files_need():
    info = envinfo.gather(with_family=False)
    for key in ("python", "gpu", "vllm", "torch", "triton", "torch_cuda", "gpu_arch", "family"):
        assert key in info, key
    assert info["python"] == ".".join(map(str, sys.version_info[:3]))
    assert info["family"] is None and "not probed" in info["family_reason"]
    if info["torch"] is None:
        assert info["gpu"] == "cpu" and "torch" in info["errors"]
    json.dumps(info)  # JSON-serialisable as is


def install_fake_registry(monkeypatch, select_adapter) -> None:
    adapters = types.ModuleType("caovan.adapters")
    registry = types.ModuleType("caovan.adapters.registry")
    registry.select_adapter = select_adapter
    adapters.registry = registry
    monkeypatch.setitem(sys.modules, "caovan.adapters", adapters)
    monkeypatch.setitem(sys.modules, "caovan.adapters.registry", registry)


def test_family_is_recorded_from_the_plugins_probe(monkeypatch):
    report = types.SimpleNamespace(family_id="gdn-linear-attn-v020", ok=True, reason="hooks found")
    selection = types.SimpleNamespace(
        family_id="gdn-linear-attn-v020", reason="family=gdn-linear-attn-v020", reports=(report,)
    )
    install_fake_registry(monkeypatch, lambda: selection)
    facts = envinfo.family_facts({})
    assert facts["family"] == "gdn-linear-attn-v020"
    assert facts["family_reason"] == "family=gdn-linear-attn-v020"
    assert facts["family_probes"] == [{"family_id": "gdn-linear-attn-v020", "ok": True, "reason": "hooks found"}]


def test_refused_family_is_null_with_the_reason(monkeypatch):
    selection = types.SimpleNamespace(family_id=None, reason="no GDN family matches vLLM 0.99.0")
    install_fake_registry(monkeypatch, lambda: selection)
    facts = envinfo.family_facts({})
    assert facts["family"] is None
    assert facts["family_reason"] == "no GDN family matches vLLM 0.99.0"


def test_probe_that_raises_is_recorded_not_propagated(monkeypatch):
    def explode():
        raise RuntimeError("vllm import failed")

    install_fake_registry(monkeypatch, explode)
    errors: dict[str, str] = {}
    facts = envinfo.family_facts(errors)
    assert facts["family"] is None
    assert "RuntimeError: vllm import failed" in facts["family_reason"]
    assert errors["family"] == "RuntimeError: vllm import failed"


def test_missing_adapters_package_is_recorded(monkeypatch):
    monkeypatch.setitem(sys.modules, "caovan.adapters", None)  # import of it raises ImportError
    facts = envinfo.family_facts({})
    assert facts["family"] is None
    assert facts["family_reason"].startswith("caovan.adapters.registry is not importable")


def test_registry_that_raises_on_import_is_recorded_not_propagated(monkeypatch, tmp_path):
    package = tmp_path / "caovan" / "adapters"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "registry.py").write_text("_ = UNDEFINED_NAME\n")
    adapters = types.ModuleType("caovan.adapters")
    adapters.__path__ = [str(package)]
    monkeypatch.setitem(sys.modules, "caovan.adapters", adapters)
    monkeypatch.delitem(sys.modules, "caovan.adapters.registry", raising=False)
    errors: dict[str, str] = {}
    facts = envinfo.family_facts(errors)
    assert facts["family"] is None
    assert facts["family_reason"] == (
        "caovan.adapters.registry is not importable: NameError: name 'UNDEFINED_NAME' is not defined"
    )
    assert errors["family"] == "NameError: name 'UNDEFINED_NAME' is not defined"


def test_cli_writes_json_to_a_file(tmp_path):
    target = tmp_path / "env.json"
    assert envinfo.main(["--no-family", "--output", str(target)]) == 0
    assert json.loads(target.read_text())["envinfo_version"] == envinfo.ENVINFO_VERSION


def test_package_versions_come_from_installed_metadata(monkeypatch):
    installed = {"vllm": "0.21.0", "triton": "3.6.0"}

    def version(name):
        if name not in installed:
            raise envinfo.metadata.PackageNotFoundError(name)
        return installed[name]

    monkeypatch.setattr(envinfo.metadata, "version", version)
    info = envinfo.gather(with_family=False)
    assert (info["vllm"], info["triton"], info["plugin"]) == ("0.21.0", "3.6.0", None)
    assert info["packages"]["numpy"] is None


def test_cli_stdout_carries_only_the_json_even_when_imports_print(monkeypatch, capsys):
    def noisy_gather(*, with_family):
        print("INFO 11-30 [config.py:70] what vLLM prints on import")
        return {"envinfo_version": envinfo.ENVINFO_VERSION, "family": None}

    monkeypatch.setattr(envinfo, "gather", noisy_gather)
    assert envinfo.main([]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out)["envinfo_version"] == envinfo.ENVINFO_VERSION
    assert "what vLLM prints" in captured.err


def test_cli_interrupted_exits_130_quietly_and_writes_nothing(monkeypatch, tmp_path, capsys):
    def interrupted(*, with_family):
        raise KeyboardInterrupt

    monkeypatch.setattr(envinfo, "gather", interrupted)
    assert envinfo.main(["--output", str(tmp_path / "env.json")]) == 130
    assert capsys.readouterr() == ("", "") and list(tmp_path.iterdir()) == []


def test_the_package_set_fingerprint_follows_every_installed_version(monkeypatch):
    class Dist:
        def __init__(self, name, version):
            self.metadata = {"Name": name}
            self.version = version

    installed = [Dist("vllm", "0.21.0"), Dist("Zope.Interface", "7.0")]
    monkeypatch.setattr(envinfo.metadata, "distributions", lambda: iter(installed))
    first, count = envinfo.packages_fingerprint()
    assert count == 2
    installed[1] = Dist("zope-interface", "7.0")  # the same distribution, spelled as another installer does
    assert envinfo.packages_fingerprint()[0] == first
    installed.append(Dist("transformers", "4.57.6"))
    assert envinfo.packages_fingerprint() != (first, 2)
    installed[-1] = Dist("transformers", "4.57.7")
    second = envinfo.packages_fingerprint()[0]
    installed[-1] = Dist("transformers", "4.57.6")
    assert envinfo.packages_fingerprint()[0] != second


def install_fake_torch(monkeypatch, names: list[str]) -> None:
    cuda = types.SimpleNamespace(
        is_available=lambda: True,
        device_count=lambda: len(names),
        get_device_capability=lambda index: (9, 0),
        get_device_properties=lambda index: types.SimpleNamespace(total_memory=141 * 2**30),
        get_device_name=lambda index: names[index],
    )
    torch = types.ModuleType("torch")
    torch.cuda = cuda
    torch.version = types.SimpleNamespace(cuda="13.0")
    monkeypatch.setitem(sys.modules, "torch", torch)


@pytest.mark.parametrize(
    ("names", "described"),
    [
        (["NVIDIA H200"], "NVIDIA H200"),
        (["NVIDIA H200", "NVIDIA H200"], "2 × NVIDIA H200"),
        (["NVIDIA H100 80GB HBM3", "NVIDIA H200", "NVIDIA H200"], "NVIDIA H100 80GB HBM3 + 2 × NVIDIA H200"),
        ([], ""),
    ],
)
def test_gpus_are_described_with_their_count(names, described):
    assert envinfo.describe_gpus(names) == described


def test_a_two_gpu_host_is_recorded_as_two_gpus(monkeypatch):
    # The compatibility table shows env.gpu: a tensor-parallel row must not read as one GPU.
    install_fake_torch(monkeypatch, ["NVIDIA H200", "NVIDIA H200"])
    facts = envinfo.gpu_facts({})
    assert facts["gpu"] == "2 × NVIDIA H200" and facts["gpu_arch"] == "sm_90"
    assert [g["index"] for g in facts["gpus"]] == [0, 1]
