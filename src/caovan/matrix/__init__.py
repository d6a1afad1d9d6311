"""The compatibility matrix: the vLLM/torch/Python/CUDA combinations caovan is tested on.

Data flow: ``matrix/*.yaml`` (rows, validated by :mod:`caovan.matrix.schema`) -> ``nox -s
"matrix(<row>)"`` (one venv per row; facts from :mod:`caovan.matrix.envinfo`, tier outcomes from
:mod:`caovan.matrix.tiers`) -> ``matrix/results/<runner>/<row>.json`` (:mod:`caovan.matrix.results`)
-> ``nox -s compat`` -> ``docs/compat.md`` (:mod:`caovan.matrix.compat`).

Everything here is plain Python with pyyaml, tabulate and packaging only: it must import on a
machine without vLLM or torch (the nox process itself, CI's lint job, GitHub-hosted runners).
"""

from __future__ import annotations

#: Layout version of the result files ``nox -s matrix`` writes; bump it when a field changes.
RESULT_SCHEMA_VERSION = 1

#: Test tiers, in the order a row runs them. Each is a pytest marker declared in pyproject.toml.
TIERS: tuple[str, ...] = ("discovery", "numerics", "sm75", "kernel", "serve")


class MatrixError(Exception):
    """Bad matrix input (YAML rows, result files, the compat doc): one clear message per problem."""

    def __init__(self, messages: str | list[str]):
        self.messages = [messages] if isinstance(messages, str) else list(messages)
        super().__init__("\n".join(self.messages))
