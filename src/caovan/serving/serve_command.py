"""What ``caovan serve`` (Turbo3: ``caovan-vllm-serve``) hands to ``vllm serve``.

The user's own ``vllm serve`` arguments, unchanged, plus three things Turbo3 users had from ``caovan-vllm-serve``:

* caovan switched on: ``{"caovan": true, "caovan_mode": "auto"}`` merged into the user's ``--additional-config``
  (their keys kept; any caovan key of theirs, ``"caovan": false`` included, is left as they wrote it);
* AutoSpec: when the user gave no speculative config and the model is a caovan candidate (:mod:`caovan.model_check`),
  ``--speculative-config '{"method":"mtp","num_speculative_tokens":N}'`` (N = 3 unless ``--caovan-mtp``), and
  ``CAOVAN_SERVE_AUTOSPEC=N`` so the plugin's routing line can say ``speculative_config=auto``;
* vLLM's timeouts raised for the first compile on TP=2 (only variables the user has not set, and only those the
  installed vLLM reads).

* the start-up profiles DynamicTP, AutoMem and Elastic-KV (:mod:`caovan.serving.serve_profiles`):
  ``--tensor-parallel-size``, ``--gpu-memory-utilization``, ``--kv-cache-dtype``, ``--max-model-len``,
  ``--max-num-seqs`` and ``--max-num-batched-tokens`` where the user gave none, from the GPUs measured now, the model
  folder and the installed vLLM, with the KV cache vLLM will report predicted.

The user's arguments are read as vLLM reads them (:mod:`caovan.serving.serve_flags`); a ``--dtype``,
``--kv-cache-dtype`` or attention backend the installed vLLM refuses on the visible GPU stops serve before vLLM
starts (:mod:`caovan.serving.device_refusals`).  The discovery tier parses
what :func:`plan_serve` builds with the installed vLLM's own serve parser
(``tests/discovery/test_serve_command_vllm_parser.py``), so a vLLM that reads these forms differently fails there
rather than in a user's start-up.  Before a run with speculative decoding, serve says whether vLLM's default FULL
CUDA graphs are safe for it (:mod:`caovan.serving.cudagraph_advice`).  This module only computes;
``caovan.cli.serve`` prints and execs.
"""

from __future__ import annotations

import functools
import json
import shlex
import sys
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

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
from caovan.profiles import Gpu, read_gpus
from caovan.serving.cudagraph_advice import graph_note
from caovan.serving.device_refusals import DeviceSettings, check_serve_settings
from caovan.serving.serve_flags import (
    ServeArgsError,
    config_file,
    dotted_value,
    file_json_flag,
    find_flag,
    flag_name,
    json_object,
    refuse_abbreviations,
    served_model,
    split_double_dash,
)
from caovan.serving.serve_profiles import ProfileProbes, profile_flags

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
            node[use.key_path[-1]] = dotted_value(use.value)
        added = _keys_to_add(effective)
        new_args = list(args)
        for key, value in added.items():
            new_args += [f"--additional-config.{key}", _json_text(value, "--additional-config")]
        where = "--additional-config.KEY arguments"
    elif plain:
        last = plain[-1]
        effective = json_object(last.value, "--additional-config")
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
        effective = file_json_flag(config, "additional-config", config_path or "") or {}
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
    judge_full_graphs: Callable[[int], Any] | None = None,
    judge_device_settings: Callable[[DeviceSettings], str | None] | None = None,
    profiles: bool = True,
    measure_gpus: Callable[[], list[Gpu]] | None = None,
    profile_mode: str | None = None,
    profile_probes: ProfileProbes | None = None,
) -> ServePlan:
    """The ``vllm serve`` command for ``model`` and the user's ``vllm_args``; :class:`ServeArgsError` if impossible.

    ``model``: the positional ``MODEL`` (:func:`split_model`); ``None`` when the user named it another way in
    ``vllm_args`` (``--model MODEL``, a ``--config`` file), which then stays as they wrote it.

    ``vllm_env_names``: the variables the installed vLLM reads (``vllm.envs.environment_variables``); a timeout it
    does not read is not set.  None: set them all (the caller could not ask vLLM).

    ``judge_full_graphs``: pipeline-parallel size -> ``FullGraphSafety``; None: probe the installed vLLM.

    ``judge_device_settings``: the user's ``--dtype`` / ``--kv-cache-dtype`` / attention backend -> the line saying
    which one vLLM refuses on this GPU, or None; None: ask the installed vLLM for the visible GPU
    (:func:`caovan.serving.device_refusals.judge_on_visible_gpu`).

    ``profiles``: False for ``--caovan-no-profile``. ``measure_gpus``: the visible GPUs; None: NVML, now.
    ``profile_mode``: ``--caovan-profile`` (:data:`caovan.profiles.modes.MODES`; None: ``CAOVAN_PROFILE`` or the
    default). ``profile_probes``: what the profiles ask the installed vLLM (None: vLLM itself).
    """
    if mtp is not None and mtp < 1:
        raise ServeArgsError(f"--caovan-mtp {mtp}: the MTP depth is a number of tokens, at least 1")
    # AutoSpec and the profiles read the same folder: looked up once (a Hugging Face cache lookup is not free).
    locate = functools.cache(locate)
    # What caovan serve adds goes before a "--", never after it.
    args, after_double_dash = split_double_dash(vllm_args)
    refuse_abbreviations(args)
    config_path, config = config_file(args)
    model_positional = model is not None
    model = served_model(model, args, config)
    revisions = find_flag(args, "--revision")
    revision = revisions[-1].value if revisions else None
    try:  # check-model's judgement, dry run included: a local folder vLLM cannot load is refused, AutoSpec or not
        model_folder(model, revision)
    except ModelCheckError as exc:
        raise ServeArgsError(str(exc)) from None
    # A setting vLLM refuses on this GPU (bfloat16 below sm_80, an attention backend or KV-cache dtype no backend
    # takes there) stops vLLM only after minutes of start-up: refused here, in one line, and never rewritten.
    check_serve_settings(args, config_path, config, environ, vllm_env_names, judge_device_settings)
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
    if users_spec == "given" or AUTOSPEC_ENV in plan.env_added:
        graphs = graph_note(args, config, options.enabled, judge_full_graphs)
        if graphs is not None:
            plan.notes.append(graphs)

    if profiles:
        measure = measure_gpus or (lambda: read_gpus(environ))
        # plan.vllm_args: the speculative config vLLM will read (AutoSpec's too) decides the GDN state slots.
        added, profile_notes = profile_flags(
            locate(model, revision), plan.vllm_args, config, measure, profile_mode, environ, profile_probes
        )
        plan.vllm_args += added
        plan.notes += profile_notes
    else:
        plan.notes.append("profiles: off (--caovan-no-profile): your sizing flags, or vLLM's defaults, as they are")

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
