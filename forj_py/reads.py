"""What each conversation has read: the record the stale-file rule checks.

A writing tool refuses a file the model has not read, or whose content
changed since it read it.  That record is core state, kept per
conversation (one chat of one connection), dropped when a file changes
outside the worker (the watcher) or is put back (undo), and consulted by
the planner, the executor and the tools; it lives here, below all of
them, so none depends on another for it.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass, field


@dataclass
class Session:
    """What the worker remembers across calls for one conversation.

    ``file_reads`` maps a canonical path to the SHA-256 of the content the
    model last read there (the stale-file rule of the writing tools).
    """

    file_reads: dict[str, str] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)
    # The line changes each writing call of a batch made, per (batch, phase)
    # and file, in order: later calls of the batch number lines in the file
    # as the model read it, and are mapped through these.  Phase "plan" is
    # the previews, "run" the execution; only recent batches are kept.
    line_changes: dict[tuple[str, str], list[list[tuple[int, int, int]]]] = field(
        default_factory=dict
    )
    # Canonical path -> the tab width of the editor's buffer visiting it, as
    # the last plan request of this conversation sent (a hint; see _tabs).
    editor_tab_widths: dict[str, int] = field(default_factory=dict)

    def record_read(self, canonical: str, sha256: str) -> None:
        with self.lock:
            self.file_reads[canonical] = sha256


# Conversations whose read record is kept at once; the least recently used
# beyond this are forgotten (their chat reads its files again: the safe side).
MAX_CONVERSATIONS = 4096


class Conversations:
    """The read record of each conversation: one chat of one connection.

    The stale-file rule (read before you edit) holds per conversation: a
    file chat A read is not read for chat B, nor for an MCP or SDK client,
    and the reverse.  A conversation is named by the connection the worker
    assigned at connect (never by the client's say-so) and the chat id the
    client gives within it, so a client naming another's chat id gets a
    record of its own.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._records: OrderedDict[tuple[str, str], Session] = OrderedDict()

    def of(self, connection: str, chat: str) -> Session:
        """The record of ``chat`` on ``connection``, made empty on first use."""
        key = (connection, chat)
        with self._lock:
            record = self._records.get(key)
            if record is None:
                record = self._records[key] = Session()
                while len(self._records) > MAX_CONVERSATIONS:
                    self._records.popitem(last=False)
            else:
                self._records.move_to_end(key)
            return record

    def all(self) -> list[Session]:
        with self._lock:
            return list(self._records.values())

    def forget(self, connection: str, chat: str | None = None) -> None:
        """Drop a closed connection's records (or one chat's): a new one starts empty."""
        with self._lock:
            for key in [k for k in self._records if k[0] == connection]:
                if chat is None or key[1] == chat:
                    del self._records[key]

    def drop_read(self, canonical: str) -> None:
        """What any conversation read of this file is no longer what it holds."""
        for record in self.all():
            with record.lock:
                record.file_reads.pop(canonical, None)
