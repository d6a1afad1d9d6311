"""The ``caovan`` command and its Turbo3 aliases (``caovan-sm75-doctor`` …).

Each subcommand is a module here defining NAME, HELP, ALIAS, ``add_arguments(parser)`` and ``run(args) -> int``,
and EPILOG, its exit codes for ``--help``. A command that passes another program's options through (``serve``)
also defines ``raw_namespace(tokens)``: its arguments then skip argparse unless they ask for help.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import os
import sys
from collections.abc import Sequence
from types import ModuleType

from .. import __version__
from ._streams import GuardedStdout, StdoutWriteError

#: Subcommand modules, in the order ``caovan --help`` lists them.
COMMAND_MODULES = ("doctor", "verify", "check_model", "bench", "serve", "warmup", "benchmark")


#: What a shell reports for a command stopped by SIGPIPE (128 + 13): ``caovan … | head`` ends as ``cat … | head`` does.
EXIT_BROKEN_PIPE = 141
#: sysexits.h's EX_IOERR: stdout could not be written (a full disk), told apart from every command's own codes.
EXIT_STDOUT_ERROR = 74


def cuda_visible_note() -> str:
    """For "no CUDA GPU visible": the CUDA_VISIBLE_DEVICES that may be why (set to "" in a shell profile or a CI job,
    it hides a GPU that nvidia-smi still lists)."""
    value = os.environ.get("CUDA_VISIBLE_DEVICES")
    if value is None:
        return ""
    return f"; CUDA_VISIBLE_DEVICES={value!r}" + (" hides every GPU" if value.strip() in ("", "-1") else " is set")


def _commands() -> list[ModuleType]:
    found = []
    for name in COMMAND_MODULES:
        dotted = f"{__name__}.{name}"
        # A command that has not landed in this build is simply absent; an import error inside one is not hidden.
        if importlib.util.find_spec(dotted) is not None:
            found.append(importlib.import_module(dotted))
    return found


def _add_command(parser: argparse.ArgumentParser, module: ModuleType, version: str) -> argparse.ArgumentParser:
    """The one definition of a command's arguments, under ``caovan NAME`` and under its alias alike."""
    parser.epilog = module.EPILOG
    parser.add_argument("--version", action="version", version=version)
    module.add_arguments(parser)
    # _prog: the name the command's messages give, the one the user typed (argparse's usage already does).
    parser.set_defaults(_run=module.run, _prog=parser.prog)
    return parser


def prog(args: argparse.Namespace, name: str) -> str:
    """The name command ``name`` was run under, for its ``PROG: error:`` lines: ``caovan NAME`` or its alias
    (``caovan-sm75-warmup``). A namespace built without the parser (a test's) gives ``caovan NAME``."""
    return getattr(args, "_prog", None) or f"caovan {name}"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="caovan",
        description="caovan: Turbo3-compatible vLLM plugin for GDN + MTP on SM75.",
        epilog=f"Each command's --help gives its exit status; any command whose stdout is closed early "
        f"(| head) ends quietly with {EXIT_BROKEN_PIPE}, and one whose stdout cannot be written (a full disk) with "
        f"one error line and {EXIT_STDOUT_ERROR}.",
    )
    parser.add_argument("--version", action="version", version=f"caovan {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for module in _commands():
        command = sub.add_parser(module.NAME, help=module.HELP, description=module.HELP)
        _add_command(command, module, f"caovan {__version__}")
    return parser


def build_alias_parser(command: str) -> argparse.ArgumentParser:
    """``caovan-sm75-doctor`` and the others: the command's own parser under the alias's name."""
    module = next(m for m in _commands() if m.NAME == command)
    parser = argparse.ArgumentParser(prog=module.ALIAS, description=module.HELP)
    return _add_command(parser, module, f"{module.ALIAS} (caovan {__version__})")


def _run(args: argparse.Namespace) -> int:
    original = sys.stdout
    if original is not None:  # None when started with stdout closed (>&-)
        sys.stdout = GuardedStdout(original)
    try:
        return int(args._run(args))
    except BrokenPipeError:
        # The reader stopped reading (``| head``): not an error worth a traceback.
        _discard_stdout(original)
        return EXIT_BROKEN_PIPE
    except StdoutWriteError as exc:
        # ``> /dev/full``, a full disk: the report could not be written, which is an error, but one line says it.
        print(f"caovan: error: cannot write to standard output: {exc}", file=sys.stderr)
        _discard_stdout(original)
        return EXIT_STDOUT_ERROR
    finally:
        if isinstance(sys.stdout, GuardedStdout):
            sys.stdout = original


def _discard_stdout(stream) -> None:
    """Point fd 1 at /dev/null so that the flush at exit does not raise again."""
    with open(os.devnull, "wb") as devnull:
        os.dup2(devnull.fileno(), stream.fileno())


#: First arguments that still go to argparse for a command with ``raw_namespace``.
_PARSER_FIRST = ("-h", "--help", "--version")


def _raw(command: str, tokens: list[str], alias: bool = False) -> argparse.Namespace | None:
    module = next((m for m in _commands() if m.NAME == command), None)
    if module is None or not hasattr(module, "raw_namespace"):
        return None
    # Help asked for before the first positional (``caovan serve --caovan-dry-run -h``) is caovan's; after it
    # (``caovan serve MODEL -h``) it belongs to the program the arguments go to.
    for token in tokens:
        if token in _PARSER_FIRST:
            return None
        if not token.startswith("-") or token == "--":
            break
    if not tokens:
        return None
    args = module.raw_namespace(tokens)
    args._prog = module.ALIAS if alias else f"caovan {module.NAME}"
    return args


def _mark_parsers(parser: argparse.ArgumentParser) -> None:
    parser.set_defaults(_parser=parser)
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                _mark_parsers(sub)


def _parse(parser: argparse.ArgumentParser, argv: list[str]) -> argparse.Namespace:
    """``parser.parse_args(argv)``, except that an unknown argument is reported by the (sub)command it was given to.

    argparse leaves them to the top parser: ``caovan bench kernels --bogus`` would print caovan's usage and
    ``caovan: error:``, which names neither the command nor its options.
    """
    _mark_parsers(parser)  # a subcommand's default overrides its parent's: the innermost parser is recorded
    args, extra = parser.parse_known_args(argv)
    if extra:
        args._parser.error(f"unrecognized arguments: {' '.join(extra)}")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    raw = _raw(argv[0], argv[1:]) if argv else None
    return _run(raw if raw is not None else _parse(build_parser(), argv))


def _alias(command: str, argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    raw = _raw(command, argv, alias=True)
    return _run(raw if raw is not None else _parse(build_alias_parser(command), argv))


def doctor_alias(argv: Sequence[str] | None = None) -> int:
    """``caovan-sm75-doctor``."""
    return _alias("doctor", argv)


def verify_alias(argv: Sequence[str] | None = None) -> int:
    """``caovan-sm75-verify``."""
    return _alias("verify", argv)


def check_model_alias(argv: Sequence[str] | None = None) -> int:
    """``caovan-sm75-check-model``."""
    return _alias("check-model", argv)


def warmup_alias(argv: Sequence[str] | None = None) -> int:
    """``caovan-sm75-warmup``."""
    return _alias("warmup", argv)


def benchmark_alias(argv: Sequence[str] | None = None) -> int:
    """``caovan-sm75-benchmark``."""
    return _alias("benchmark", argv)


def serve_alias(argv: Sequence[str] | None = None) -> int:
    """``caovan-vllm-serve``."""
    return _alias("serve", argv)
