"""The matrix row the matrix unit tests share: as YAML for the files they write, as a MatrixRow for the rest."""

from __future__ import annotations

from caovan.matrix.results import Provenance
from caovan.matrix.schema import MatrixRow

#: One row of a matrix file (to follow a ``rows:`` line).
VALID_ROW = """\
  - id: vllm-0.21.0
    vllm: "0.21.0"
    torch: "2.11.0"
    python: "3.11"
    cuda: cu130
    tiers: [discovery, kernel, serve]
    runner_labels: [self-hosted, linux, sm75]
"""

#: The same row as the matrix loads it.
ROW = MatrixRow(
    id="vllm-0.21.0",
    vllm="0.21.0",
    torch="2.11.0",
    python="3.11",
    cuda="cu130",
    tiers=("discovery", "kernel", "serve"),
    runner_labels=("self-hosted", "linux", "sm75"),
)
PROVENANCE = Provenance(ROW.fingerprint(), "0.1.0", "aaaaaaaaaaaaaaaa")
#: Environment facts as envinfo records them, the fields a result must have (results.validate_result).
ENV = {
    "python": "3.11.7",
    "gpu": "cpu",
    "vllm": "0.21.0",
    "torch": "2.11.0",
    "triton": None,
    "torch_cuda": None,
    "gpu_arch": None,
    "family": None,
    "family_reason": "not probed",
}
