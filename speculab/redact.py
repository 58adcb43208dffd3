"""Secrets out of anything that leaves the process: command lines shown by ``/version``, logged or written to results.

Knows: the flags that carry a secret (``--api-key``, as ``--api-key KEY`` or ``--api-key=KEY``) and the HTTP
``Authorization`` header's credentials. Does not know: where the text goes.
"""

from __future__ import annotations

import re
import shlex

SECRET_FLAGS = ("--api-key",)
REDACTED = "<redacted>"
_AUTHORIZATION = re.compile(r"(?i)^(authorization\s*[:=]\s*).+$")


def redact_argv(argv: list[str]) -> list[str]:
    """``argv`` with every secret flag's value replaced."""
    out, hide_next = [], False
    for arg in argv:
        if hide_next:
            out.append(REDACTED)
            hide_next = False
            continue
        flag, eq, _ = arg.partition("=")
        if flag in SECRET_FLAGS:
            out.append(f"{flag}={REDACTED}" if eq else arg)
            hide_next = not eq
        else:
            out.append(_AUTHORIZATION.sub(lambda m: m.group(1) + REDACTED, arg))
    return out


def redact_command(command: str | None) -> str | None:
    """A shell command line with every secret flag's value and any Authorization credentials replaced."""
    if command is None:
        return None
    try:
        words = shlex.split(command)
    except ValueError:  # not shell syntax: hide everything after a secret flag
        return next((command[: command.find(f)] + f" {REDACTED}" for f in SECRET_FLAGS if f in command), command)
    return shlex.join(redact_argv(words))
