"""The change log a writing call fills in: every file it writes, as it writes it.

A checkpoint is the set of files one batch changed, each with the backup
of its old content (or the fact that it did not exist) and the hash of
what forj wrote.  Each write is journaled the moment it lands, before the
tool goes on, so even a worker killed in the middle of a multi-file change
leaves a record of what it had already written.

Only forj's own file tools record here.  Files changed by commands
(``run_shell``, ``run_tests``) have no backups and are not in any
checkpoint.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field

from .journal import FileChange, Journal

log = logging.getLogger(__name__)


@dataclass
class ChangeLog:
    """Journals the file changes of one call of one batch."""

    journal: Journal
    batch_id: str
    seq: int
    call_id: str
    # Sentences for the batch's warnings when the journal could not record.
    warnings: list[str] = field(default_factory=list)
    _rows: dict[str, int] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def wrote(self, change: FileChange) -> None:
        """``change`` has landed on disk."""
        try:
            row = self.journal.record_file_change(self.batch_id, self.seq, self.call_id, change)
        except Exception as exc:  # never fail a write that already happened
            log.exception("journaling a change to %s failed", change.path)
            with self._lock:
                self.warnings.append(
                    f"The journal could not record the change to {change.path} "
                    f"({type(exc).__name__}); it cannot be undone from forj"
                )
            return
        with self._lock:
            self._rows[change.canonical] = row

    def put_back(self, canonical: str) -> None:
        """The latest write to ``canonical`` was undone at once (a failed multi-file change)."""
        with self._lock:
            row = self._rows.pop(canonical, None)
        if row is None:
            return
        try:
            self.journal.forget_file_change(row)
        except Exception:
            log.exception("forgetting a put-back change failed")
