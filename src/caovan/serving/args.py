"""The options ``caovan warmup`` and ``caovan benchmark`` share, and the checks of every option value they take.

``--api-base``/``--model``/``--api-key``/``--wait-s``/``--request-timeout-s`` (:func:`add_server_arguments`), checked
into the client's :class:`~caovan.serving.client.ServerSettings` (:func:`server_settings`), and the number parsers the
commands use for their own options. argparse is asked to convert none of them: a bad value (``--wait-s abc``) is then
the command's own error line (:class:`~caovan.serving.errors.UsageError`, exit 2) and, for warmup, its
``[Caovan] warmup=FAIL`` line, which an argparse error would skip.

Kept apart from the HTTP client so that the client takes checked settings and knows nothing of command lines.
"""

from __future__ import annotations

import argparse
import math
import os
from collections.abc import Mapping
from urllib.parse import urlsplit

from caovan.serving.client import API_KEY_ENV, READY_PROBES, ServerSettings
from caovan.serving.errors import UsageError
from caovan.serving.redaction import API_KEY_OPTION, without_userinfo

DEFAULT_API_BASE = "http://127.0.0.1:8000"


def add_server_arguments(parser: argparse.ArgumentParser, *, wait_s: float, request_timeout_s: float) -> None:
    """The options both commands share; the values are converted and checked in :func:`server_settings`, not by
    argparse (so a bad one, ``--wait-s abc`` too, ends in the command's own error line)."""
    parser.add_argument(
        "--api-base",
        default=DEFAULT_API_BASE,
        metavar="URL",
        help=f"the vLLM server, with or without a trailing /v1 (default: {DEFAULT_API_BASE})",
    )
    parser.add_argument(
        "--model",
        metavar="NAME",
        help="the served model name (default: the server's only model; required when it serves several)",
    )
    parser.add_argument(
        "--api-key",
        metavar="KEY",
        help=f"sent as 'Authorization: Bearer KEY' (default: ${API_KEY_ENV[0]} if set, else ${API_KEY_ENV[1]}; "
        f"${API_KEY_ENV[0]} wins when both are set)",
    )
    parser.add_argument(
        "--wait-s",
        default=wait_s,
        metavar="S",
        help=f"how long to wait for the server to become ready ({READY_PROBES}); 0 tries once (default: {wait_s:g})",
    )
    parser.add_argument(
        "--request-timeout-s",
        default=request_timeout_s,
        metavar="S",
        help="how long one request may wait for the server's next bytes; the first request on TP=2 can take "
        f"minutes of JIT (default: {request_timeout_s:g})",
    )


def server_settings(args: argparse.Namespace, environ: Mapping[str, str] | None = None) -> ServerSettings:
    """The shared options, checked; :class:`UsageError` for a bad one."""
    api_base = normalize_api_base(args.api_base)
    wait_s = number(args.wait_s, "--wait-s", "a number of seconds")
    if not (wait_s >= 0 and math.isfinite(wait_s)):  # also NaN
        raise UsageError(f"--wait-s {wait_s:g}: must be a number of seconds, 0 or more")
    request_timeout_s = number(args.request_timeout_s, "--request-timeout-s", "a number of seconds")
    if not (request_timeout_s > 0 and math.isfinite(request_timeout_s)):
        raise UsageError(f"--request-timeout-s {request_timeout_s:g}: must be a number of seconds above 0")
    if args.model is not None and not args.model.strip():
        raise UsageError("--model '': an empty model name")
    if args.api_key:
        api_key, source = args.api_key, API_KEY_OPTION
    else:
        api_key, source = api_key_from_environment(os.environ if environ is None else environ)
    return ServerSettings(api_base, api_key, wait_s, request_timeout_s, source)


def normalize_api_base(text: str) -> str:
    """``http://host:8000``, ``http://host:8000/``, ``http://host:8000/v1`` and ``…/v1/`` all give
    ``http://host:8000``; a path prefix before ``/v1`` (a proxy) is kept. :class:`UsageError` for anything but an
    http(s) URL with a host."""
    given = without_userinfo(text)
    text = text.strip()
    try:
        parts = urlsplit(text)
        _ = parts.port  # raises ValueError for a port that is not a number
    except ValueError as exc:
        raise UsageError(f"--api-base {given!r}: not a URL ({exc})") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise UsageError(f"--api-base {given!r}: expected an http:// or https:// URL, e.g. {DEFAULT_API_BASE}")
    if parts.query or parts.fragment:
        raise UsageError(f"--api-base {given!r}: a base URL has no ?query or #fragment")
    path = parts.path.rstrip("/")
    if path.endswith("/v1"):
        path = path[: -len("/v1")].rstrip("/")
    return f"{parts.scheme}://{parts.netloc}{path}"


def api_key_from_environment(environ: Mapping[str, str]) -> tuple[str | None, str | None]:
    """The key of the first of :data:`API_KEY_ENV` that is set and not empty, and ``$NAME`` of that variable."""
    for name in API_KEY_ENV:
        if environ.get(name):
            return environ[name], f"${name}"
    return None, None


def number(value: str | float, option: str, what: str = "a number") -> float:
    """An option's value as a float: given on the command line it is text (argparse is not asked to convert it, so
    a bad one is the command's own error line); :class:`UsageError` naming ``option`` for anything else."""
    try:
        return float(value)
    except ValueError:
        raise UsageError(f"{option} {value!r}: not {what}") from None


def whole_number(value: str | int, option: str) -> int:
    """An option's value as an int (see :func:`number`); :class:`UsageError` naming ``option`` for anything else."""
    if isinstance(value, int):
        return value
    try:
        return int(value)
    except ValueError:
        raise UsageError(f"{option} {value!r}: not a whole number") from None


def positive_int_list(text: str, option: str) -> list[int]:
    """``"1,2,4,8"`` → ``[1, 2, 4, 8]``; :class:`UsageError` naming ``option`` for anything else."""
    values = []
    for item in text.split(","):
        item = item.strip()
        try:
            value = int(item)
        except ValueError:
            raise UsageError(f"{option} {text!r}: {item!r} is not a whole number (expected e.g. 1,2,4,8)") from None
        if value < 1:
            raise UsageError(f"{option} {text!r}: {value} is not 1 or more")
        values.append(value)
    return values


def require_at_least(value: int, minimum: int, option: str) -> None:
    if value < minimum:
        raise UsageError(f"{option} {value}: must be {minimum} or more")
