"""The journal: every batch's calls and every result, durable before it matters.

Seed 000 FR-RES-04: the calls of a batch are written before planning, each
result right after it completes and before the next call starts, so a crash
loses nothing; and nothing ever re-executes by itself after a crash
(FR-RES-04c): the journal only records, it never drives execution.

SQLite in WAL mode with ``synchronous=FULL`` (a commit is on disk when it
returns), one file per user under the state directory (outside every
project, mode 0600: results hold file contents).  Several workers, one per
project, share the file; SQLite's locking and a busy timeout keep them
apart.
"""

from __future__ import annotations

import json
import os
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

SCHEMA_VERSION = 1

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
"""


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
            path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            if not path.exists():
                # Create it private before SQLite opens it.
                os.close(os.open(path, os.O_CREAT | os.O_WRONLY, 0o600))
            self._db = sqlite3.connect(
                str(path), timeout=10.0, check_same_thread=False, isolation_level=None
            )
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=FULL")
            self._db.execute("PRAGMA foreign_keys=ON")
            version = self._db.execute("PRAGMA user_version").fetchone()[0]
            if version > SCHEMA_VERSION:
                raise JournalError(
                    f"{path}: written by a newer forj (schema {version}); upgrade forj"
                )
            self._db.executescript(_SCHEMA)
            self._db.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
        except (OSError, sqlite3.Error) as exc:
            raise JournalError(f"cannot open the journal {path}: {exc}") from None
        self._lock = threading.Lock()

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def _tx(self, statements: list[tuple[str, tuple[Any, ...]]]) -> None:
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                for sql, params in statements:
                    self._db.execute(sql, params)
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")

    # --- writes -----------------------------------------------------------

    def record_batch(
        self, batch_id: str, root: str, mode: str, calls: list[tuple[str, str, Any]]
    ) -> None:
        """The calls of a new batch, as received, before anything is planned."""
        now = time.time()
        stmts: list[tuple[str, tuple[Any, ...]]] = [
            (
                "INSERT INTO batches VALUES (?, ?, ?, 'received', ?, ?)",
                (batch_id, root, mode, now, now),
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
        self._tx(stmts)

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

    def record_state(self, batch_id: str, state: str) -> None:
        self._tx(
            [
                (
                    "UPDATE batches SET state=?, updated_at=? WHERE batch_id=?",
                    (state, time.time(), batch_id),
                )
            ]
        )

    def record_result(self, batch_id: str, seq: int, call_id: str, ok: bool, text: str) -> None:
        """One result, committed before the next call starts (FR-RES-04b).

        ``text`` is the result's JSON exactly as it goes back to the client,
        so the record is what the model reads.
        """
        self._tx(
            [
                (
                    "INSERT OR REPLACE INTO results VALUES (?, ?, ?, ?, ?, ?)",
                    (batch_id, seq, call_id, 1 if ok else 0, text, time.time()),
                )
            ]
        )

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
