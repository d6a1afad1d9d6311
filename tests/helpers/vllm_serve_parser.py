"""vLLM's own ``vllm serve`` parser, built once in a child process that parses batches of argument lists on demand.

Why a child: without a GPU, vLLM's device config cannot infer a device and vLLM's own CLI switches to its CPU
platform for that case (``vllm/entrypoints/cli/main.py``, ``bench``), which the child does too; on a GPU row the
platform is the GPU's. Why one child for a whole session: building the parser imports most of vLLM, 20 s and more
on two cores, and the discovery tests of ``caovan serve`` and ``caovan bench e2e`` ask it five times per row.

Protocol: one JSON list of argument lists per stdin line; one ``RESULTS=<JSON list>`` stdout line back (vLLM may log
to stdout too), each entry what vLLM read, or ``{"exit": code}`` where its parser refused the arguments.
"""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

#: Seconds the child may take to build the parser and answer one batch.
ANSWER_TIMEOUT_S = 300.0
PREFIX = "RESULTS="


def _field(value: Any, name: str) -> Any:
    return value.get(name) if isinstance(value, dict) else getattr(value, name, None)


def _read(args: Any) -> dict[str, Any]:
    mode = _field(getattr(args, "compilation_config", None), "cudagraph_mode")
    profiler = getattr(args, "profiler_config", None)
    return {
        "model": args.model_tag,
        "model_option": args.model,
        "additional_config": args.additional_config,
        "speculative_config": args.speculative_config,
        "port": args.port,
        "tensor_parallel_size": args.tensor_parallel_size,
        "gpu_memory_utilization": args.gpu_memory_utilization,
        "kv_cache_dtype": getattr(args, "kv_cache_dtype", None),
        "max_model_len": getattr(args, "max_model_len", None),
        "max_num_seqs": getattr(args, "max_num_seqs", None),
        "max_num_batched_tokens": getattr(args, "max_num_batched_tokens", None),
        "cudagraph_mode": getattr(mode, "name", mode),
        "profiler_dir": _field(profiler, "torch_profiler_dir") if profiler is not None else None,
    }


def serve_batches() -> None:
    """The child: parse each batch read from stdin with a parser built as ``vllm serve`` builds it."""
    from vllm import platforms
    from vllm.platforms.interface import UnspecifiedPlatform  # is_unspecified() came with vLLM 0.11

    if isinstance(platforms.current_platform, UnspecifiedPlatform):
        from vllm.platforms.cpu import CpuPlatform

        platforms.current_platform = CpuPlatform()
    from vllm.entrypoints.cli.serve import ServeSubcommand
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    for line in sys.stdin:
        results = []
        for argv in json.loads(line):
            parser = FlexibleArgumentParser()
            ServeSubcommand().subparser_init(parser.add_subparsers(dest="subparser"))
            try:
                results.append(_read(parser.parse_args(["serve", *argv])))
            except SystemExit as exc:  # argparse's error, already on stderr
                results.append({"exit": exc.code})
        print(PREFIX + json.dumps(results), flush=True)


class VllmServeParser:
    """The parent's handle: ``parse(argvs)`` sends one batch and returns what vLLM read of each."""

    def __init__(self) -> None:
        self._stderr = tempfile.TemporaryFile(mode="w+")  # noqa: SIM115  (closed in close())
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))  # the same vLLM and caovan
        self._proc = subprocess.Popen(
            [sys.executable, str(Path(__file__).resolve())],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            text=True,
            env=env,
        )
        # A reader thread, so that a wait for the answer can time out (vLLM's log lines come through stdout too).
        self._lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        assert self._proc.stdout is not None
        for line in self._proc.stdout:
            self._lines.put(line)
        self._lines.put("")  # end of output: the child exited

    def _stderr_tail(self) -> str:
        self._stderr.seek(0)
        return self._stderr.read()[-4000:]

    def parse(self, argvs: list[list[str]]) -> list[dict[str, Any]]:
        assert self._proc.stdin is not None
        try:
            self._proc.stdin.write(json.dumps(argvs) + "\n")
            self._proc.stdin.flush()
        except BrokenPipeError:
            raise AssertionError(f"vLLM's serve parser exited:\n{self._stderr_tail()}") from None
        while True:
            try:
                line = self._lines.get(timeout=ANSWER_TIMEOUT_S)
            except queue.Empty:
                raise AssertionError(f"vLLM's serve parser gave no answer in {ANSWER_TIMEOUT_S:.0f} s") from None
            if not line:
                raise AssertionError(f"vLLM's serve parser failed:\n{self._stderr_tail()}")
            if line.startswith(PREFIX):
                return json.loads(line.removeprefix(PREFIX))

    def close(self) -> None:
        if self._proc.stdin is not None:
            self._proc.stdin.close()
        try:
            self._proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        self._stderr.close()

    def __enter__(self) -> VllmServeParser:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


if __name__ == "__main__":
    serve_batches()
