"""The journal: every batch's calls and every result, durable before it matters.

The calls of a batch are written before planning, each result right after
it completes and before the next call starts, so a crash loses nothing; and
nothing ever re-executes by itself after a crash (its side effects may have
happened already): the journal only records, it never drives execution.

SQLite in WAL mode, one file per user under the state directory (outside
every project, mode 0600: results hold file contents).  Several workers,
one per project, share the file; SQLite's locking and a busy timeout keep
them apart.

Durable where it matters, and only there.  The connection runs with
``synchronous=NORMAL``: a commit reaches the operating system at once (a
killed worker loses nothing) but is not flushed to the disk by itself.  The
writes that come before something the outside world sees are *durable*
commits, made with ``synchronous=FULL``: the WAL file is flushed before
the commit returns.  The WAL is one file written in order, each frame
checksummed over all earlier ones, so flushing it makes every earlier
commit durable too, and a power loss can only cut off its end: it never
keeps a later commit and loses an earlier one.  The durable points are:

- before a tool runs: the batch's state ``executing`` (so recovery never
  mistakes a call that may have run for one that never started), which
  also flushes the calls, the plan and every consent record before it.
  A batch of calls that change nothing (reads, searches) is left to the
  flush of its first result: its calls were flushed with the plan, and
  if recovery took one that ran for one that never started, running it
  again would change nothing;
- before a result is reported, or the next call starts: the result (the
  last one of a batch together with the batch's final state);
- before a plan is answered: the dispositions and any ready results;
- each file a tool writes, before the tool goes on;
- undo, recovery's resolutions, and calls journaled on their own.

What is left to the next durable commit (or to the operating system) is
what nobody has acted on yet: the calls of a batch being planned (nothing
was answered or run), consent reasons and turn ids (flushed before
anything runs), and the mark that a reply reached the client (losing it
makes recovery offer a batch whose results were already seen: shown
again, never run again).

Schema 2 adds what recovery and undo need: the turn a batch belongs to, the
worker that owns it, whether its results reached the client, how a
recovery was resolved, and, per call, every file forj's own tools wrote
(``file_changes``): the backup of the old content, whether the file
existed, and the content's hash before and after.

Schema 3 adds what the audit timeline shows: which consent step decided a
call (``consent.step``) and when each executed call started
(``call_times``), so the time it took can be told.
"""

from __future__ import annotations

import json
import os
import sqlite3
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .sqlite import open_private

SCHEMA_VERSION = 3

_SCHEMA = """
CREATE TABLE IF NOT EXISTS batches (
    batch_id    TEXT PRIMARY KEY,
    root        TEXT NOT NULL,
    mode        TEXT NOT NULL,
    state       TEXT NOT NULL,   -- received | planned | executing | done | cancelled
    created_at  REAL NOT NULL,
    updated_at  REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS calls (
    batch_id    TEXT NOT NULL REFERENCES batches(batch_id),
    seq         INTEGER NOT NULL,  -- call order as the model emitted it
    call_id     TEXT NOT NULL,
    name        TEXT NOT NULL,
    raw         TEXT NOT NULL,     -- the call object exactly as received
    disposition TEXT,              -- filled in once planned
    PRIMARY KEY (batch_id, seq)
);
CREATE TABLE IF NOT EXISTS results (
    batch_id    TEXT NOT NULL,
    seq         INTEGER NOT NULL,
    call_id     TEXT NOT NULL,
    ok          INTEGER NOT NULL,
    result      TEXT NOT NULL,     -- the tool-result object as sent back
    finished_at REAL NOT NULL,
    PRIMARY KEY (batch_id, seq),
    FOREIGN KEY (batch_id, seq) REFERENCES calls(batch_id, seq)
);
CREATE INDEX IF NOT EXISTS batches_by_root ON batches(root, created_at);
CREATE TABLE IF NOT EXISTS consent (
    batch_id    TEXT NOT NULL,
    seq         INTEGER NOT NULL,
    stage       TEXT NOT NULL,     -- plan: why the call runs, is reviewed or refused;
                                   -- approval: the user's answer and any grant given
    reason      TEXT NOT NULL,
    decided_at  REAL NOT NULL,
    PRIMARY KEY (batch_id, seq, stage)
);
"""

