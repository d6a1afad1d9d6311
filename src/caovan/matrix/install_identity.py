"""Which install a row's tiers ran in, so that only a result this checkout made here counts as current.

A committed result says what ran somewhere else: on another machine, or in a clone that no longer exists.
It must never stand for a run on this one, even when the pins, plugin version and source are the same.
So each run records an *install identity*: a hash of

* the checkout token, a random value made once per matrix cache folder (``build/matrix/`` of the clone,
  git-ignored): a fresh clone has none yet, so it never matches a committed result;
* the interpreter the tiers ran with (its path, Python version and implementation, OS and machine);
* the resolved package set of that environment (every installed distribution's name and version,
  ``env.packages_fingerprint`` from :mod:`caovan.matrix.envinfo`).

A second run in the same clone rebuilds the row's venv, finds the same packages and says "current"; a
newer dependency resolved since, another interpreter or another clone runs the tiers again.
"""

from __future__ import annotations

import hashlib
import os
import secrets
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from . import MatrixError

#: The file in the matrix cache folder that holds this checkout's token.
TOKEN_FILE = "checkout-token"
#: Environment facts (envinfo) that say which interpreter and packages the tiers ran with.
IDENTITY_FACTS: tuple[str, ...] = ("python", "python_implementation", "platform", "machine", "packages_fingerprint")


def checkout_token(cache_dir: Path) -> str:
    """This checkout's token, made on first use; :class:`MatrixError` where the cache folder cannot hold it."""
    path = Path(cache_dir) / TOKEN_FILE
    try:
        token = path.read_text(encoding="ascii").strip()
    except FileNotFoundError:
        token = ""
    except (OSError, UnicodeDecodeError) as exc:
        raise MatrixError(f"{path}: cannot read the checkout token: {getattr(exc, 'strerror', None) or exc}") from None
    if len(token) == 32 and all(c in "0123456789abcdef" for c in token):
        return token
    token = secrets.token_hex(16)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        staging = path.with_name(f".{TOKEN_FILE}.{os.getpid()}")
        staging.write_text(token + "\n", encoding="ascii")
        os.replace(staging, path)
    except OSError as exc:
        raise MatrixError(f"{path}: cannot write the checkout token: {exc.strerror or exc}") from None
    return token


def install_identity(token: str, python: str, env: Mapping[str, Any]) -> str:
    """16 hex digits over the checkout token, the interpreter path and the environment facts that name the
    install; a fact envinfo could not gather counts as null (two such installs are not told apart by it)."""
    digest = hashlib.sha256()
    for part in (token, str(python), *(str(env.get(name)) for name in IDENTITY_FACTS)):
        digest.update(part.encode("utf-8", "surrogateescape"))
        digest.update(b"\0")
    return digest.hexdigest()[:16]
