"""Secrets in a command line, found by where they stand among the arguments.

A pattern over the joined command line sees ``--password=x`` but not
``--password x``, ``-px`` or ``sshpass -p x``: the secret is a word of its
own, recognisable only by the word before it.  :func:`redact_argv` walks
the argument vector and replaces:

- the value of a long option named like a credential (``--password``,
  ``--passwd``, ``--pass``, ``--token``, ``--secret``, ``--api-key``,
  ``--auth``, ``--db-password``, ``--client-secret`` ...), glued
  (``--token=x``) or in the next word; options naming a file, a path or a
  variable that holds it (``--password-file``) keep their value;
- the value of ``-p`` glued (``-px``) or in the next word, unless that word
  is a port number or a port mapping (``2222``, ``8080:80``); after
  ``sshpass`` always;
- the password of ``-u``/``--user`` ``user:password``, keeping the user;
- the value of ``-H``/``--header`` when the header is named like a
  credential (``Authorization: Bearer x`` becomes ``Authorization: [REDACTED]``);
- the value of ``KEY=VALUE`` (and ``-DKEY=VALUE``) when the key is named
  like a credential (``PGPASSWORD=x``, ``GITHUB_TOKEN=x``);
- the password of a URL's ``user:password@``.

Everything else is left for :func:`forj_py.output.redact`, which the
caller runs over the joined line as well (well-known token shapes).
"""

from __future__ import annotations

import os
import re

from ..output import REDACTED, redact_url_credentials

# A name (option, variable, header) whose value is a credential: any of
# these as a part of it, the parts split at '-', '_' and '.'.
_SECRET_PARTS = frozenset(
    {
        "pass",
        "passwd",
        "password",
        "passphrase",
        "pwd",
        "token",
        "secret",
        "apikey",
        "auth",
        "credential",
        "credentials",
        "cookie",
        "authorization",
        "bearer",
    }
)
# ... or any of these inside it, for names written as one word (PGPASSWORD).
_SECRET_INFIXES = ("password", "passwd", "secret", "token", "apikey", "api_key", "api-key")
# Parts that say the value names where the secret is, not the secret.
_LOCATION_PARTS = frozenset({"file", "path", "dir", "env", "cmd", "command", "helper"})
_PORT = re.compile(r"[0-9]{1,5}(:[0-9]{1,5}){0,2}\Z")
_ASSIGNMENT = re.compile(r"(-D)?([A-Za-z_][A-Za-z0-9_.-]*)=")


def secret_name(name: str) -> bool:
    """Whether a value under ``name`` is a credential (``db-password``, ``GITHUB_TOKEN``)."""
    lowered = name.lower().lstrip("-")
    parts = [p for p in re.split(r"[-_.]", lowered) if p]
    if any(p in _LOCATION_PARTS for p in parts) or lowered.startswith("no-"):
        return False
    if any(p in _SECRET_PARTS for p in parts):
        return True
    return any(infix in lowered for infix in _SECRET_INFIXES)


def _header(value: str) -> str:
    name, colon, _ = value.partition(":")
    if colon and secret_name(name.strip()):
        return f"{name}: {REDACTED}"
    return value


def _user(value: str) -> str:
    user, colon, _ = value.partition(":")
    return f"{user}:{REDACTED}" if colon else value


def redact_argv(argv: list[str]) -> list[str]:
    """``argv`` with the credentials it carries by position replaced by the marker."""
    out: list[str] = []
    # Inside sshpass's own options (up to the command it runs) -p is the password.
    sshpass = False
    pending: str | None = None  # what the next word is the value of
    for index, word in enumerate(argv):
        if os.path.basename(word) == "sshpass":
            sshpass = True
        elif pending is None and not word.startswith("-"):
            sshpass = False
        if pending is not None:
            kind, pending = pending, None
            if kind == "secret":
                out.append(REDACTED)
                continue
            if kind == "p":
                out.append(word if (_PORT.match(word) and not sshpass) else REDACTED)
                continue
            if kind == "user":
                out.append(_user(word))
                continue
            if kind == "header":
                out.append(_header(word))
                continue
        if index == 0:
            out.append(redact_url_credentials(word)[0])
            continue
        shown, pending = _word(word, sshpass)
        out.append(redact_url_credentials(shown)[0])
    return out


def _word(word: str, sshpass: bool) -> tuple[str, str | None]:
    """How ``word`` is shown, and what the word after it is the value of (if anything)."""
    if word.startswith("--"):
        name, eq, value = word[2:].partition("=")
        lowered = name.lower()
        if lowered == "user":
            return (f"--{name}={_user(value)}", None) if eq else (word, "user")
        if lowered == "header":
            return (f"--{name}={_header(value)}", None) if eq else (word, "header")
        if secret_name(name):
            return (f"--{name}={REDACTED}", None) if eq else (word, "secret")
        return word, None
    if word.startswith("-") and len(word) >= 2 and word[1] != "-":
        flag, glued = word[1], word[2:]
        if flag == "p" and not glued.startswith("="):
            if glued:
                keep = _PORT.match(glued) and not sshpass
                return (word if keep else f"-p{REDACTED}"), None
            return word, "p"
        if flag == "u" and len(word) == 2:
            return word, "user"
        if flag == "u" and ":" in glued:
            return f"-u{_user(glued)}", None
        if flag == "H":
            return (f"-H{_header(glued)}", None) if glued else (word, "header")
    assignment = _ASSIGNMENT.match(word)
    if assignment and secret_name(assignment.group(2)):
        return word[: assignment.end()] + REDACTED, None
    return word, None
