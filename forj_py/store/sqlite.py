"""Opening forj's own SQLite files: private, durable, shared by threads.

The journal and the plan store both live in the user's state directory and
may hold anything a call carried, so the file is created 0600 before SQLite
touches it; WAL with ``synchronous=FULL`` keeps every committed write across
a crash while readers never wait for writers.
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path


def open_private(path: Path, timeout: float) -> tuple[sqlite3.Connection, int]:
    """Open (creating, mode 0600) the database at ``path``; return it and its user_version.

    Raises ``OSError`` or ``sqlite3.Error``; callers say which store failed.
    """
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    if not path.exists():
        os.close(os.open(path, os.O_CREAT | os.O_WRONLY, 0o600))
    db = sqlite3.connect(str(path), timeout=timeout, check_same_thread=False, isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=FULL")
    version = int(db.execute("PRAGMA user_version").fetchone()[0])
    return db, version
