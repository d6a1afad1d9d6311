"""What ``caovan serve`` (Turbo3: ``caovan-vllm-serve``) hands to ``vllm serve``.

The user's own ``vllm serve`` arguments, unchanged, plus three things Turbo3 users had from ``caovan-vllm-serve``:

* caovan switched on: ``{"caovan": true, "caovan_mode": "auto"}`` merged into the user's ``--additional-config``
  (their keys kept; any caovan key of theirs, ``"caovan": false`` included, is left as they wrote it);
* AutoSpec: when the user gave no speculative config and the model is a caovan candidate (:mod:`caovan.model_check`),
  ``--speculative-config '{"method":"mtp","num_speculative_tokens":N}'`` (N = 3 unless ``--caovan-mtp``), and
  ``CAOVAN_SERVE_AUTOSPEC=N`` so the plugin's routing line can say ``speculative_config=auto``;
* vLLM's timeouts raised for the first compile on TP=2 (only variables the user has not set, and only those the
  installed vLLM reads).

AutoMem, DynamicTP and Elastic-KV are not built: the user's ``--gpu-memory-utilization`` and
``--tensor-parallel-size`` pass through as given.

The argument forms follow vLLM's ``FlexibleArgumentParser`` (``vllm/utils/argparse_utils.py``, 0.21.0): ``_`` and
``-`` are the same in a flag name, ``--flag=value`` and ``--flag value`` are the same, ``--flag.key value`` sets
one key of a JSON flag, and every dotted form of a flag is gathered into one JSON object appended after the other
arguments, so that it replaces a plain ``--flag JSON`` given anywhere.  ``--config FILE.yaml`` values come before
the command line's.  The model is MODEL first, the first ``--model``, or the config file's ``model``
(:func:`served_model`).  The discovery tier parses what :func:`plan_serve` builds with the installed vLLM's own serve
parser (``tests/discovery/test_serve_command_vllm_parser.py``), so a vLLM that reads these forms differently fails
there rather than in a user's start-up.  This module only computes; ``caovan.cli.serve`` prints and execs.
"""

from __future__ import annotations

import json
import shlex
import sys
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from caovan import PLUGIN_NAME
from caovan.model_check import (
    DEFAULT_NUM_SPECULATIVE_TOKENS,
    STATUS_FAIL,
    ModelCheckError,
    ModelReport,
    check_model_dir,
    find_model_folder,
    model_folder,
    mtp_speculative_config,
)
from caovan.plugin.options import AUTOSPEC_ENV, CaovanConfigError, parse_options, vllm_plugins_leaves_out

#: What ``caovan serve`` adds to ``--additional-config`` when the user set none of caovan's switches.
ENABLE_KEYS: dict[str, Any] = {"caovan": True, "caovan_mode": "auto"}
#: Any of these in the user's config means they decided themselves; caovan serve then adds nothing.
SWITCH_KEYS = ("caovan", "caovan_sm75_turbo3", "caovan_mode")

#: Turbo3's advice for the first TP=2 compile, which can outlast vLLM's defaults (60 s, 10 s, 300 s).
COLD_START_TIMEOUTS: dict[str, str] = {
    "VLLM_ENGINE_ITERATION_TIMEOUT_S": "1800",
    "VLLM_RPC_TIMEOUT": "1800000",
    "VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS": "1800",
}


#: How the command is run: the ``vllm`` console script's own entry, with the interpreter caovan runs under, so the
#: served vLLM is the one caovan was installed next to (not whichever ``vllm`` comes first on PATH).
VLLM_CLI_MODULE = "vllm.entrypoints.cli.main"


class ServeArgsError(ValueError):
    """The arguments cannot be handed to vLLM as they are; the message names the argument and what is wrong."""


@dataclass(frozen=True)
class FlagUse:
    """One use of a flag in an argument list: ``args[index:index + width]``."""

    index: int
    width: int  # 1: --flag=value, 2: --flag value
    key_path: tuple[str, ...]  # () for the whole flag, ("a", "b") for --flag.a.b
    value: str


