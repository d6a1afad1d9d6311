"""The failures ``caovan warmup`` and ``caovan benchmark`` report about a vLLM server, each with its exit status.

Their own module because both the argument checks (:mod:`caovan.serving.args`) and the HTTP client
(:mod:`caovan.serving.client`) raise them, and the commands catch them in one place: a command prints the message as
its one error line and exits with ``exit_code``.
"""

from __future__ import annotations


class ClientError(Exception):
    """A problem a command reports in one line; ``exit_code`` is the command's exit status for it."""

    exit_code = 1


class UsageError(ClientError):
    """Bad arguments, or a choice the user must make (several models, a missing API key)."""

    exit_code = 2


class NotReady(ClientError):
    """The server did not become ready within --wait-s."""

    exit_code = 2


class ModelNotServed(ClientError):
    """The server answers but does not serve the asked model."""

    exit_code = 1


class RequestFailed(ClientError):
    """One completion request failed (transport error, HTTP status, malformed answer)."""

    exit_code = 1
