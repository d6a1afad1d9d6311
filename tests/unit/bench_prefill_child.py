"""``caovan bench prefill`` under Triton's interpreter (CPU), for ``test_bench_prefill.py``'s child process.

vLLM's FLA kernels need the numerics tier's interpreter patches (``tests/numerics/interpreter_aliases.py``) to run
there; the command itself knows nothing of them. So this imports the installed family's FLA ops, applies the
patches, then runs ``caovan bench prefill ARGS`` through the CLI's own ``main``. Run with TRITON_INTERPRET=1 set
before start (``triton.jit`` reads it when a kernel is decorated).
"""

from __future__ import annotations

import importlib
import os
import sys
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "numerics"))


def main(argv: list[str]) -> int:
    if os.environ.get("TRITON_INTERPRET") != "1":
        print("TRITON_INTERPRET=1 must be set in the environment", file=sys.stderr)
        return 2
    from caovan.adapters.registry import recognised_family

    family, _ = recognised_family()
    importlib.import_module(family.fla_ops_module)
    from interpreter_aliases import rebind_builtin_aliases, single_config_autotuners, tensor_loop_ranges

    rebind_builtin_aliases()
    single_config_autotuners()
    tensor_loop_ranges()
    # masked-off lanes are computed on junk under the interpreter (numpy warns; compiled kernels never load them)
    warnings.simplefilter("ignore", RuntimeWarning)
    from caovan.cli import main as cli_main

    return cli_main(["bench", "prefill", *argv])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
