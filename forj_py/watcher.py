"""Notice files changed outside the worker, and forget what the model read of them.

The stale-file rule already compares hashes when a writing tool runs; the
watcher makes the worker forget at once, so the next edit of a file the
user (or a build) changed asks the model to read it again instead of
failing late.  Our own writes also produce events: a file whose content
still hashes to what the worker recorded is left alone.

Uses ``watchfiles`` (inotify on Linux, FSEvents on macOS).  If watching
cannot start (an inotify limit, say), the worker logs it and carries on:
the hash check at write time still holds.
"""

from __future__ import annotations

import hashlib
import logging
import os
import threading
from collections.abc import Callable

from .tools.registry import Session

log = logging.getLogger(__name__)

MAX_HASH_BYTES = 64 << 20


class Watcher:
    def __init__(
        self,
        root: str,
        session: Session,
        on_change: Callable[[str], None] | None = None,
    ) -> None:
        self.root = root
        self.session = session
        # Told of every change (the command sandbox keeps its masks current).
        self.on_change = on_change
        self.stop_event = threading.Event()
        self.thread = threading.Thread(target=self._run, name="forj-watch", daemon=True)
        self.ready = threading.Event()

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        self.stop_event.set()

    def _run(self) -> None:
        try:
            # Imported here, on the watcher's own thread, after the port is out.
            import watchfiles

            for changes in watchfiles.watch(
                self.root,
                watch_filter=_interesting,
                stop_event=self.stop_event,
                debounce=50,
                step=20,
                yield_on_timeout=True,
                rust_timeout=200,
                raise_interrupt=False,
            ):
                self.ready.set()
                for _, path in changes:
                    self._changed(path)
                    if self.on_change is not None:
                        try:
                            self.on_change(path)
                        except Exception:
                            log.exception("change listener failed for %s", path)
        except Exception:  # watching is best effort, never fatal
            log.warning(
                "file watching stopped; stale files are still caught when edited", exc_info=True
            )
        finally:
            self.ready.set()

    def _changed(self, path: str) -> None:
        canonical = os.path.realpath(path)
        with self.session.lock:
            known = self.session.file_reads.get(canonical)
        if known is None:
            return
        current = _hash(canonical)
        if current != known:
            with self.session.lock:
                if self.session.file_reads.get(canonical) == known:
                    del self.session.file_reads[canonical]
            log.info("%s changed outside forj; it must be read again before editing", path)


def _interesting(change: object, path: str) -> bool:
    # Git's own files, and our own temporary files mid-write, are noise.
    return f"{os.sep}.git{os.sep}" not in path and ".forj-" not in os.path.basename(path)


def _hash(path: str) -> str | None:
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0)
    try:
        fd = os.open(path, flags)
    except OSError:
        return None  # gone: certainly not what was read
    digest = hashlib.sha256()
    with os.fdopen(fd, "rb") as fh:
        total = 0
        while chunk := fh.read(1 << 20):
            total += len(chunk)
            if total > MAX_HASH_BYTES:
                return None
            digest.update(chunk)
    return digest.hexdigest()
