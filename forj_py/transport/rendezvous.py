"""Where a project's running worker can be found by ``forj_py mcp``.

The worker Emacs starts for a project writes one small JSON file into the
state directory, named after a hash of the project root: its port, a
random secret of its own (not Emacs's token) and who it is (pid and start
time).  ``forj_py mcp`` reads it, connects, and proves the secret with
``hello``; its calls then go through that worker, so both sides share one
planner, one stale-file record and one journal.

The file is the key to the worker, so it is trusted only when it is a
regular file (not a link), owned by this user and readable by nobody
else; a file failing any of those is refused, with the reason, and never
used.  A file left by a worker that is gone (its process is not running,
or its port refuses connections) is stale: it is removed and ignored.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import logging
import os
import secrets
import socket
import stat
import tempfile
from dataclasses import dataclass
from pathlib import Path

from ..store.journal import alive_elsewhere, same_process, worker_identity

log = logging.getLogger(__name__)

DIRECTORY = "rendezvous"
CONNECT_TIMEOUT = 2.0


class RendezvousRefused(Exception):
    """A rendezvous file exists but must not be trusted; the message says why."""


@dataclass(frozen=True)
class Rendezvous:
    """A live worker's address and the secret it accepts from MCP servers."""

    path: Path
    root: str
    port: int
    secret: str
    identity: str


def path_for(state_dir: Path, root: str) -> Path:
    digest = hashlib.sha256(root.encode("utf-8", "surrogatepass")).hexdigest()[:24]
    return state_dir / DIRECTORY / f"{digest}.json"


def publish(state_dir: Path, root: str, port: int) -> Rendezvous:
    """Write this worker's rendezvous for ``root`` (mode 0600, atomically); return it.

    A file another live worker of the project wrote is replaced: the newest
    worker is the one Emacs talks to.
    """
    target = path_for(state_dir, root)
    target.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    entry = Rendezvous(target, root, port, secrets.token_hex(32), worker_identity("rdv"))
    text = json.dumps(
        {"root": root, "port": port, "secret": entry.secret, "identity": entry.identity}
    )
    # mkstemp creates the file 0600 from the start: the secret is never readable by others.
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=".rendezvous-")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return entry


def withdraw(entry: Rendezvous) -> None:
    """Remove ``entry``'s file, unless a newer worker has replaced it since."""
    try:
        current = _read(entry.path)
    except (OSError, ValueError, RendezvousRefused):
        return
    if current.secret == entry.secret:
        with contextlib.suppress(OSError):
            entry.path.unlink()


def find(state_dir: Path, root: str) -> Rendezvous | None:
    """The live worker serving ``root``, or None when there is none.

    Raises :class:`RendezvousRefused` for a file that exists but fails the
    ownership and mode checks.  Stale files are removed.
    """
    target = path_for(state_dir, root)
    try:
        entry = _read(target)
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        log.warning("%s: unreadable rendezvous file, ignored: %s", target, exc)
        return None
    if entry.root != root:
        raise RendezvousRefused(f"{target} names another project ({entry.root}); not used")
    if same_process(entry.identity):
        return entry
    if not alive_elsewhere(entry.identity) or not _accepts(entry.port):
        log.info("%s: its worker is gone; removing the stale file", target)
        _remove_stale(entry)
        return None
    return entry


def _read(path: Path) -> Rendezvous:
    # O_NOFOLLOW: a link planted in the state directory is refused, not followed.
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise RendezvousRefused(f"{path} is a symbolic link; not used") from None
        raise
    try:
        check_trusted(path, os.fstat(fd))
        with os.fdopen(fd, "r", encoding="utf-8") as fh:
            fd = -1
            data = json.loads(fh.read(65536))
    finally:
        if fd >= 0:
            os.close(fd)
    if not isinstance(data, dict):
        raise ValueError("not a JSON object")
    try:
        return Rendezvous(
            path,
            str(data["root"]),
            int(data["port"]),
            str(data["secret"]),
            str(data["identity"]),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"missing or bad field: {exc}") from None


def check_trusted(path: Path, st: os.stat_result) -> None:
    """Refuse a file that is not a regular file of ours, private to us."""
    if not stat.S_ISREG(st.st_mode):
        raise RendezvousRefused(f"{path} is not a regular file; not used")
    if st.st_uid != os.geteuid():
        raise RendezvousRefused(
            f"{path} belongs to uid {st.st_uid}, not to you (uid {os.geteuid()}); not used. "
            "Remove it: a worker of yours writes its own"
        )
    if st.st_mode & 0o077:
        raise RendezvousRefused(
            f"{path} has mode {stat.S_IMODE(st.st_mode):04o}: others may read its secret; "
            "not used. Remove it and restart the worker (M-x forj-worker-restart)"
        )


def _accepts(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=CONNECT_TIMEOUT):
            return True
    except OSError:
        return False


def _remove_stale(entry: Rendezvous) -> None:
    # Only if it is still the same stale file: a new worker may have just written one.
    with contextlib.suppress(OSError, ValueError, RendezvousRefused):
        if _read(entry.path).secret == entry.secret:
            entry.path.unlink()