# Columns schema 2 adds to ``batches``, each with its declaration.
_BATCH_COLUMNS_2 = {
    "turn": "TEXT",  # the client's opaque turn id, when it sent one
    "kind": "TEXT NOT NULL DEFAULT 'tools'",  # tools | undo
    "worker": "TEXT",  # "pid:start" of the worker that owns it
    "delivered_at": "REAL",  # the execute reply reached the client's socket
    "resolution": "TEXT",  # recovery: resumed | discarded | migrated
    "undone_by": "TEXT",  # the undo batch that reverted its file changes
}

_SCHEMA_2 = (
    """
CREATE TABLE IF NOT EXISTS file_changes (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    batch_id    TEXT NOT NULL REFERENCES batches(batch_id),
    seq         INTEGER NOT NULL,  -- the call's position; -1 for an undo's own writes
    call_id     TEXT NOT NULL,
    path        TEXT NOT NULL,     -- as results show it, relative to the project root
    canonical   TEXT NOT NULL,
    existed     INTEGER NOT NULL,  -- the file existed before this change
    backup      TEXT,              -- the copy of the old content (NULL: none kept)
    hash_before TEXT,              -- SHA-256 of the old content (NULL: did not exist)
    hash_after  TEXT,              -- SHA-256 of the new content (NULL: deleted)
    at          REAL NOT NULL
)""",
    "CREATE INDEX IF NOT EXISTS file_changes_by_batch ON file_changes(batch_id)",
    "CREATE INDEX IF NOT EXISTS file_changes_by_file ON file_changes(canonical, id)",
)

# Schema 3: the consent step that decided (mode, deny, rule, forced-review,
# ask, requires-consent, grant, allow, default), and per executed call when
# it started (its result's finished_at ends it).
_CONSENT_COLUMNS_3 = {"step": "TEXT"}

_SCHEMA_3 = (
    """
CREATE TABLE IF NOT EXISTS call_times (
    batch_id    TEXT NOT NULL,
    seq         INTEGER NOT NULL,
    started_at  REAL NOT NULL,
    finished_at REAL,
    PRIMARY KEY (batch_id, seq)
)""",
)

# The audit timeline's page size is bounded: one reply stays small.
MAX_AUDIT_PAGE = 500

# Batches are reported as unfinished only this long after they started:
# a crash from last month is no longer a conversation anyone resumes.
RECOVERY_WINDOW_SECONDS = 14 * 86400


def default_state_dir() -> Path:
    env = os.environ.get("FORJ_STATE_DIR")
    if env:
        return Path(env).expanduser()
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "forj"


class JournalError(Exception):
    pass


