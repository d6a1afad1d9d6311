"""``caovan bench e2e``'s server commands against the real vLLM of the row: after ``caovan serve`` has made its
``vllm serve`` command of them, vLLM's own serve parser reads the graph mode, caovan's switch, the profiler folder
and the tensor parallelism the procedure asked for (vLLM's parser, in the session's child
process: ``helpers/vllm_serve_parser.py``)."""

from __future__ import annotations

import pytest

from caovan.bench import e2e
from caovan.bench.model_folders import write_tiny_qwen3_next
from caovan.serving.serve_command import COLD_START_TIMEOUTS, plan_serve

pytestmark = [pytest.mark.discovery, pytest.mark.usefixtures("served_release")]


def _vllm_has_profiler_config() -> bool:
    from vllm.engine.arg_utils import EngineArgs

    return "profiler_config" in EngineArgs.__dataclass_fields__


def test_vllm_reads_the_procedures_server_commands_as_asked(tmp_path, vllm_serve_parser):
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
    off, on = vllm_serve_parser.parse(argvs)
    for parsed, switch in ((off, False), (on, True)):
        assert parsed["cudagraph_mode"] == "FULL_AND_PIECEWISE"
        assert parsed["additional_config"] == {"caovan": switch, "gdn_prefill_backend": "triton"}
        assert parsed["tensor_parallel_size"] == 2 and parsed["port"] == 8123
    if profile:  # vLLM reads the config; whether --profile can count steps is the next test's
        assert off["profiler_dir"] == str(e2e.trace_dir(settings, "baseline"))
        assert on["profiler_dir"] == str(e2e.trace_dir(settings, "caovan"))
    else:
        assert e2e.profiler_problem() is not None  # and bench e2e refuses --profile up front


def test_the_profiled_servers_mark_the_steps_the_summary_counts():
    """``--profile`` counts steps by the model runner's ``gpu_model_runner: forward`` range, which vLLM opens only
    under the variable the procedure sets for its servers: both names must still be vLLM's."""
    import inspect

    import vllm.envs
    from vllm.v1 import utils as vllm_v1_utils

    from caovan.bench.profile_summary import STEP_EVENT

    if not _vllm_has_profiler_config():
        pytest.skip(f"vLLM {vllm.__version__} has no --profiler-config: the procedure refuses --profile")
    sources = e2e.step_range_sources()
    if not sources:  # the runner that opened it is gone: bench e2e must refuse --profile up front, and say why
        assert STEP_EVENT in e2e.profiler_problem()
        from caovan.cli import doctor

        reason = e2e.profiler_problem().removeprefix("--profile: ")
        assert doctor.profiling_facts(True) == {"usable": False, "line": f"refused: {reason}"}
        pytest.skip(f"vLLM {vllm.__version__} opens no {STEP_EVENT!r} range: {e2e.profiler_problem()}")
    import importlib

    for source in sources:
        module = importlib.import_module(source.removesuffix(".py").replace("/", "."))
        assert f'record_function_or_nullcontext("{STEP_EVENT}")' in inspect.getsource(module)
    gate = inspect.getsource(vllm_v1_utils.record_function_or_nullcontext)
    for name, value in e2e.PROFILE_ENV.items():
        assert name in vllm.envs.environment_variables and name in gate
        assert value == "1"


def test_the_servers_autotuning_cache_variable_is_read_by_the_rows_triton():
    """Both runs share Triton's autotuning results through ``TRITON_CACHE_AUTOTUNING`` (``e2e.SERVER_ENV``): the row's
    Triton must still read that name, in its knobs (3.4 on) or its autotuner (before)."""
    import inspect

    triton = pytest.importorskip("triton", reason="no Triton in this row's environment: vLLM's servers would not start")
    from triton.runtime import autotuner

    readers = inspect.getsource(autotuner)
    if hasattr(triton, "knobs"):
        readers += inspect.getsource(triton.knobs)
    for name, value in e2e.SERVER_ENV.items():
        assert f'"{name}"' in readers, f"Triton {triton.__version__} no longer reads {name}"
        assert value == "1"
