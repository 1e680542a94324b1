"""Secrets in the worker's own environment: which variables they are, and leaving none behind.

A variable is a secret by its name (the built-in denylist below plus
``[tools.environment] denylist``, without regard to case) or by its value
(a URL with ``user:password@``, the shape of a well-known key).  Commands
never get them (``tools/_shell.clean_environment``), and neither does the
worker keep them: deleting a variable from ``os.environ`` does not change
what ``/proc/<pid>/environ`` shows (the environment the process was
started with), so a worker started with secrets in its environment starts
itself again at once, the same program with the same arguments, without
them (:func:`restart_without_secrets`).  What it had to keep, the
connection token and the secrets' values (output that shows one is
redacted), goes to the new program through an anonymous in-memory file
whose descriptor number is the only thing left in the environment
(``FORJ_HANDOVER_FD``); the new program reads it and closes it before
anything else (:func:`receive`).

This module imports nothing heavy: it runs before the rest of the worker
is imported, so a restart costs one interpreter start and no more.
"""

from __future__ import annotations

import contextlib
import fnmatch
import functools
import json
import logging
import os
import re
import sys
from collections.abc import Callable, Iterable, Mapping
from typing import NoReturn

log = logging.getLogger(__name__)

# The usual names of secrets, the Gemini / Google names forj's providers use,
# and spellings that suffix patterns alone miss (PGPASSWORD, GITHUB_PAT,
# AZURE_OPENAI_APIKEY, DOCKER_AUTH_CONFIG).  elisp/forj-worker.el keeps the
# same list (a test compares them) to start the worker without them.
BUILTIN_ENV_DENYLIST = (
    "*_KEY",
    "*_TOKEN",
    "*_SECRET",
    "*_PASSWORD",
    "*PASSWORD",
    "*PASSWD",
    "*_PAT",
    "*APIKEY",
    "*_AUTH",
    "*_AUTH_CONFIG",
    "*_CREDENTIALS",
    "AWS_*",
    "ANTHROPIC_*",
    "OPENAI_*",
    "GEMINI_*",
    "GOOGLE_API_KEY",
    "OPENROUTER_*",
    # Passwords under short names (MYSQL_PWD, DB_PASS, SMTP_PASS) and
    # connection strings, which carry them inline.
    "*PASS",
    "*_PASS",
    "*PWD",
    "*_DSN",
    "DATABASE_URL",
    "FORJ_TOKEN",
)
# The working directory's variables end in PWD but hold no secret.
ENV_ALLOWED_NAMES = frozenset({"PWD", "OLDPWD"})
# Values that are secrets whatever the variable is called: a URL with
# user:password@, and the shapes of well-known provider keys.
SECRET_VALUE_RE = re.compile(
    r"""
      \b[A-Za-z][A-Za-z0-9+.-]*://[^/\s:@]+:[^/\s@]+@
    | \bsk-(?:ant-|proj-)?[A-Za-z0-9_-]{16,}
    | \bAKIA[0-9A-Z]{16}\b
    | \bgh[pousr]_[A-Za-z0-9]{20,}
    | \bgithub_pat_[A-Za-z0-9_]{20,}
    | \bglpat-[A-Za-z0-9_-]{20,}
    | \bxox[abprs]-[A-Za-z0-9-]{10,}
    | \bAIza[0-9A-Za-z_-]{30,}
    | \bhf_[A-Za-z0-9]{30,}
    | -----BEGIN\ [A-Z\ ]*PRIVATE\ KEY-----
    """,
    re.VERBOSE,
)
# Shorter values ("json", "us-east-1", "default") would blank out ordinary output.
MIN_REDACTED_VALUE = 8
TOKEN_VARIABLE = "FORJ_TOKEN"  # noqa: S105  (the name, not a value)
HANDOVER_VARIABLE = "FORJ_HANDOVER_FD"
# One restart for the built-in list, one more when the configuration names
# more secrets; a third would mean the restart does not work.
MAX_RESTARTS = 2
MAX_HANDOVER_BYTES = 64 << 20


class _Held:
    """What the worker removed from its own environment and still needs."""

    def __init__(self) -> None:
        self.names: list[str] = []
        self.values: list[str] = []
        self.token = ""
        self.restarts = 0
        self.may_restart = False

    def keep(self, name: str, value: str) -> None:
        if name == TOKEN_VARIABLE:
            self.token = value
        if name not in self.names:
            self.names.append(name)
        if len(value) >= MIN_REDACTED_VALUE and value not in self.values:
            self.values.append(value)


_HELD = _Held()


def is_secret(name: str, value: str, patterns: Iterable[str]) -> bool:
    """Whether a variable is removed: by its name, or by a value that is a credential."""
    upper = name.upper()
    if upper not in ENV_ALLOWED_NAMES and _names_re(tuple(patterns)).match(upper):
        return True
    return SECRET_VALUE_RE.search(value) is not None


@functools.lru_cache(maxsize=8)
def _names_re(patterns: tuple[str, ...]) -> re.Pattern[str]:
    """The denied name patterns as one expression (each command asks for every
    variable: one match instead of a ``fnmatch`` per pattern and name)."""
    if not patterns:
        return re.compile(r"(?!)")
    return re.compile("|".join(f"(?:{fnmatch.translate(p.upper())})" for p in patterns))


