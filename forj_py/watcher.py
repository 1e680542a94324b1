"""Notice files changed outside the worker, and forget what the model read of them.

The stale-file rule already compares hashes when a writing tool runs; the
watcher makes the worker forget at once, in every conversation's record
(:class:`~forj_py.reads.Conversations`), so the next edit of a file the
user (or a build) changed asks the model to read it again instead of
failing late.  Our own writes also produce events: a file whose content
still hashes to what the worker recorded is left alone.

On Linux the tree is watched with inotify for changes only
(:mod:`forj_py.system.inotify`: a watcher that also asks for reads wakes
for every file a search or a build opens); elsewhere with ``watchfiles``
(FSEvents on macOS).  If watching cannot start, the worker logs it and
carries on: the hash check at write time still holds.
"""

from __future__ import annotations

import hashlib
import logging
import os
import sys
import threading
from collections.abc import Callable, Iterator
from typing import Any

from .reads import Conversations

log = logging.getLogger(__name__)

MAX_HASH_BYTES = 64 << 20


class Watcher:
    def __init__(
        self,
        root: str,
        records: Conversations,
        on_change: Callable[[str], None] | None = None,
        on_incomplete: Callable[[], None] | None = None,
    ) -> None:
        self.root = root
        self.records = records
        # Told of every change (the command sandbox keeps its masks current).
        self.on_change = on_change
        # Told when changes may go unseen from now on: watching stopped, or
        # some directories are not watched.
        self.on_incomplete = on_incomplete
        self.stop_event = threading.Event()
        self.thread = threading.Thread(target=self._run, name="forj-watch", daemon=True)
        self.ready = threading.Event()
        # The inotify watcher, once watching began (None: watchfiles, or not yet).
        self.tree: Any = None

    def settle(self, timeout: float) -> bool:
        """Whether every change made before this call has been told (``on_change``)
        within ``timeout``; False where that cannot be known (watchfiles, or
        watching not begun or stopped)."""
        tree = self.tree
        if tree is None or self.stop_event.is_set() or not self.thread.is_alive():
            return False
        return bool(tree.settle(timeout))

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        self.stop_event.set()

    def _run(self) -> None:
        try:
            for changes in _changes(
                self.root, self.stop_event, self.ready, self._incomplete, self._watching
            ):
                if changes is None:  # events were lost: look again at everything
                    self._rescan()
                    continue
                for path in changes:
                    # The listener hears of every change, our own temporary
                    # files included: a directory renamed to look like one
                    # must not slip past the command sandbox's masks.
                    if _interesting(path):
                        self._changed(path)
                    self._tell(path)
        except Exception:  # watching is best effort, never fatal
            log.warning(
                "file watching stopped; stale files are still caught when edited", exc_info=True
            )
            self._incomplete()
        finally:
            self.ready.set()

    def _watching(self, tree: Any) -> None:
        self.tree = tree

    def _incomplete(self) -> None:
        if self.on_incomplete is not None:
            try:
                self.on_incomplete()
            except Exception:
                log.exception("the listener for incomplete watching failed")

    def _tell(self, path: str) -> None:
        if self.on_change is not None:
            try:
                self.on_change(path)
            except Exception:
                log.exception("change listener failed for %s", path)

    def _rescan(self) -> None:
        """After lost events: every file read is checked, every top-level entry told."""
        read: set[str] = set()
        for record in self.records.all():
            with record.lock:
                read.update(record.file_reads)
        for path in read:
            self._changed(path)
        try:
            with os.scandir(self.root) as it:
                names = [e.name for e in it]
        except OSError:
            return
        for name in names:
            self._tell(os.path.join(self.root, name))

    def _changed(self, path: str) -> None:
        canonical = os.path.realpath(path)
        holders = []
        for record in self.records.all():
            with record.lock:
                known = record.file_reads.get(canonical)
            if known is not None:
                holders.append((record, known))
        if not holders:
            return
        current = _hash(canonical)
        dropped = False
        for record, known in holders:
            # A record that holds what the file holds now (the chat whose
            # write this event is) keeps it; every other one must read again.
            if current != known:
                with record.lock:
                    if record.file_reads.get(canonical) == known:
                        del record.file_reads[canonical]
                        dropped = True
        if dropped:
            log.info("%s changed since it was read; it must be read again before editing", path)


def _changes(
    root: str,
    stop: threading.Event,
    ready: threading.Event,
    incomplete: Callable[[], None],
    watching: Callable[[Any], None] = lambda tree: None,
) -> Iterator[set[str] | None]:
    """Sets of changed paths (None: events were lost), from inotify on Linux,
    from watchfiles elsewhere; ``ready`` is set once watching has begun,
    ``incomplete`` called when some directories are left unwatched."""
    try:
        from .system.inotify import TreeWatcher

        tree = TreeWatcher(root, skip=lambda name: name == ".git")
    except (ImportError, OSError) as exc:
        if sys.platform.startswith("linux"):
            log.info("inotify unavailable (%s); watching with watchfiles", exc)
    else:
        told = False
        watching(tree)
        ready.set()
        try:
            if not tree.complete:
                told = True
                incomplete()
            for changes in tree.changes(stop):
                if not told and not tree.complete:
                    told = True
                    incomplete()
                yield changes
        finally:
            tree.close()
        return
    # Imported here, on the watcher's own thread, after the port is out.
    import watchfiles

    for events in watchfiles.watch(
        root,
        stop_event=stop,
        debounce=50,
        step=20,
        yield_on_timeout=True,
        rust_timeout=200,
        raise_interrupt=False,
    ):
        ready.set()
        if events:
            yield {path for _, path in events}


def _interesting(path: str) -> bool:
    # Git's own files, and our own temporary files mid-write, are noise to
    # what the model read (never to the sandbox's masks).
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
