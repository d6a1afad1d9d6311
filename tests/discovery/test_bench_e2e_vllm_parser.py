"""``caovan bench e2e``'s server commands against the real vLLM of the row: after ``caovan serve`` has made its
``vllm serve`` command of them, vLLM's own serve parser reads the graph mode, caovan's switch, the profiler folder
and the tensor parallelism the procedure asked for (the parser runs in a child, see
``test_serve_command_vllm_parser``)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from caovan.bench import e2e
from caovan.bench.model_folders import write_tiny_qwen3_next
from caovan.serving.serve_command import COLD_START_TIMEOUTS, plan_serve

pytestmark = [pytest.mark.discovery, pytest.mark.usefixtures("served_release")]

PARSE_IN_CHILD = textwrap.dedent(
    """
    import json, sys
    from vllm import platforms
    from vllm.platforms.interface import UnspecifiedPlatform
    if isinstance(platforms.current_platform, UnspecifiedPlatform):
        from vllm.platforms.cpu import CpuPlatform
        platforms.current_platform = CpuPlatform()
    from vllm.entrypoints.cli.serve import ServeSubcommand
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    def field(value, name):
        return value.get(name) if isinstance(value, dict) else getattr(value, name, None)

    results = []
    for argv in json.loads(sys.stdin.read()):
        parser = FlexibleArgumentParser()
        ServeSubcommand().subparser_init(parser.add_subparsers(dest="subparser"))
        args = parser.parse_args(["serve", *argv])
        mode = field(args.compilation_config, "cudagraph_mode")
        profiler = getattr(args, "profiler_config", None)
        results.append(
            {"cudagraph_mode": getattr(mode, "name", mode), "additional_config": args.additional_config,
             "tensor_parallel_size": args.tensor_parallel_size, "port": args.port,
             "profiler_dir": field(profiler, "torch_profiler_dir") if profiler is not None else None}
        )
    print("RESULTS=" + json.dumps(results))
    """
)


def _vllm_has_profiler_config() -> bool:
    from vllm.engine.arg_utils import EngineArgs

    return "profiler_config" in EngineArgs.__dataclass_fields__


def test_vllm_reads_the_procedures_server_commands_as_asked(tmp_path):
    model = write_tiny_qwen3_next(tmp_path / "m")
    profile = _vllm_has_profiler_config()
    settings = e2e.E2ESettings(
        str(model), tmp_path / "out", "FULL_AND_PIECEWISE", serve_args=("-tp", "2"), profile=profile,
        additional_config={"gdn_prefill_backend": "triton"},
    )  # fmt: skip
    argvs = []
    for caovan_on in (False, True):
        command = e2e.server_command(settings, caovan_on, 8123)
        assert command[1:4] == ["-m", "caovan", "serve"]
        plan = plan_serve(command[4], command[5:], {}, vllm_env_names=set(COLD_START_TIMEOUTS))
        argvs.append(plan.serve_args)
    child = subprocess.run(
        [sys.executable, "-c", PARSE_IN_CHILD], input=json.dumps(argvs), capture_output=True, text=True, timeout=300
    )
    lines = [line for line in child.stdout.splitlines() if line.startswith("RESULTS=")]
    assert child.returncode == 0 and lines, f"vLLM's serve parser failed:\n{child.stderr[-4000:]}"
    off, on = json.loads(lines[-1].removeprefix("RESULTS="))
    for parsed, switch in ((off, False), (on, True)):
        assert parsed["cudagraph_mode"] == "FULL_AND_PIECEWISE"
        assert parsed["additional_config"] == {"caovan": switch, "gdn_prefill_backend": "triton"}
        assert parsed["tensor_parallel_size"] == 2 and parsed["port"] == 8123
    if profile:
        assert e2e.profiler_problem() is None
        assert off["profiler_dir"] == str(e2e.trace_dir(settings, "baseline"))
        assert on["profiler_dir"] == str(e2e.trace_dir(settings, "caovan"))
    else:
        assert e2e.profiler_problem() is not None  # and bench e2e refuses --profile up front
