"""Reading a user's ``vllm serve`` arguments the way vLLM's ``FlexibleArgumentParser`` does (0.21.0,
``vllm/utils/argparse_utils.py``): flag names, ``--flag=value`` / ``--flag value`` / ``--flag.key value``, the
arguments after ``--``, the model, and the ``--config`` YAML file.  Used by :mod:`caovan.serving.serve_command`,
which decides what ``caovan serve`` adds; every failure is a :class:`ServeArgsError` naming the argument.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml


class ServeArgsError(ValueError):
    """The arguments cannot be handed to vLLM as they are; the message names the argument and what is wrong."""


@dataclass(frozen=True)
class FlagUse:
    """One use of a flag in an argument list: ``args[index:index + width]``."""

    index: int
    width: int  # 1: --flag=value, 2: --flag value
    key_path: tuple[str, ...]  # () for the whole flag, ("a", "b") for --flag.a.b
    value: str


def flag_name(token: str) -> str:
    """``--additional_config.caovan=x`` → ``--additional-config``: vLLM's normalisation of a flag's name."""
    name = token.split("=", 1)[0].split(".", 1)[0]
    return "--" + name[2:].replace("_", "-") if name.startswith("--") else name


def find_flag(args: Sequence[str], long: str, short: str | None = None) -> list[FlagUse]:
    """Every use of ``long`` (or ``short``) in ``args``, in order, in the forms vLLM accepts."""
    uses = []
    index = 0
    while index < len(args):
        token = args[index]
        if token == "--":
            break
        name = flag_name(token)
        if name == long or (short is not None and name == short):
            head, has_inline, inline = token.partition("=")
            key_path = tuple(head.split(".")[1:]) if name == long else ()
            if has_inline:
                uses.append(FlagUse(index, 1, key_path, inline))
            elif index + 1 < len(args):
                uses.append(FlagUse(index, 2, key_path, args[index + 1]))
                index += 1
            else:
                raise ServeArgsError(f"{token} needs a value")
        index += 1
    return uses


def split_double_dash(args: Sequence[str]) -> tuple[list[str], list[str]]:
    """The arguments before the first ``--`` and the rest from it on: after it every argument is positional to
    vLLM, none of them caovan's to read or edit."""
    split = args.index("--") if "--" in args else len(args)
    return list(args[:split]), list(args[split:])


def split_model(args: Sequence[str]) -> tuple[str | None, list[str]]:
    """``MODEL`` when it is the first argument (vLLM's positional ``model_tag``) and the arguments after it;
    ``None`` and all of them otherwise (the model may then be given another way, see :func:`served_model`).

    Only the first place is looked at: where a positional lands among other options depends on which options
    take values, which only vLLM's own parser knows.
    """
    if args and not args[0].startswith("-"):
        return args[0], list(args[1:])
    return None, list(args)


def served_model(positional: str | None, args: Sequence[str], config: Mapping[str, Any]) -> str:
    """The model ``vllm serve`` will load, found where vLLM looks for it; :class:`ServeArgsError` when none is.

    vLLM 0.21's ``FlexibleArgumentParser.parse_args`` moves the first ``--model`` (``--model X`` or
    ``--model=X``) to MODEL's place, so MODEL and ``--model`` together are an error there ("unrecognized
    arguments"); without either, a ``--config`` file's ``model`` is used.  The discovery tier checks both.
    """
    uses = find_flag(args, "--model")
    if positional is not None:
        model = positional
    elif uses:
        model = uses[0].value
    elif "model" in config:
        model = str(config["model"])
    else:
        raise ServeArgsError(
            "no model: write it first (caovan serve MODEL [vllm serve arguments]), give --model MODEL, or set model "
            "in the --config file; caovan serve does not fall back to vLLM's default model"
        )
    if not model.strip():
        raise ServeArgsError("the model name is empty; give a folder or a Hugging Face name")
    if positional is not None and uses:
        raise ServeArgsError(
            f"the model is given twice ({positional} as MODEL and --model {uses[0].value}); vllm serve refuses "
            "that: keep one"
        )
    return model


