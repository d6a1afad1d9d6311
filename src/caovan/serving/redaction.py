"""What ``caovan benchmark`` records and the serving commands print, without secrets: the value of ``--api-key``
and the ``user:password@`` of a URL.

Its own module because the HTTP client (messages name URLs), the option checks (``--api-base`` quoted in an error) and
the benchmark record (the command line it ran) all need it, and a secret that slips through any of them lands in a
file or a log the user may share.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

_USERINFO = re.compile(r"^([^/]*//)[^/?#]*@")


def without_userinfo(url: str) -> str:
    """``url`` without the ``user:password@`` of its host part, for what is printed or recorded (the request
    itself keeps it). Works on text that is not a valid URL too, as an error message may quote one."""
    return _USERINFO.sub(r"\1", url)


API_KEY_OPTION = "--api-key"
REDACTED = "<redacted>"


def _is_api_key_option(text: str) -> bool:
    # argparse takes any unambiguous prefix: --api-k, --api-ke (--api alone could be --api-base too)
    return len(text) >= len("--api-k") and API_KEY_OPTION.startswith(text)


def redacted_argv(argv: Iterable[str]) -> list[str]:
    """``argv`` fit to be recorded: the value of ``--api-key`` (``--api-key KEY`` and ``--api-key=KEY``) replaced
    by ``<redacted>``, and the ``user:password@`` of any URL dropped."""
    redacted: list[str] = []
    hide_next = False
    for arg in argv:
        if hide_next:
            redacted.append(REDACTED)
            hide_next = False
            continue
        option, equals, _ = arg.partition("=")
        if _is_api_key_option(option):
            if equals:
                redacted.append(f"{option}={REDACTED}")
            else:
                redacted.append(arg)
                hide_next = True
            continue
        redacted.append(without_userinfo(arg))
    return redacted