class Journal:
    def __init__(self, path: Path) -> None:
        self.path = path
        try:
            self._db, version = open_private(path, timeout=10.0)
            self._db.execute("PRAGMA foreign_keys=ON")
            if version > SCHEMA_VERSION:
                raise JournalError(
                    f"{path}: written by a newer forj (schema {version}); upgrade forj"
                )
            self._db.executescript(_SCHEMA)
            self._migrate(version)
            # Durable commits ask for FULL one by one (see the module's docstring).
            self._db.execute("PRAGMA synchronous=NORMAL")
        except (OSError, sqlite3.Error) as exc:
            raise JournalError(f"cannot open the journal {path}: {exc}") from None
        self._lock = threading.Lock()

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def _tx(self, statements: list[tuple[str, tuple[Any, ...]]], durable: bool = True) -> None:
        """One transaction; ``durable``: on the disk (with every earlier one) when it returns."""
        with self._lock:
            if durable:
                self._db.execute("PRAGMA synchronous=FULL")
            try:
                self._db.execute("BEGIN IMMEDIATE")
                try:
                    for sql, params in statements:
                        self._db.execute(sql, params)
                except BaseException:
                    self._db.execute("ROLLBACK")
                    raise
                self._db.execute("COMMIT")
            finally:
                if durable:
                    self._db.execute("PRAGMA synchronous=NORMAL")

    def _migrate(self, version: int) -> None:
        """Bring an older journal (or a new one) to the current schema, once, whoever gets
        there first."""
        if version >= SCHEMA_VERSION:
            return
        self._db.execute("BEGIN IMMEDIATE")
        try:
            current = self._db.execute("PRAGMA user_version").fetchone()[0]
            if current < 2:
                have = {row[1] for row in self._db.execute("PRAGMA table_info(batches)")}
                for name, decl in _BATCH_COLUMNS_2.items():
                    if name not in have:
                        self._db.execute(f"ALTER TABLE batches ADD COLUMN {name} {decl}")
                for statement in _SCHEMA_2:
                    self._db.execute(statement)
                # Batches from before recovery existed are history, not crashes
                # to report: nobody could have resolved them.
                self._db.execute(
                    "UPDATE batches SET resolution='migrated', delivered_at=updated_at "
                    "WHERE resolution IS NULL"
                )
            if current < 3:
                have = {row[1] for row in self._db.execute("PRAGMA table_info(consent)")}
                for name, decl in _CONSENT_COLUMNS_3.items():
                    if name not in have:
                        self._db.execute(f"ALTER TABLE consent ADD COLUMN {name} {decl}")
                for statement in _SCHEMA_3:
                    self._db.execute(statement)
            if current < SCHEMA_VERSION:
                self._db.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        self._db.execute("COMMIT")

    # --- writes -----------------------------------------------------------

    def record_batch(
        self,
        batch_id: str,
        root: str,
        mode: str,
        calls: list[tuple[str, str, Any]],
        *,
        turn: str | None = None,
        worker: str | None = None,
        kind: str = "tools",
        durable: bool = True,
    ) -> None:
        """The calls of a new batch, as received, before anything is planned.

        ``durable`` False when the next durable commit comes before anything
        is answered or run (planning them at once): a killed worker still
        leaves them, and the plan's own commit flushes them.
        """
        now = time.time()
        stmts: list[tuple[str, tuple[Any, ...]]] = [
            (
                "INSERT INTO batches (batch_id, root, mode, state, created_at, updated_at, "
                "turn, kind, worker) VALUES (?, ?, ?, 'received', ?, ?, ?, ?, ?)",
                (batch_id, root, mode, now, now, turn, kind, worker),
            )
        ]
        for seq, (call_id, name, raw) in enumerate(calls):
            stmts.append(
                (
                    "INSERT INTO calls VALUES (?, ?, ?, ?, ?, NULL)",
                    # ASCII escapes keep even a lone surrogate the model sent
                    # (valid JSON, not valid UTF-8) exactly as received.
                    (batch_id, seq, call_id, name, json.dumps(raw, ensure_ascii=True)),
                )
            )
        self._tx(stmts, durable)

    def record_plan(
        self, batch_id: str, dispositions: list[str], resolved: dict[int, dict[str, Any]]
    ) -> None:
        """Each call's disposition, and the ready results of pre-resolved calls."""
        now = time.time()
        stmts: list[tuple[str, tuple[Any, ...]]] = [
            ("UPDATE calls SET disposition=? WHERE batch_id=? AND seq=?", (d, batch_id, seq))
            for seq, d in enumerate(dispositions)
        ]
        for seq, result in resolved.items():
            stmts.append(self._result_stmt(batch_id, seq, result, now))
        stmts.append(
            ("UPDATE batches SET state='planned', updated_at=? WHERE batch_id=?", (now, batch_id))
        )
        self._tx(stmts)

    def record_consent(
        self,
        batch_id: str,
        stage: str,
        reasons: dict[int, str],
        steps: dict[int, str] | None = None,
    ) -> None:
        """Why each call of a batch runs, is reviewed or is refused (the audit's answer).

        ``steps`` names, per call, the consent step that decided it.
        """
        now = time.time()
        steps = steps or {}
        self._tx(
            [
                (
                    "INSERT OR REPLACE INTO consent (batch_id, seq, stage, reason, decided_at, "
                    "step) VALUES (?, ?, ?, ?, ?, ?)",
                    (batch_id, seq, stage, reason, now, steps.get(seq)),
                )
                for seq, reason in reasons.items()
            ],
            # An audit line: flushed by the commit that precedes running anything.
            durable=False,
        )

    def consent(self, batch_id: str) -> dict[int, dict[str, str]]:
        """The recorded reasons of a batch: seq -> {stage: reason}."""
        with self._lock:
            rows = self._db.execute(
                "SELECT seq, stage, reason FROM consent WHERE batch_id=? ORDER BY seq",
                (batch_id,),
            ).fetchall()
        out: dict[int, dict[str, str]] = {}
        for seq, stage, reason in rows:
            out.setdefault(seq, {})[stage] = reason
        return out

    def record_state(self, batch_id: str, state: str, durable: bool = True) -> None:
        """The batch's state; ``durable`` False only where running it again would change nothing."""
        self._tx(
            [
                (
                    "UPDATE batches SET state=?, updated_at=? WHERE batch_id=?",
                    (state, time.time(), batch_id),
                )
            ],
            durable,
        )

    def record_result(
        self,
        batch_id: str,
        seq: int,
        call_id: str,
        ok: bool,
        text: str,
        *,
        state: str | None = None,
    ) -> None:
        """One result, durable before the next call starts, so a crash loses none.

        ``text`` is the result's JSON exactly as it goes back to the client,
        so the record is what the model reads.  ``state``: the batch's final
        state, for its last result: one commit for both.
        """
        now = time.time()
        stmts: list[tuple[str, tuple[Any, ...]]] = [
            (
                "INSERT OR REPLACE INTO results VALUES (?, ?, ?, ?, ?, ?)",
                (batch_id, seq, call_id, 1 if ok else 0, text, now),
            )
        ]
        if state is not None:
            stmts.append(
                (
                    "UPDATE batches SET state=?, updated_at=? WHERE batch_id=?",
                    (state, now, batch_id),
                )
            )
        self._tx(stmts)

    @staticmethod
    def _result_stmt(
        batch_id: str, seq: int, result: dict[str, Any], now: float
    ) -> tuple[str, tuple[Any, ...]]:
        return (
            "INSERT OR REPLACE INTO results VALUES (?, ?, ?, ?, ?, ?)",
            (
                batch_id,
                seq,
                str(result.get("id", "")),
                1 if result.get("ok") else 0,
                json.dumps(result, ensure_ascii=True),
                now,
            ),
        )

    # --- reads (recovery) ------------------------------------------------------

    def batch(self, batch_id: str) -> dict[str, Any] | None:
        with self._lock:
            row = self._db.execute(
                "SELECT batch_id, root, mode, state, created_at FROM batches WHERE batch_id=?",
                (batch_id,),
            ).fetchone()
            if row is None:
                return None
            calls = self._db.execute(
                "SELECT seq, call_id, name, raw, disposition FROM calls "
                "WHERE batch_id=? ORDER BY seq",
                (batch_id,),
            ).fetchall()
            results = dict(
                self._db.execute(
                    "SELECT seq, result FROM results WHERE batch_id=? ORDER BY seq", (batch_id,)
                ).fetchall()
            )
        return {
            "batch_id": row[0],
            "root": row[1],
            "mode": row[2],
            "state": row[3],
            "created_at": row[4],
            "calls": [
                {
                    "seq": seq,
                    "id": call_id,
                    "name": name,
                    "call": json.loads(raw),
                    "disposition": disp,
                    "result": json.loads(results[seq]) if seq in results else None,
                }
                for seq, call_id, name, raw, disp in calls
            ],
        }

    def unfinished(self, root: str) -> list[str]:
        """Batches of ``root`` that never reached an end: what recovery looks at."""
        with self._lock:
            rows = self._db.execute(
                "SELECT batch_id FROM batches WHERE root=? AND state IN "
                "('received', 'planned', 'executing') ORDER BY created_at",
                (root,),
            ).fetchall()
        return [r[0] for r in rows]

    # --- recovery ------------------------------------------------------------------

    def record_turn(self, batch_id: str, turn: str) -> None:
        """Name the batch's turn, unless planning already did."""
        self._tx(
            [("UPDATE batches SET turn=? WHERE batch_id=? AND turn IS NULL", (turn, batch_id))],
            # Flushed by the commit that precedes running or answering anything.
            durable=False,
        )

    def record_delivered(
        self, batch_id: str, times: dict[int, tuple[float, float | None]] | None = None
    ) -> None:
        """The execute reply reached the client: its results are the client's now.

        ``times`` (seq -> started, finished) go into the same transaction:
        when each executed call ran, for the audit timeline.  Not flushed by
        itself: a power loss that takes it makes recovery offer a batch the
        client already saw, whose results are shown again and whose calls
        never run again; the next durable commit flushes it.
        """
        stmts: list[tuple[str, tuple[Any, ...]]] = [
            ("UPDATE batches SET delivered_at=? WHERE batch_id=?", (time.time(), batch_id))
        ]
        stmts += [
            (
                "INSERT OR REPLACE INTO call_times VALUES (?, ?, ?, ?)",
                (batch_id, seq, started, finished),
            )
            for seq, (started, finished) in sorted((times or {}).items())
        ]
        self._tx(stmts, durable=False)

    def record_resolution(self, batch_id: str, resolution: str) -> None:
        self._tx(
            [
                (
                    "UPDATE batches SET resolution=?, updated_at=? WHERE batch_id=?",
                    (resolution, time.time(), batch_id),
                )
            ]
        )

    def recoverable(self, root: str, now: float | None = None) -> list[tuple[str, str | None]]:
        """Batches of ``root`` whose outcome the client may never have seen, oldest first.

        Unresolved, recent, and either not finished (received, planned,
        executing: the worker stopped) or finished without the reply reaching
        the client (it stopped first).  Returns (batch id, owning worker).
        """
        since = (now if now is not None else time.time()) - RECOVERY_WINDOW_SECONDS
        with self._lock:
            rows = self._db.execute(
                "SELECT batch_id, worker FROM batches WHERE root=? AND kind='tools' "
                "AND resolution IS NULL AND created_at >= ? AND (state IN "
                "('received', 'planned', 'executing') OR delivered_at IS NULL) "
                "ORDER BY created_at",
                (root, since),
            ).fetchall()
        return [(r[0], r[1]) for r in rows]

    def batch_meta(self, batch_id: str) -> dict[str, Any] | None:
        """The columns recovery and undo look at, without the calls."""
        with self._lock:
            row = self._db.execute(
                "SELECT batch_id, root, state, created_at, turn, kind, resolution, undone_by, "
                "delivered_at, worker FROM batches WHERE batch_id=?",
                (batch_id,),
            ).fetchone()
        if row is None:
            return None
        keys = (
            "batch_id",
            "root",
            "state",
            "created_at",
            "turn",
            "kind",
            "resolution",
            "undone_by",
            "delivered_at",
            "worker",
        )
        return dict(zip(keys, row, strict=True))

    # --- checkpoints -------------------------------------------------------------

    def record_file_change(self, batch_id: str, seq: int, call_id: str, change: FileChange) -> int:
        """One file forj wrote (or deleted), committed before the tool goes on.

        Returns the row's id, for :meth:`forget_file_change`.
        """
        with self._lock:
            self._db.execute("PRAGMA synchronous=FULL")
            try:
                self._db.execute("BEGIN IMMEDIATE")
                try:
                    cur = self._db.execute(
                        "INSERT INTO file_changes (batch_id, seq, call_id, path, canonical, "
                        "existed, backup, hash_before, hash_after, at) "
                        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                        (
                            batch_id,
                            seq,
                            call_id,
                            change.path,
                            change.canonical,
                            1 if change.existed else 0,
                            change.backup,
                            change.hash_before,
                            change.hash_after,
                            time.time(),
                        ),
                    )
                    row_id = cur.lastrowid
                except BaseException:
                    self._db.execute("ROLLBACK")
                    raise
                self._db.execute("COMMIT")
            finally:
                self._db.execute("PRAGMA synchronous=NORMAL")
        assert row_id is not None
        return row_id

    def forget_file_change(self, row_id: int) -> None:
        """A write that was put back at once (a multi-file change that failed)."""
        self._tx([("DELETE FROM file_changes WHERE id=?", (row_id,))])

    def file_changes(self, batch_ids: list[str]) -> list[FileChange]:
        """Every recorded write of these batches, in the order it happened."""
        if not batch_ids:
            return []
        with self._lock:
            rows = self._db.execute(
                "SELECT batch_id, seq, call_id, path, canonical, existed, backup, hash_before, "
                "hash_after, at FROM file_changes WHERE batch_id IN "
                "(SELECT value FROM json_each(?)) ORDER BY id",
                (json.dumps(batch_ids),),
            ).fetchall()
        return [_change(row) for row in rows]

    def last_write(self, canonical: str) -> FileChange | None:
        """forj's latest recorded write to this file, in any batch."""
        with self._lock:
            row = self._db.execute(
                "SELECT batch_id, seq, call_id, path, canonical, existed, backup, hash_before, "
                "hash_after, at FROM file_changes WHERE canonical=? ORDER BY id DESC LIMIT 1",
                (canonical,),
            ).fetchone()
        return None if row is None else _change(row)

    def changing_batches(
        self, root: str, *, turn: str | None = None, since: float | None = None
    ) -> list[dict[str, Any]]:
        """Batches of ``root`` that changed files, oldest first: all, one turn's, or from a time."""
        sql = (
            "SELECT b.batch_id, b.turn, b.kind, b.state, b.created_at, b.undone_by "
            "FROM batches b WHERE b.root=? AND EXISTS "
            "(SELECT 1 FROM file_changes f WHERE f.batch_id=b.batch_id)"
        )
        params: list[Any] = [root]
        if turn is not None:
            sql += " AND b.turn=?"
            params.append(turn)
        if since is not None:
            sql += " AND b.created_at>=?"
            params.append(since)
        sql += " ORDER BY b.created_at, b.rowid"
        with self._lock:
            rows = self._db.execute(sql, tuple(params)).fetchall()
        keys = ("batch_id", "turn", "kind", "state", "created_at", "undone_by")
        return [dict(zip(keys, row, strict=True)) for row in rows]

    def first_of_turn(self, root: str, turn: str) -> float | None:
        """When the turn's first batch was received (any batch, changing files or not)."""
        with self._lock:
            row = self._db.execute(
                "SELECT MIN(created_at) FROM batches WHERE root=? AND turn=?", (root, turn)
            ).fetchone()
        return None if row is None else row[0]

    def record_undo(self, undo_id: str, batch_ids: list[str]) -> None:
        """``undo_id`` reverted ``batch_ids``.

        What any of them undid is live again (they are reverted), then they
        are marked undone by ``undo_id``.
        """
        stmts: list[tuple[str, tuple[Any, ...]]] = [
            ("UPDATE batches SET undone_by=NULL WHERE undone_by=?", (b,)) for b in batch_ids
        ]
        stmts += [
            ("UPDATE batches SET undone_by=? WHERE batch_id=?", (undo_id, b)) for b in batch_ids
        ]
        self._tx(stmts)

    # --- the audit timeline ---------------------------------------------------------

    def audit(
        self,
        root: str,
        *,
        limit: int = 100,
        offset: int = 0,
        tool: str | None = None,
        outcome: str | None = None,
        text: str | None = None,
    ) -> tuple[list[dict[str, Any]], bool]:
        """One page of the calls made in ``root``, newest first, and whether more follow.

        ``outcome`` is ok, error, refused (a policy, a rule or the user said
        no) or none (no result: never run); ``text`` matches the tool name,
        the call as received, the consent reasons and the error message.
        """
        limit = max(1, min(limit, MAX_AUDIT_PAGE))
        where = ["b.root=?", "b.kind='tools'"]
        params: list[Any] = [root]
        if tool:
            where.append("c.name=?")
            params.append(tool)
        if outcome:
            where.append("outcome=?")  # SQLite lets WHERE name a result column
            params.append(outcome)
        if text:
            like = "%" + _like_escape(text) + "%"
            # The calls are stored with ASCII escapes: look for the text as
            # it is there too, so "café" finds a call that wrote it.
            escaped = json.dumps(text, ensure_ascii=True)[1:-1]
            raw_like = "%" + _like_escape(escaped) + "%"
            # Cheap tests first; an error message is parsed out of failed
            # results only.
            where.append(
                "(c.name LIKE ? ESCAPE '\\' OR c.raw LIKE ? ESCAPE '\\' "
                "OR cp.reason LIKE ? ESCAPE '\\' OR ca.reason LIKE ? ESCAPE '\\' "
                "OR (r.ok=0 AND json_extract(r.result, '$.error.message') LIKE ? ESCAPE '\\'))"
            )
            params += [like, raw_like, like, like, like]
        # Only constant fragments are joined; every value is a parameter.
        sql = _AUDIT_SELECT
        sql += " AND ".join(where)
        sql += " ORDER BY b.created_at DESC, b.rowid DESC, c.seq DESC LIMIT ? OFFSET ?"
        params += [limit + 1, max(offset, 0)]
        with self._lock:
            rows = self._db.execute(sql, tuple(params)).fetchall()
        keys = (
            "batch_id",
            "time",
            "turn",
            "seq",
            "call_id",
            "name",
            "raw",
            "disposition",
            "ok",
            "error_type",
            "code",
            "error_message",
            "finished_at",
            "started_at",
            "ran_until",
            "plan_reason",
            "step",
            "approval_reason",
            "files",
            "outcome",
        )
        out = []
        for row in rows[:limit]:
            entry = dict(zip(keys, row, strict=True))
            entry["raw"] = json.loads(entry["raw"])
            entry["files"] = json.loads(entry["files"] or "[]")
            out.append(entry)
        return out, len(rows) > limit

    def audit_entry(self, root: str, batch_id: str, seq: int) -> dict[str, Any] | None:
        """One call of ``root`` as received and its result as sent, for the audit's detail view."""
        with self._lock:
            row = self._db.execute(
                "SELECT c.raw, r.result FROM calls c JOIN batches b ON b.batch_id=c.batch_id "
                "LEFT JOIN results r ON r.batch_id=c.batch_id AND r.seq=c.seq "
                "WHERE b.root=? AND c.batch_id=? AND c.seq=?",
                (root, batch_id, seq),
            ).fetchone()
        if row is None:
            return None
        return {
            "call": json.loads(row[0]),
            "result": None if row[1] is None else json.loads(row[1]),
        }