def json_object(text: str, where: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ServeArgsError(f"{where}: not valid JSON ({exc.msg} at column {exc.colno}): {text!r}") from None
    if not isinstance(value, dict):
        raise ServeArgsError(f"{where}: must be a JSON object, got {type(value).__name__}: {text!r}")
    return value


def dotted_value(text: str) -> Any:
    # vLLM reads a dotted value as JSON when it can, else keeps the text (``true`` is a bool, ``triton`` a string).
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def read_config_file(path: str) -> dict[str, Any]:
    """The ``--config`` YAML file vLLM would read, as a dict with vLLM's flag spelling (dashes) for its keys.

    Refused where vLLM 0.21's ``FlexibleArgumentParser.load_config_file`` would fail at start-up (an extension other
    than .yaml/.yml, an empty file) and where caovan serve cannot tell what vLLM will make of it (dotted
    ``additional-config.KEY`` keys: vLLM gathers them into one object that replaces the command line's).
    """
    if path.split(".")[-1] not in ("yaml", "yml"):
        raise ServeArgsError(f"--config {path}: vLLM reads only .yaml or .yml config files")
    try:
        loaded = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise ServeArgsError(f"--config {path}: cannot read: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise ServeArgsError(f"--config {path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    except yaml.YAMLError as exc:
        raise ServeArgsError(f"--config {path}: not valid YAML: {exc}") from None
    if loaded is None:
        raise ServeArgsError(f"--config {path}: the file is empty (vLLM cannot start from an empty config file)")
    if not isinstance(loaded, dict):
        raise ServeArgsError(f"--config {path}: must be a YAML mapping of vLLM arguments, got {type(loaded).__name__}")
    config = {str(key).replace("_", "-"): value for key, value in loaded.items()}
    dotted = next((key for key in loaded if flag_name("--" + str(key)) == "--additional-config" and "." in key), None)
    if dotted is not None:
        raise ServeArgsError(
            f"--config {path}: {dotted}: write the file's additional-config as one mapping (additional-config: "
            "{key: value}); vLLM's dotted keys from a file would replace what caovan serve adds"
        )
    return config


#: The flags caovan serve reads or edits; it finds them by their full names only (the last four: the settings vLLM
#: judges per GPU, see caovan.serving.device_refusals).
EDITED_FLAGS = (
    "--additional-config",
    "--speculative-config",
    "--config",
    "--dtype",
    "--kv-cache-dtype",
    "--attention-backend",
    "--attention-config",
)
#: Their single-dash forms, which argparse abbreviates too (``-s`` is taken for ``-sc``).
EDITED_SHORT_FLAGS = ("-sc", "-ac")


def refuse_abbreviations(args: Sequence[str]) -> None:
    """An abbreviation of a flag caovan serve edits is an error.

    vLLM's parser (argparse, ``allow_abbrev`` on) takes ``--additional-conf`` for ``--additional-config``; caovan
    serve would not see it and would add its own flag after it, which vLLM keeps instead of the user's.
    """
    for token in args:
        if token == "--":
            return
        name = flag_name(token)
        single_dash = name.startswith("-") and not name.startswith("--")
        for flag in EDITED_SHORT_FLAGS if single_dash else EDITED_FLAGS:
            if len(name) > (1 if single_dash else 2) and name != flag and flag.startswith(name):
                raise ServeArgsError(f"{token}: write {flag} in full; caovan serve reads and edits it by its full name")


def config_file(args: Sequence[str]) -> tuple[str | None, dict[str, Any]]:
    uses = find_flag(args, "--config")
    if not uses:
        return None, {}
    if len(uses) > 1:
        raise ServeArgsError("--config is given more than once; vLLM reads one config file")
    if uses[0].width == 1:
        # FlexibleArgumentParser pulls a config file in only for the separate token "--config" (``"--config" in
        # args``); "--config=FILE" reaches argparse as a value nobody reads, and the file is silently ignored.
        raise ServeArgsError(f"{args[uses[0].index]}: write --config FILE (vLLM reads the file only in that form)")
    return uses[0].value, read_config_file(uses[0].value)


def file_json_flag(config: Mapping[str, Any], key: str, path: str) -> dict[str, Any] | None:
    if key not in config:
        return None
    value = config[key]
    if isinstance(value, str):
        return json_object(value, f"--config {path}: {key}")
    if not isinstance(value, dict):
        raise ServeArgsError(f"--config {path}: {key} must be a mapping, got {type(value).__name__}")
    return value


def user_value(args: Sequence[str], config: Mapping[str, Any], long: str, short: str | None = None) -> Any:
    """The user's value of a flag where vLLM reads it: the command line's last use over a ``--config`` file's
    dashed key (``read_config_file``), as written there; None where neither gives one (or the file's is empty)."""
    uses = find_flag(args, long, short)
    if uses:
        return uses[-1].value
    value = config.get(long.removeprefix("--"))
    return None if value in (None, "") else value


def parallel_size(args: Sequence[str], config: Mapping[str, Any], long: str, short: str) -> int:
    """``--pipeline-parallel-size`` / ``--tensor-parallel-size`` as the user gave it (flag, or --config key)."""
    raw = user_value(args, config, long, short)
    if raw is None:
        return 1
    try:
        return int(raw)
    except (TypeError, ValueError):
        return 1  # vLLM's own parser refuses it, with its message
