"""The AST index: which files were parsed, as what, and the definitions found.

It lives in ``ast.sqlite3`` in the user's state directory (outside every
project, mode 0600, see :mod:`forj_py.store.sqlite`), keyed by project
root.  A file's row keeps its size, modification time (nanoseconds) and
SHA-256 as of its last parse: a file whose size and time are unchanged is
not read again, and one whose content hash is unchanged is not parsed
again (a ``touch``, a checkout of the same content).  Parsing is the
caller's: this module stores and answers.
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .sqlite import open_private

SCHEMA_VERSION = 1
FILE_NAME = "ast.sqlite3"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS files (
    root      TEXT NOT NULL,
    path      TEXT NOT NULL,      -- relative to the root, forward slashes
    language  TEXT NOT NULL,
    size      INTEGER NOT NULL,
    mtime_ns  INTEGER NOT NULL,
    sha256    TEXT NOT NULL,
    errors    INTEGER NOT NULL,   -- how many syntax errors the last parse found
    problems  TEXT NOT NULL,      -- the first few, as JSON
    PRIMARY KEY (root, path)
);
CREATE TABLE IF NOT EXISTS nodes (
    root        TEXT NOT NULL,
    id          TEXT NOT NULL,
    path        TEXT NOT NULL,
    kind        TEXT NOT NULL,
    name        TEXT NOT NULL,
    qualname    TEXT NOT NULL,
    start_byte  INTEGER NOT NULL,
    end_byte    INTEGER NOT NULL,
    start_line  INTEGER NOT NULL,
    end_line    INTEGER NOT NULL,
    exported    INTEGER NOT NULL,
    documented  INTEGER NOT NULL,
    PRIMARY KEY (root, id)
);
CREATE INDEX IF NOT EXISTS nodes_by_path ON nodes (root, path);
"""


class AstIndexError(Exception):
    """The index cannot be opened or written (disk full, locked too long)."""


@dataclass(frozen=True)
class FileRow:
    path: str
    language: str
    size: int
    mtime_ns: int
    sha256: str
    errors: int
    problems: list[dict[str, Any]]


@dataclass(frozen=True)
class NodeRow:
    id: str
    path: str
    kind: str
    name: str
    qualname: str
    start_byte: int
    end_byte: int
    start_line: int
    end_line: int
    exported: bool
    documented: bool


