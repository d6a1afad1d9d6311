"""Environment facts of this interpreter for result files: ``python -m caovan.matrix.envinfo``.

``nox -s matrix`` runs this INSIDE each row's venv, so the facts are the ones the tiers ran with
(the pins in the row are what was asked for; these are what got installed). Package versions come
from installed metadata; GPU facts from torch; the GDN adapter family from the plugin's own probe
(``caovan.adapters.registry``), which imports vLLM — ``--no-family`` leaves that out.

Every fact that cannot be gathered is null, with the reason under ``errors``: this module never
fails because the environment is broken, since recording a broken environment is its job.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import platform
import re
import sys
from collections import Counter
from collections.abc import Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

ENVINFO_VERSION = 2
PLUGIN_DISTRIBUTION = "caovan-vllm-sm75-turbo3"
#: Distributions whose versions every result records (absent ones are null).
RECORDED_DISTRIBUTIONS: tuple[str, ...] = (
    "vllm",
    "torch",
    "triton",
    "numpy",
    "transformers",
    "flashinfer-python",
    PLUGIN_DISTRIBUTION,
)


def distribution_version(distribution: str) -> str | None:
    """The installed version of ``distribution``, or None."""
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None


def packages_fingerprint() -> tuple[str, int]:
    """16 hex digits over every installed distribution's normalised name and version (the resolved package
    set a row's venv got), and how many there are."""
    installed = sorted(
        {
            f"{re.sub(r'[-_.]+', '-', dist.metadata['Name']).lower()}=={dist.version}"
            for dist in metadata.distributions()
            if dist.metadata["Name"]
        }
    )
    return hashlib.sha256("\n".join(installed).encode()).hexdigest()[:16], len(installed)


def _error_text(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}".strip()[:500]


def host_kind(environ: dict[str, str] | os._Environ[str] | None = None) -> str:
    """``github-hosted`` / ``self-hosted`` on GitHub Actions, ``ci`` on other CI, else ``local``."""
    environ = os.environ if environ is None else environ
    if environ.get("GITHUB_ACTIONS") == "true":
        return environ.get("RUNNER_ENVIRONMENT") or "github-actions"
    if environ.get("CI", "").lower() in ("1", "true", "yes"):
        return "ci"
    return "local"


def gpu_facts(errors: dict[str, str]) -> dict[str, Any]:
    """torch's view of the GPUs: CUDA build, and per device name, capability, arch, memory."""
    facts: dict[str, Any] = {
        "torch_cuda": None,
        "cuda_available": False,
        "gpus": [],
        "gpu": "cpu",
        "gpu_arch": None,
    }
    try:
        import torch
    except Exception as exc:  # a broken torch is a fact to record, not a reason to stop
        errors["torch"] = _error_text(exc)
        return facts
    facts["torch_cuda"] = getattr(torch.version, "cuda", None)
    try:
        available = bool(torch.cuda.is_available())
        facts["cuda_available"] = available
        if available:
            for index in range(torch.cuda.device_count()):
                major, minor = torch.cuda.get_device_capability(index)
                properties = torch.cuda.get_device_properties(index)
                facts["gpus"].append(
                    {
                        "index": index,
                        "name": torch.cuda.get_device_name(index),
                        "capability": f"{major}.{minor}",
                        "arch": f"sm_{major}{minor}",
                        "memory_gib": round(properties.total_memory / 2**30, 1),
                    }
                )
    except Exception as exc:
        errors["cuda"] = _error_text(exc)
    if facts["gpus"]:
        arches = sorted({g["arch"] for g in facts["gpus"]})
        facts["gpu"] = describe_gpus([g["name"] for g in facts["gpus"]])
        facts["gpu_arch"] = "/".join(arches)
    return facts


def describe_gpus(names: Sequence[str]) -> str:
    """``["NVIDIA H200", "NVIDIA H200"]`` -> ``2 × NVIDIA H200``: a two-GPU host's records say so, in the
    compatibility table and beside an end-to-end record, where one name alone would read as one GPU. Mixed
    hosts keep each name, in order of first appearance; no GPU gives ``""``."""
    counts = Counter(names)
    return " + ".join(name if count == 1 else f"{count} × {name}" for name, count in counts.items())


def family_facts(errors: dict[str, str]) -> dict[str, Any]:
    """The adapter family the plugin picks for this vLLM and why (null family: refused, reason)."""
    facts: dict[str, Any] = {"family": None, "family_reason": None, "family_probes": []}
    try:
        from caovan.adapters import registry
    except Exception as exc:  # a module that raises on import (NameError, SyntaxError...) is a fact too
        errors["family"] = _error_text(exc)
        facts["family_reason"] = f"caovan.adapters.registry is not importable: {_error_text(exc)}"
        return facts
    try:
        selection = registry.select_adapter()
    except Exception as exc:
        errors["family"] = _error_text(exc)
        facts["family_reason"] = f"adapter probe raised {_error_text(exc)}"
        return facts
    family_id = getattr(selection, "family_id", None)
    facts["family"] = family_id if isinstance(family_id, str) else None
    facts["family_reason"] = str(getattr(selection, "reason", "") or "") or None
    for report in getattr(selection, "reports", ()) or ():
        facts["family_probes"].append(
            {
                "family_id": str(getattr(report, "family_id", "")),
                "ok": bool(getattr(report, "ok", False)),
                "reason": str(getattr(report, "reason", "")),
            }
        )
    return facts


def gather(*, with_family: bool = True) -> dict[str, Any]:
    errors: dict[str, str] = {}
    packages = {name: distribution_version(name) for name in RECORDED_DISTRIBUTIONS}
    package_set, package_count = packages_fingerprint()
    info: dict[str, Any] = {
        "envinfo_version": ENVINFO_VERSION,
        "python": platform.python_version(),
        "python_implementation": platform.python_implementation(),
        "platform": platform.platform(terse=True),
        "machine": platform.machine(),
        "host_kind": host_kind(),
        "packages": packages,
        # What install_identity hashes: a venv that resolved other versions is another install.
        "packages_fingerprint": package_set,
        "packages_installed": package_count,
        "vllm": packages["vllm"],
        "torch": packages["torch"],
        "triton": packages["triton"],
        "plugin": packages[PLUGIN_DISTRIBUTION],
    }
    info.update(gpu_facts(errors))
    if with_family:
        if not info["cuda_available"] and "CUDA_VISIBLE_DEVICES" not in os.environ:
            # vLLM's platform detection wants this on a machine without a GPU.
            os.environ["CUDA_VISIBLE_DEVICES"] = ""
        info.update(family_facts(errors))
    else:
        info.update(family=None, family_reason="not probed (--no-family)", family_probes=[])
    info["errors"] = errors
    return info


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m caovan.matrix.envinfo", description=__doc__.splitlines()[0])
    parser.add_argument("--output", type=Path, help="write the JSON here (atomically) instead of stdout")
    parser.add_argument(
        "--no-family",
        action="store_true",
        help="do not probe the GDN adapter family (no vLLM import)",
    )
    args = parser.parse_args(argv)
    try:
        # vLLM logs to stdout when imported (family probe): keep stdout for the JSON alone.
        with contextlib.redirect_stdout(sys.stderr):
            info = gather(with_family=not args.no_family)
    except KeyboardInterrupt:
        # A Ctrl-C reaches this child and its parent (a matrix run) together; the parent says what it means.
        return 130
    if args.output is None:
        json.dump(info, sys.stdout, indent=2, sort_keys=True)
        sys.stdout.write("\n")
    else:
        from .results import write_json_atomic

        write_json_atomic(args.output, info)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
