"""Standing grants: "yes to calls like this one" given in the review, kept for their scope.

A grant is a permission rule (``run_shell(pytest *)``, ``edit(src/forj/**)``)
with a scope:

- ``session``: this chat on this connection, as long as the connection lasts;
- ``minutes``: the same, until the time is up (the clock is injected, so
  tests need not wait);
- ``project``: every chat of this project ("always"), written to the
  user's state directory (never into the project) and kept until revoked.

A session or timed grant records its owner: the connection it was given
over (the id the worker assigned at connect, never one a client names) and
the chat on it.  It covers calls of that chat on that connection only, and
is forgotten when the connection closes.  Only the user gives project
grants (the worker refuses one from an MCP or SDK connection, see
``service.py``); the file keeps project grants only, and an entry of any
other scope found in it is ignored, never read as project-wide.

"Once" is the review's ordinary approval and is never stored.  A grant is
matched strictly (every part of a command, every path) and records whether
it was given for a call with network: one given without never covers a
call that asks for network.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import logging
import os
import tempfile
import threading
import uuid
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from ..safety.permissions import PermissionRule, Subject, parse_rule

log = logging.getLogger(__name__)

SCOPES = ("session", "minutes", "project")
MAX_PROJECT_GRANTS = 1000


@dataclass(frozen=True)
class Grant:
    id: str
    rule: str
    scope: str  # session | minutes | project
    session: str | None  # the chat session of a session or timed grant
    created_at: float
    expires_at: float | None
    network: bool
    # The connection a session or timed grant was given over; None for a
    # project grant (the user's, for every chat).
    owner: str | None = None

    def wire(self) -> dict[str, Any]:
        return asdict(self)

    def parsed(self) -> PermissionRule:
        return parse_rule(self.rule, f"grant {self.id}")


class GrantStore:
    """The grants of one project: session and timed ones in memory, project ones on disk."""

    def __init__(self, state_dir: Path, project_root: str, clock: Callable[[], float]) -> None:
        digest = hashlib.sha256(project_root.encode("utf-8", "surrogatepass")).hexdigest()[:24]
        self.path = state_dir / "grants" / f"{digest}.json"
        self.root = project_root
        self.clock = clock
        self._lock = threading.Lock()
        self._memory: list[Grant] = []
        self._project: list[Grant] = []
        self._stamp: tuple[int, int] | None = None

    # --- giving and taking -------------------------------------------------------

    def add(
        self,
        rule: str,
        scope: str,
        session: str | None,
        minutes: float | None,
        network: bool,
        owner: str | None = None,
    ) -> Grant:
        """Store a grant; ``owner`` (the connection) is required for session and timed ones."""
        if scope not in SCOPES:
            raise ValueError(f"unknown grant scope {scope!r}; use one of {', '.join(SCOPES)}")
        if scope != "project" and owner is None:
            raise ValueError(f"a {scope} grant needs the connection it was given over")
        if scope == "minutes" and not minutes:
            raise ValueError("a grant of scope 'minutes' needs its minutes")
        parse_rule(rule, "grant")
        now = self.clock()
        expires = now + minutes * 60 if scope == "minutes" and minutes else None
        grant = Grant(
            id="g-" + uuid.uuid4().hex[:12],
            rule=rule,
            scope=scope,
            session=None if scope == "project" else session,
            created_at=now,
            expires_at=expires,
            network=network,
            owner=None if scope == "project" else owner,
        )
        with self._lock, self._file_lock(scope == "project"):
            if scope == "project":
                self._reload(force=True)
                if len(self._project) >= MAX_PROJECT_GRANTS:
                    raise ValueError(
                        f"this project already has {MAX_PROJECT_GRANTS} standing grants; "
                        "revoke some first"
                    )
                self._project.append(grant)
                self._save()
            else:
                self._memory.append(grant)
        return grant

    def revoke(self, grant_id: str) -> bool:
        with self._lock:
            before = len(self._memory)
            self._memory = [g for g in self._memory if g.id != grant_id]
            if len(self._memory) != before:
                return True
        with self._lock, self._file_lock(True):
            self._reload(force=True)
            kept = [g for g in self._project if g.id != grant_id]
            if len(kept) == len(self._project):
                return False
            self._project = kept
            self._save()
            return True

    def forget_owner(self, owner: str) -> None:
        """A connection closed: the session and timed grants given over it end."""
        with self._lock:
            self._memory = [g for g in self._memory if g.owner != owner]

    def active(self, session: str | None = None, owner: str | None = None) -> list[Grant]:
        """Grants in force: the project's, and the session's (all sessions if None).

        With ``owner``, only session grants given over that connection.
        """
        now = self.clock()
        with self._lock:
            self._memory = [g for g in self._memory if g.expires_at is None or g.expires_at > now]
            self._reload()
            memory = [
                g
                for g in self._memory
                if (session is None or g.session == session) and (owner is None or g.owner == owner)
            ]
            return [*self._project, *memory]

    def find(self, subject: Subject, owner: str, session: str | None) -> Grant | None:
        """The first grant in force that covers this call of ``session`` on ``owner``, strictly."""
        for grant in self.active(session or "", owner):
            if subject.network and not grant.network:
                continue
            try:
                if grant.parsed().matches(subject, strict=True):
                    return grant
            except ValueError:
                continue  # a hand-edited grant that no longer parses covers nothing
        return None

    # --- the project's file ------------------------------------------------------

    @contextlib.contextmanager
    def _file_lock(self, needed: bool) -> Iterator[None]:
        """Hold the project's grants file against other workers while we change it.

        Two workers of one project (Emacs's and an MCP server's own) each read,
        change and rewrite the file; without the lock one's grant could
        overwrite the other's.
        """
        if not needed:
            yield
            return
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd = os.open(self.path.with_suffix(".lock"), os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # closing releases the lock

    def _reload(self, force: bool = False) -> None:
        """Read the file again when another worker of the project changed it."""
        try:
            st = self.path.stat()
        except FileNotFoundError:
            self._project, self._stamp = [], None
            return
        stamp = (st.st_mtime_ns, st.st_size)
        if stamp == self._stamp and not force:
            return
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
            grants = [Grant(**g) for g in data.get("grants", [])]
        except (OSError, ValueError, TypeError) as exc:
            log.warning("%s: unreadable grants file, ignored: %s", self.path, exc)
            grants = []
        # The file holds project grants only: an entry of another scope (or
        # naming a chat or a connection) was not written by forj, and is
        # never read as a grant for every chat.
        strays = {g.id for g in grants if g.scope != "project" or g.session or g.owner}
        if strays:
            log.warning(
                "%s: %d entries that are not project grants, ignored: %s",
                self.path,
                len(strays),
                ", ".join(sorted(strays)[:5]),
            )
            grants = [g for g in grants if g.id not in strays]
        self._project, self._stamp = grants, stamp

    def _save(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        text = json.dumps(
            {"root": self.root, "grants": [_stored(g) for g in self._project]},
            ensure_ascii=False,
            indent=1,
        )
        fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=".grants-")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                fh.write(text)
                fh.flush()
                os.fsync(fh.fileno())
            os.chmod(tmp, 0o600)
            os.replace(tmp, self.path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
        st = self.path.stat()
        self._stamp = (st.st_mtime_ns, st.st_size)


def _stored(grant: Grant) -> dict[str, Any]:
    """A project grant as the file keeps it (no owner: it is the user's)."""
    out = grant.wire()
    out.pop("owner", None)
    return out