def secret_names(env: Mapping[str, str], patterns: Iterable[str]) -> list[str]:
    patterns = tuple(patterns)
    return sorted(name for name, value in env.items() if is_secret(name, value, patterns))


def held_names() -> list[str]:
    """The secret variables the worker was started with (now out of its environment)."""
    return sorted(_HELD.names)


def held_values() -> list[str]:
    """Their values (8 characters or more), in memory only: for redacting output."""
    return list(_HELD.values)


def keep_token(token: str) -> None:
    """Hold the token the worker got another way (stdin): a restart hands it over."""
    _HELD.token = token


def has_token() -> bool:
    return bool(_HELD.token)


def take_token() -> str:
    """The connection token the worker was started with (``FORJ_TOKEN``), once."""
    token, _HELD.token = _HELD.token, ""
    return token


def allow_restart() -> None:
    """Let :func:`enforce` start the program again (only the program itself may)."""
    _HELD.may_restart = True


def receive() -> None:
    """Take what the program before the restart handed over; nothing if there was none."""
    text = os.environ.pop(HANDOVER_VARIABLE, None)
    if text is None:
        return
    if not text.isdigit():
        raise SystemExit(f"forj worker: {HANDOVER_VARIABLE}={text!r} is not a descriptor")
    fd = int(text)
    chunks = []
    try:
        os.lseek(fd, 0, os.SEEK_SET)
        size = 0
        while chunk := os.read(fd, 1 << 16):
            size += len(chunk)
            if size > MAX_HANDOVER_BYTES:
                raise OSError("too large")
            chunks.append(chunk)
    except OSError as exc:
        raise SystemExit(
            f"forj worker: cannot read what the restart handed over ({exc}); "
            f"start the worker without {HANDOVER_VARIABLE} in its environment"
        ) from None
    finally:
        with contextlib.suppress(OSError):
            os.close(fd)
    try:
        data = json.loads(b"".join(chunks))
        names = [str(n) for n in data["names"]]
        values = [str(v) for v in data["values"]]
        token = str(data["token"])
        restarts = int(data["restarts"])
    except (ValueError, KeyError, TypeError):
        raise SystemExit("forj worker: what the restart handed over is not readable") from None
    for name in names:
        if name not in _HELD.names:
            _HELD.names.append(name)
    for value in values:
        if value not in _HELD.values:
            _HELD.values.append(value)
    _HELD.token = token or _HELD.token
    _HELD.restarts = restarts
    log.info("started again without the secret variables %s", " ".join(sorted(names)))


def enforce(patterns: Iterable[str], before_restart: Callable[[], object] | None = None) -> None:
    """Leave no variable ``patterns`` (or its value) calls a secret in the environment.

    The program itself (:func:`allow_restart`) starts again without them,
    so they are gone from ``/proc/<pid>/environ`` too; called in-process
    (tests call ``main``), the variables are only removed from
    ``os.environ``.  Either way their values are kept for redaction and
    ``FORJ_TOKEN``'s for :func:`take_token`.
    """
    patterns = tuple(patterns)
    names = secret_names(os.environ, patterns)
    if not names:
        return
    if _HELD.may_restart and _HELD.restarts < MAX_RESTARTS:
        if before_restart is not None:
            before_restart()
        try:
            _restart(names)
        except OSError as exc:
            # The interpreter cannot be run again (its path no longer
            # executable for this user): serving beats refusing to start,
            # and the command sandbox hides this process from commands anyway.
            log.warning(
                "cannot start again without the secret variables (%s); "
                "they are removed in memory only",
                exc,
            )
    elif _HELD.may_restart:
        log.warning(
            "started %d times and secrets are still in the environment; removed in memory only",
            _HELD.restarts,
        )
    for name in names:
        _HELD.keep(name, os.environ.pop(name))


def _restart(names: list[str]) -> NoReturn:
    env = dict(os.environ)
    for name in names:
        _HELD.keep(name, env.pop(name))
    payload = json.dumps(
        {
            "names": _HELD.names,
            "values": _HELD.values,
            "token": _HELD.token,
            "restarts": _HELD.restarts + 1,
        }
    ).encode("utf-8")
    fd = _handover(payload)
    env[HANDOVER_VARIABLE] = str(fd)
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        # The same interpreter with the same options and arguments: sys.orig_argv
        # keeps "-m forj_py", "-X importtime" or a console script's path.
        os.execve(sys.executable, sys.orig_argv, env)  # noqa: S606  (this very program)
    except OSError:
        os.close(fd)
        raise


def _handover(payload: bytes) -> int:
    """A descriptor the next program inherits, holding ``payload`` and nothing on disk."""
    if hasattr(os, "memfd_create"):
        fd = os.memfd_create("forj-handover", 0)
    else:
        import tempfile  # here: only without memfd

        # No memfd (macOS): a file only this user can open, unlinked at once.
        fd, path = tempfile.mkstemp(prefix="forj-handover-")
        os.unlink(path)
    view = memoryview(payload)
    while view:
        view = view[os.write(fd, view) :]
    os.set_inheritable(fd, True)
    return fd
