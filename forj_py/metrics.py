"""Per-session counters of the calls a worker ran: what each chat's calls cost.

Kept in memory by the worker, one :class:`SessionMetrics` per chat (an Emacs
chat, the MCP client, an SDK session), fed once per executed batch; every
transport reads them (the ``metrics`` method, the SDK's metrics events).
Only counts, sizes, times and file names: never arguments or contents.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

# Files touched are remembered by name up to this many per session (the count
# goes on): a session that rewrites a whole tree must not grow without bound.
MAX_FILES_LISTED = 200

# Sessions are forgotten oldest first beyond this many.
MAX_SESSIONS = 1000


@dataclass
class CallSample:
    """One finished call, as the counters see it."""

    name: str
    ok: bool
    # None: the call never ran (refused at planning, denied, cancelled first).
    duration_ms: float | None
    result_bytes: int
    files: list[str] = field(default_factory=list)


@dataclass
class SessionMetrics:
    session: str
    calls: int = 0
    errors: int = 0
    ran: int = 0  # calls that actually ran (the rest were answered without running)
    duration_ms_total: float = 0.0
    duration_ms_max: float = 0.0
    bytes_out: int = 0
    files_touched: int = 0
    files: list[str] = field(default_factory=list)
    by_tool: dict[str, dict[str, int]] = field(default_factory=dict)
    first_at: float | None = None
    last_at: float | None = None
    _seen: set[str] = field(default_factory=set)

    def add(self, sample: CallSample, now: float) -> None:
        self.calls += 1
        self.errors += 0 if sample.ok else 1
        tool = self.by_tool.setdefault(sample.name, {"calls": 0, "errors": 0})
        tool["calls"] += 1
        tool["errors"] += 0 if sample.ok else 1
        if sample.duration_ms is not None:
            self.ran += 1
            self.duration_ms_total += sample.duration_ms
            self.duration_ms_max = max(self.duration_ms_max, sample.duration_ms)
        self.bytes_out += sample.result_bytes
        for path in sample.files:
            if path in self._seen:
                continue
            self._seen.add(path)
            self.files_touched += 1
            if len(self.files) < MAX_FILES_LISTED:
                self.files.append(path)
        self.first_at = now if self.first_at is None else self.first_at
        self.last_at = now

    def wire(self) -> dict[str, Any]:
        return {
            "session": self.session,
            "calls": self.calls,
            "errors": self.errors,
            "ran": self.ran,
            "duration_ms_total": round(self.duration_ms_total, 1),
            "duration_ms_max": round(self.duration_ms_max, 1),
            "duration_ms_mean": round(self.duration_ms_total / self.ran, 1) if self.ran else 0.0,
            "bytes_out": self.bytes_out,
            "files_touched": self.files_touched,
            "files": list(self.files),
            "files_listed_complete": self.files_touched <= MAX_FILES_LISTED,
            "by_tool": {name: dict(c) for name, c in sorted(self.by_tool.items())},
            "first_at": self.first_at,
            "last_at": self.last_at,
        }


class Metrics:
    """Every session's counters, safe to feed and read from any thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._sessions: dict[str, SessionMetrics] = {}

    def record(self, session: str, samples: list[CallSample], now: float) -> None:
        with self._lock:
            metrics = self._sessions.pop(session, None) or SessionMetrics(session)
            self._sessions[session] = metrics  # most recently used last
            for sample in samples:
                metrics.add(sample, now)
            while len(self._sessions) > MAX_SESSIONS:
                del self._sessions[next(iter(self._sessions))]

    def session(self, session: str) -> dict[str, Any]:
        with self._lock:
            found = self._sessions.get(session)
            return (found or SessionMetrics(session)).wire()

    def all(self) -> list[dict[str, Any]]:
        with self._lock:
            return [m.wire() for m in self._sessions.values()]