def _like_escape(text: str) -> str:
    """``text`` for a LIKE pattern with ESCAPE '\\': its own wildcards match themselves."""
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


_AUDIT_SELECT = (
    "SELECT b.batch_id, b.created_at, b.turn, c.seq, c.call_id, c.name, c.raw, "
    "c.disposition, r.ok, json_extract(r.result, '$.error.type'), "
    "json_extract(r.result, '$.error.details.code'), "
    "json_extract(r.result, '$.error.message'), r.finished_at, t.started_at, "
    "t.finished_at, cp.reason, cp.step, ca.reason, "
    "(SELECT json_group_array(DISTINCT f.path) FROM file_changes f "
    " WHERE f.batch_id=c.batch_id AND f.seq=c.seq), "
    # A call's outcome, from its result: what the audit filters on.
    "CASE WHEN r.ok IS NULL THEN 'none' WHEN r.ok=1 THEN 'ok' "
    "WHEN json_extract(r.result, '$.error.type') IN ('permission-error', 'cancelled') "
    "THEN 'refused' ELSE 'error' END AS outcome "
    "FROM calls c JOIN batches b ON b.batch_id=c.batch_id "
    "LEFT JOIN results r ON r.batch_id=c.batch_id AND r.seq=c.seq "
    "LEFT JOIN call_times t ON t.batch_id=c.batch_id AND t.seq=c.seq "
    "LEFT JOIN consent cp ON cp.batch_id=c.batch_id AND cp.seq=c.seq AND cp.stage='plan' "
    "LEFT JOIN consent ca ON ca.batch_id=c.batch_id AND ca.seq=c.seq AND ca.stage='approval' "
    "WHERE "
)