@dataclass
class ServePlan:
    """The ``vllm serve`` command caovan serve runs, and why it looks the way it does."""

    model: str  # what vLLM loads and AutoSpec checks
    vllm_args: list[str]
    env_added: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    #: False: the user named the model with ``--model``, which stays in ``vllm_args`` where they wrote it.
    model_positional: bool = True

    @property
    def serve_args(self) -> list[str]:
        """The arguments after ``vllm serve``."""
        return [self.model, *self.vllm_args] if self.model_positional else list(self.vllm_args)

    @property
    def argv(self) -> list[str]:
        """What is executed: this interpreter running vLLM's CLI."""
        return [sys.executable, "-m", VLLM_CLI_MODULE, "serve", *self.serve_args]

    def environment(self, base: Mapping[str, str]) -> dict[str, str]:
        """``base`` with the variables caovan serve sets; a stale AutoSpec mark from an earlier run is dropped."""
        env = {name: value for name, value in base.items() if name != AUTOSPEC_ENV}
        env.update(self.env_added)
        return env

    @property
    def display(self) -> str:
        """The command as a user would type it."""
        env = " ".join(f"{name}={shlex.quote(value)}" for name, value in self.env_added.items())
        command = shlex.join(["vllm", "serve", *self.serve_args])
        return f"{env} {command}" if env else command


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


