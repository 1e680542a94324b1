"""The plan stores: ``todo_write``'s items and ``task``'s work items, per project.

Both live in ``tasks.sqlite3`` beside the journal (the user's state
directory, outside every project, mode 0600) as two stores that never mix:
every row names its kind and every query names one, so a todo id means
nothing to ``task`` and the reverse.  Rows are keyed
by the project root, so every worker of a project (and every chat it
serves) sees one plan, and the plan outlives the worker and Emacs.

Every change is a read-modify-write inside one ``BEGIN IMMEDIATE``
transaction: SQLite takes the write lock before the read, so two clients
changing the same plan at once are serialised and neither loses the
other's update, whether they share a worker or not (WAL keeps readers
from waiting on the writer).
"""

from __future__ import annotations

import json
import sqlite3
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, TypeVar

from .sqlite import open_private

SCHEMA_VERSION = 1
FILE_NAME = "tasks.sqlite3"

Kind = Literal["todo", "task"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS items (
    root  TEXT NOT NULL,
    kind  TEXT NOT NULL,      -- 'todo' or 'task': two stores, every query names one
    id    TEXT NOT NULL,
    seq   INTEGER NOT NULL,   -- creation order within the project and kind
    item  TEXT NOT NULL,      -- the item as the tool returns it (JSON)
    PRIMARY KEY (root, kind, id)
);
-- Ids are never reused, even after a delete: a model that remembers an old
-- id gets "unknown id", never somebody else's item.  Kind "todo:revision"
-- (and "task:revision") counts the changes of each store instead.
CREATE TABLE IF NOT EXISTS counters (
    root  TEXT NOT NULL,
    kind  TEXT NOT NULL,
    next  INTEGER NOT NULL,
    PRIMARY KEY (root, kind)
);
"""

T = TypeVar("T")


class TaskStoreError(Exception):
    """The store cannot be opened or written (disk full, locked too long)."""


@dataclass
class Items:
    """One project's items of one kind, inside an open transaction."""

    _db: sqlite3.Connection
    root: str
    kind: str
    _bumped: bool = False  # the revision counts transactions, not rows

    def all(self) -> list[dict[str, Any]]:
        rows = self._db.execute(
            "SELECT item FROM items WHERE root=? AND kind=? ORDER BY seq", (self.root, self.kind)
        ).fetchall()
        return [json.loads(row[0]) for row in rows]

    def ids(self) -> list[str]:
        rows = self._db.execute(
            "SELECT id FROM items WHERE root=? AND kind=? ORDER BY seq", (self.root, self.kind)
        ).fetchall()
        return [row[0] for row in rows]

    def count(self) -> int:
        row = self._db.execute(
            "SELECT COUNT(*) FROM items WHERE root=? AND kind=?", (self.root, self.kind)
        ).fetchone()
        return int(row[0])

    def get(self, item_id: str) -> dict[str, Any] | None:
        row = self._db.execute(
            "SELECT item FROM items WHERE root=? AND kind=? AND id=?",
            (self.root, self.kind, item_id),
        ).fetchone()
        return None if row is None else dict(json.loads(row[0]))

    def _counter(self, name: str) -> int:
        row = self._db.execute(
            "SELECT next FROM counters WHERE root=? AND kind=?", (self.root, name)
        ).fetchone()
        return 1 if row is None else int(row[0])

    def _advance(self, name: str) -> int:
        number = self._counter(name)
        self._db.execute(
            "INSERT OR REPLACE INTO counters VALUES (?, ?, ?)", (self.root, name, number + 1)
        )
        return number

    def new_id(self, prefix: str) -> str:
        return f"{prefix}{self._advance(self.kind)}"

    def revision(self) -> int:
        """How many changes this store of the project has seen.

        Every result carries it, so a client that receives results out of
        order (a list computed before a change, delivered after it) can
        tell which is newer.
        """
        return self._counter(f"{self.kind}:revision") - 1

    def _changed(self) -> None:
        if not self._bumped:
            self._advance(f"{self.kind}:revision")
            self._bumped = True

    def put(self, item: dict[str, Any]) -> None:
        """Insert a new item (at the end) or replace an existing one in place."""
        self._changed()
        text = json.dumps(item, ensure_ascii=True)
        updated = self._db.execute(
            "UPDATE items SET item=? WHERE root=? AND kind=? AND id=?",
            (text, self.root, self.kind, item["id"]),
        ).rowcount
        if not updated:
            row = self._db.execute(
                "SELECT COALESCE(MAX(seq), 0) + 1 FROM items WHERE root=? AND kind=?",
                (self.root, self.kind),
            ).fetchone()
            self._db.execute(
                "INSERT INTO items VALUES (?, ?, ?, ?, ?)",
                (self.root, self.kind, item["id"], int(row[0]), text),
            )

    def delete(self, item_id: str) -> bool:
        self._changed()
        gone = self._db.execute(
            "DELETE FROM items WHERE root=? AND kind=? AND id=?", (self.root, self.kind, item_id)
        ).rowcount
        return bool(gone)


class TaskStore:
    """The plan stores of every project, in one SQLite file."""

    def __init__(self, path: Path) -> None:
        self.path = path
        try:
            self._db, version = open_private(path, timeout=15.0)
            if version > SCHEMA_VERSION:
                raise TaskStoreError(
                    f"{path}: written by a newer forj (schema {version}); upgrade forj"
                )
            self._db.executescript(_SCHEMA)
            self._db.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
        except (OSError, sqlite3.Error) as exc:
            raise TaskStoreError(f"cannot open the task store {path}: {exc}") from None
        self._lock = threading.Lock()

    def close(self) -> None:
        with self._lock:
            self._db.close()

    @contextmanager
    def _transaction(self, kind: Kind, root: str, write: bool) -> Iterator[Items]:
        with self._lock:
            try:
                self._db.execute("BEGIN IMMEDIATE" if write else "BEGIN")
            except sqlite3.Error as exc:
                raise TaskStoreError(f"the task store is unavailable: {exc}") from None
            try:
                yield Items(self._db, root, kind)
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            try:
                self._db.execute("COMMIT")
            except sqlite3.Error as exc:
                self._db.execute("ROLLBACK")
                raise TaskStoreError(f"the task store could not be written: {exc}") from None

    def read(self, kind: Kind, root: str, fn: Callable[[Items], T]) -> T:
        """``fn`` of a consistent snapshot of ``root``'s items of ``kind``."""
        with self._transaction(kind, root, write=False) as items:
            return fn(items)

    def change(self, kind: Kind, root: str, fn: Callable[[Items], T]) -> T:
        """Run ``fn`` (which reads and changes items) as one serialised transaction.

        If ``fn`` raises, nothing it did is kept.
        """
        with self._transaction(kind, root, write=True) as items:
            return fn(items)


_open: dict[Path, TaskStore] = {}
_open_lock = threading.Lock()


def store_at(state_dir: Path) -> TaskStore:
    """The store in ``state_dir``, opened once per process and shared by its threads."""
    path = (state_dir / FILE_NAME).absolute()
    with _open_lock:
        store = _open.get(path)
        if store is None:
            store = _open[path] = TaskStore(path)
        return store