def _change(row: tuple[Any, ...]) -> FileChange:
    return FileChange(
        path=row[3],
        canonical=row[4],
        existed=bool(row[5]),
        backup=row[6],
        hash_before=row[7],
        hash_after=row[8],
        batch_id=row[0],
        seq=row[1],
        call_id=row[2],
        at=row[9],
    )


@dataclass(frozen=True)
class FileChange:
    """One file forj's own tools changed: enough to put it back."""

    path: str  # as results show it
    canonical: str
    existed: bool  # before the change
    backup: str | None  # the copy of the old content; None when none was kept
    hash_before: str | None  # None: the file did not exist
    hash_after: str | None  # None: the change deleted the file
    batch_id: str = ""
    seq: int = -1
    call_id: str = ""
    at: float = 0.0


def worker_identity(instance: str) -> str:
    """``pid:start:instance``: tells a live worker from a dead one that had its pid."""
    return f"{os.getpid()}:{_start_time(os.getpid())}:{instance}"


def same_process(identity: str | None) -> bool:
    if not identity:
        return False
    pid, start, _ = [*identity.split(":"), "", ""][:3]
    return pid == str(os.getpid()) and start == _start_time(os.getpid())


def alive_elsewhere(identity: str | None) -> bool:
    """Whether the worker that wrote ``identity`` still runs, as another process."""
    if not identity or same_process(identity):
        return False
    pid_text, start, _ = [*identity.split(":"), "", ""][:3]
    try:
        pid = int(pid_text)
        os.kill(pid, 0)
    except (ValueError, ProcessLookupError):
        return False
    except PermissionError:
        pass  # exists, owned by someone else: compare start times below
    # A killed worker its parent has not reaped yet still answers kill(pid, 0)
    # and keeps its start time: it is dead all the same.
    return _stat_fields(pid)[:1] not in (["Z"], ["X"]) and _start_time(pid) == start


def _stat_fields(pid: int) -> list[str]:
    """The fields of /proc/PID/stat after the command name (state first); [] without /proc."""
    try:
        stat_line = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return []
    return stat_line[stat_line.rfind(")") + 2 :].split()


def _start_time(pid: int) -> str:
    """The process's start time in clock ticks (Linux); "" where /proc has none."""
    fields = _stat_fields(pid)
    return fields[19] if len(fields) > 19 else ""