def _json_object(text: str, where: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ServeArgsError(f"{where}: not valid JSON ({exc.msg} at column {exc.colno}): {text!r}") from None
    if not isinstance(value, dict):
        raise ServeArgsError(f"{where}: must be a JSON object, got {type(value).__name__}: {text!r}")
    return value


def _dotted_value(text: str) -> Any:
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


#: The flags caovan serve reads or edits; it finds them by their full names only.
EDITED_FLAGS = ("--additional-config", "--speculative-config", "--config")
#: Their single-dash forms, which argparse abbreviates too (``-s`` is taken for ``-sc``).
EDITED_SHORT_FLAGS = ("-sc",)


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


def _config_file(args: Sequence[str]) -> tuple[str | None, dict[str, Any]]:
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


def _file_json_flag(config: Mapping[str, Any], key: str, path: str) -> dict[str, Any] | None:
    if key not in config:
        return None
    value = config[key]
    if isinstance(value, str):
        return _json_object(value, f"--config {path}: {key}")
    if not isinstance(value, dict):
        raise ServeArgsError(f"--config {path}: {key} must be a mapping, got {type(value).__name__}")
    return value


def _keys_to_add(effective: Mapping[str, Any]) -> dict[str, Any]:
    """What of :data:`ENABLE_KEYS` to add: nothing when the user switched caovan on or off themselves
    (``caovan``, ``caovan_sm75_turbo3``, or ``caovan_mode`` "on"/"off"); ``caovan_mode`` "auto" alone decides
    nothing (caovan stays off without a switch), so ``"caovan": true`` is added beside it."""
    if any(key in effective for key in SWITCH_KEYS if key != "caovan_mode"):
        return {}
    if effective.get("caovan_mode", "auto") != "auto":
        return {}
    return {key: value for key, value in ENABLE_KEYS.items() if key not in effective}


def _json_text(value: Any, where: str) -> str:
    try:
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    except (TypeError, ValueError) as exc:
        raise ServeArgsError(f"{where}: a value JSON cannot hold ({exc})") from None


def _merge_additional_config(
    args: list[str], config_path: str | None, config: Mapping[str, Any]
) -> tuple[list[str], dict[str, Any], list[str]]:
    """The arguments with caovan switched on in ``--additional-config``, the config vLLM will see, and notes."""
    uses = find_flag(args, "--additional-config")
    dotted = [use for use in uses if use.key_path]
    plain = [use for use in uses if not use.key_path]
    if dotted:
        # vLLM gathers the dotted forms into one object that replaces any plain one: add caovan's keys the same way.
        effective: dict[str, Any] = {}
        for use in dotted:
            node = effective
            for key in use.key_path[:-1]:
                child = node.get(key)
                node = node[key] = child if isinstance(child, dict) else {}
            node[use.key_path[-1]] = _dotted_value(use.value)
        added = _keys_to_add(effective)
        new_args = list(args)
        for key, value in added.items():
            new_args += [f"--additional-config.{key}", _json_text(value, "--additional-config")]
        where = "--additional-config.KEY arguments"
    elif plain:
        last = plain[-1]
        effective = _json_object(last.value, "--additional-config")
        added = _keys_to_add(effective)
        merged = {**effective, **added}
        dropped = {use.index + offset for use in plain for offset in range(use.width)}
        new_args = []
        for index, token in enumerate(args):
            if index == last.index:
                new_args += ["--additional-config", _json_text(merged, "--additional-config")]
            elif index not in dropped:
                new_args.append(token)
        where = "--additional-config"
    else:
        effective = _file_json_flag(config, "additional-config", config_path or "") or {}
        added = _keys_to_add(effective)
        merged = {**effective, **added}
        # A command-line value replaces the file's, so the file's keys are carried over into it.
        new_args = [*args, "--additional-config", _json_text(merged, f"--config {config_path}: additional-config")]
        # vLLM then logs "Found duplicate keys --additional-config": the command line's value (the file's keys and
        # caovan's) wins, as intended.
        where = f"--config {config_path}: additional-config" if effective else "--additional-config"
    seen = {**effective, **added}
    shown = ", ".join(f"{key}={json.dumps(seen[key])}" for key in SWITCH_KEYS if key in seen)
    notes = [f"caovan: {shown} added to {where}" if added else f"caovan: {shown}, as you set it in {where}"]
    return new_args, seen, notes


#: Speculative-config values vLLM reads as "none" (``optional_type``: "" and "None"; JSON ``null``); in a config
#: file also ``false``, which ``load_config_file`` drops.
_NO_SPECULATIVE_CONFIG = ("", "None", "null")


def _users_speculative_config(args: Sequence[str], config: Mapping[str, Any]) -> str | None:
    """How the user set a speculative config ("given", or "off: ..." when their value turns it off); None: unset."""
    uses = find_flag(args, "--speculative-config", "-sc")
    if uses:
        plain = [use for use in uses if not use.key_path]
        if any(use.key_path for use in uses) or plain[-1].value.strip() not in _NO_SPECULATIVE_CONFIG:
            return "given"
        return f"off: your {args[plain[-1].index]} {plain[-1].value!r} is no speculative config"
    file_keys = [key for key in config if flag_name("--" + key) == "--speculative-config"]
    if not file_keys:
        return None
    value = config.get("speculative-config", {})  # {}: only dotted speculative-config.KEY keys
    if value is None or value is False or (isinstance(value, str) and value.strip() in _NO_SPECULATIVE_CONFIG):
        return f"off: the --config file's speculative-config {value!r} is no speculative config"
    return "given"


def _autospec(
    model: str,
    revision: str | None,
    depth: int | None,
    locate: Callable[[str, str | None], Path | None],
    check: Callable[[Path], ModelReport],
) -> tuple[int | None, str]:
    """The MTP depth AutoSpec picks for ``model`` (None: none) and the note saying why."""
    folder = locate(model, revision)
    if folder is None:
        at = f" at revision {revision}" if revision is not None else ""
        return None, (
            f"AutoSpec: not added: {model} is not a local folder and its config.json{at} is not in the Hugging Face "
            "cache; pass --speculative-config yourself"
        )
    try:
        report = check(folder)
    except ModelCheckError as exc:
        return None, f"AutoSpec: not added: {exc}"
    if not report.is_candidate:
        failed = "; ".join(c.message for c in report.checks if c.status == STATUS_FAIL)
        return None, f"AutoSpec: not added, {folder} is not a caovan candidate: {failed}"
    chosen = depth if depth is not None else DEFAULT_NUM_SPECULATIVE_TOKENS
    mtp = report.facts.get("mtp", {})
    return chosen, (
        f"AutoSpec: MTP speculative decoding, {chosen} token(s) per step "
        f"({'--caovan-mtp' if depth is not None else 'default'}; the model's MTP depth is {mtp.get('depth')})"
    )


def help_plan(model: str | None, vllm_args: Sequence[str]) -> ServePlan | None:
    """``vllm serve``'s own help when the arguments ask for it (``-h``, ``--help``, vLLM's ``--help=all`` and
    ``--help=GROUP``) before any ``--``; None otherwise.

    Help starts no server, so nothing is added, and no model is needed: ``caovan serve --help=all`` shows vLLM's
    full list as ``vllm serve --help=all`` does. (``-h`` and ``--help`` before the model are caovan's own, see
    :mod:`caovan.cli`.)
    """
    before_double_dash, _ = split_double_dash(vllm_args)
    if not any(token == "-h" or flag_name(token) == "--help" for token in before_double_dash):
        return None
    return ServePlan(
        model=model or "",
        vllm_args=list(vllm_args),
        notes=["help asked for: vLLM's own serve help, run as written (caovan serve's own: caovan serve --help)"],
        model_positional=model is not None,
    )


def plan_serve(
    model: str | None,
    vllm_args: Sequence[str],
    environ: Mapping[str, str],
    *,
    mtp: int | None = None,
    autospec: bool = True,
    vllm_env_names: Collection[str] | None = None,
    locate: Callable[[str, str | None], Path | None] = find_model_folder,
    check: Callable[[Path], ModelReport] = check_model_dir,
) -> ServePlan:
    """The ``vllm serve`` command for ``model`` and the user's ``vllm_args``; :class:`ServeArgsError` if impossible.

    ``model``: the positional ``MODEL`` (:func:`split_model`); ``None`` when the user named it another way in
    ``vllm_args`` (``--model MODEL``, a ``--config`` file), which then stays as they wrote it.

    ``vllm_env_names``: the variables the installed vLLM reads (``vllm.envs.environment_variables``); a timeout it
    does not read is not set.  None: set them all (the caller could not ask vLLM).
    """
    if mtp is not None and mtp < 1:
        raise ServeArgsError(f"--caovan-mtp {mtp}: the MTP depth is a number of tokens, at least 1")
    # What caovan serve adds goes before a "--", never after it.
    args, after_double_dash = split_double_dash(vllm_args)
    refuse_abbreviations(args)
    config_path, config = _config_file(args)
    model_positional = model is not None
    model = served_model(model, args, config)
    revisions = find_flag(args, "--revision")
    revision = revisions[-1].value if revisions else None
    try:  # check-model's judgement, dry run included: a local folder vLLM cannot load is refused, AutoSpec or not
        model_folder(model, revision)
    except ModelCheckError as exc:
        raise ServeArgsError(str(exc)) from None
    args, additional, notes = _merge_additional_config(args, config_path, config)
    try:
        options = parse_options(additional, environ, where="--additional-config")
    except CaovanConfigError as exc:
        raise ServeArgsError(str(exc)) from None
    if not options.enabled:
        notes.append(f"caovan: off ({options.source}): vLLM's own GDN kernels will run")
    elif (left_out := vllm_plugins_leaves_out(PLUGIN_NAME, environ)) is not None:
        # vLLM would start without caovan and ignore its keys: the server runs unaccelerated and nothing says so.
        raise ServeArgsError(f"{left_out}, so caovan's keys would be ignored; add it (no spaces) or unset VLLM_PLUGINS")
    plan = ServePlan(model=model, vllm_args=args, notes=notes, model_positional=model_positional)

    users_spec = _users_speculative_config(args, config)
    if users_spec is not None and mtp is not None:
        raise ServeArgsError("--caovan-mtp sets AutoSpec's depth, but you gave --speculative-config yourself")
    if users_spec == "given":
        plan.notes.append("AutoSpec: not needed, you gave a speculative config")
    elif users_spec is not None:
        plan.notes.append(
            f"AutoSpec: not added, speculative decoding is {users_spec}; caovan has no spec-decode step to accelerate"
        )
    elif not autospec:
        if mtp is not None:
            raise ServeArgsError("--caovan-mtp sets AutoSpec's depth, but --caovan-no-autospec turns AutoSpec off")
        plan.notes.append("AutoSpec: off (--caovan-no-autospec); no speculative decoding unless you ask vLLM for it")
    else:
        depth, note = _autospec(model, revision, mtp, locate, check)
        if depth is None and mtp is not None:
            # The user asked for a depth: starting without speculative decoding would not be what they asked for.
            raise ServeArgsError(f"--caovan-mtp {mtp}: {note.removeprefix('AutoSpec: ')}")
        plan.notes.append(note)
        if depth is not None:
            plan.vllm_args += ["--speculative-config", mtp_speculative_config(depth)]
            plan.env_added[AUTOSPEC_ENV] = str(depth)

    raised = []
    for name, value in COLD_START_TIMEOUTS.items():
        if name in environ:
            continue
        if vllm_env_names is not None and name not in vllm_env_names:
            plan.notes.append(f"timeouts: {name} not set (this vLLM does not read it)")
            continue
        plan.env_added[name] = value
        raised.append(f"{name}={value}")
    if raised:
        plan.notes.append(f"timeouts: raised for the first compile ({', '.join(raised)}; set them to override)")
    plan.vllm_args += after_double_dash
    return plan