class AstIndex:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        try:
            self._db, version = open_private(path, timeout=10)
            if version > SCHEMA_VERSION:
                raise AstIndexError(
                    f"{path} was written by a newer forj (schema {version}); move it aside"
                )
            # A cache of what the files say, rebuilt from them at will: a crash
            # may lose the last writes (never consistency), and a parse of
            # hundreds of files is not hundreds of disk syncs.
            self._db.execute("PRAGMA synchronous=NORMAL")
            self._db.executescript(_SCHEMA)
            self._db.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
        except (OSError, sqlite3.Error) as exc:
            raise AstIndexError(f"cannot open the AST index {path}: {exc}") from None

    def files(self, root: str) -> dict[str, FileRow]:
        with self._lock:
            rows = self._db.execute(
                "SELECT path, language, size, mtime_ns, sha256, errors, problems "
                "FROM files WHERE root = ?",
                (root,),
            ).fetchall()
        return {r[0]: FileRow(r[0], r[1], r[2], r[3], r[4], r[5], json.loads(r[6])) for r in rows}

    def touch(self, root: str, stats: Iterable[tuple[str, int, int]]) -> None:
        """Files whose content is what was parsed; only their (path, size, mtime_ns) changed."""
        self._write(
            "UPDATE files SET size = ?, mtime_ns = ? WHERE root = ? AND path = ?",
            [(size, mtime_ns, root, path) for path, size, mtime_ns in stats],
        )

    def replace(self, root: str, parses: Iterable[tuple[FileRow, Iterable[NodeRow]]]) -> None:
        """Store files' parses, each replacing what was known of it, in one transaction."""
        with self._lock:
            try:
                self._db.execute("BEGIN IMMEDIATE")
                for row, nodes in parses:
                    self._replace_one(root, row, nodes)
                self._db.execute("COMMIT")
            except sqlite3.Error as exc:
                self._rollback()
                raise AstIndexError(f"cannot write the AST index {self.path}: {exc}") from None

    def _replace_one(self, root: str, row: FileRow, nodes: Iterable[NodeRow]) -> None:
        self._db.execute("DELETE FROM nodes WHERE root = ? AND path = ?", (root, row.path))
        self._db.execute(
            "INSERT OR REPLACE INTO files VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (
                root,
                row.path,
                row.language,
                row.size,
                row.mtime_ns,
                row.sha256,
                row.errors,
                json.dumps(row.problems),
            ),
        )
        self._db.executemany(
            "INSERT OR REPLACE INTO nodes VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [
                (
                    root,
                    n.id,
                    n.path,
                    n.kind,
                    n.name,
                    n.qualname,
                    n.start_byte,
                    n.end_byte,
                    n.start_line,
                    n.end_line,
                    int(n.exported),
                    int(n.documented),
                )
                for n in nodes
            ],
        )

    def forget(self, root: str, paths: Iterable[str]) -> None:
        """Drop files that are gone (or no longer readable) and their definitions."""
        rows = [(root, p) for p in paths]
        self._write("DELETE FROM nodes WHERE root = ? AND path = ?", rows)
        self._write("DELETE FROM files WHERE root = ? AND path = ?", rows)

    def nodes(self, root: str, paths: Iterable[str] | None = None) -> list[NodeRow]:
        """Definitions of the project (of ``paths`` only, when given), by file and position."""
        with self._lock:
            rows = self._db.execute(
                "SELECT id, path, kind, name, qualname, start_byte, end_byte, start_line, "
                "end_line, exported, documented FROM nodes WHERE root = ? "
                "ORDER BY path, start_byte",
                (root,),
            ).fetchall()
        wanted = set(paths) if paths is not None else None
        return [
            NodeRow(r[0], r[1], r[2], r[3], r[4], r[5], r[6], r[7], r[8], bool(r[9]), bool(r[10]))
            for r in rows
            if wanted is None or r[1] in wanted
        ]

    def node(self, root: str, node_id: str) -> NodeRow | None:
        with self._lock:
            r = self._db.execute(
                "SELECT id, path, kind, name, qualname, start_byte, end_byte, start_line, "
                "end_line, exported, documented FROM nodes WHERE root = ? AND id = ?",
                (root, node_id),
            ).fetchone()
        if r is None:
            return None
        return NodeRow(
            r[0], r[1], r[2], r[3], r[4], r[5], r[6], r[7], r[8], bool(r[9]), bool(r[10])
        )

    def _write(self, sql: str, rows: list[tuple[Any, ...]]) -> None:
        if not rows:
            return
        with self._lock:
            try:
                self._db.execute("BEGIN IMMEDIATE")
                self._db.executemany(sql, rows)
                self._db.execute("COMMIT")
            except sqlite3.Error as exc:
                self._rollback()
                raise AstIndexError(f"cannot write the AST index {self.path}: {exc}") from None

    def _rollback(self) -> None:
        with contextlib.suppress(sqlite3.Error):
            self._db.execute("ROLLBACK")

    def close(self) -> None:
        with self._lock:
            self._db.close()


_open: dict[Path, AstIndex] = {}
_open_lock = threading.Lock()


def index_at(state_dir: Path) -> AstIndex:
    """The index in ``state_dir``, opened once per process and shared by its threads."""
    path = (state_dir / FILE_NAME).absolute()
    with _open_lock:
        index = _open.get(path)
        if index is None:
            index = _open[path] = AstIndex(path)
        return index
