"""A directory tree watched for changes with inotify (Linux), and for nothing else.

The kernel is asked only for what changes a tree: a name created, deleted
or moved, a file written (``IN_MODIFY``, ``IN_CLOSE_WRITE``).  Reads are
not asked for: a watcher that is (``IN_OPEN``, ``IN_ACCESS``,
``IN_CLOSE_NOWRITE``) wakes for every file a search, a build or a test
run opens, and a ripgrep search of 100,000 files costs such a watcher
about half a second of CPU, on the cores the search itself wants.

Every directory gets a watch of its own (inotify is not recursive): the
tree is walked once at the start, and each directory created or moved
in later is walked when its event arrives.  Symlinks are not followed.
Directories ``skip`` names (``.git``) are not watched inside.

When the kernel's queue overflows, events were lost: the tree is walked
again for directories created meanwhile (they have no watch yet), and
:meth:`changes` yields :data:`RESCAN` so that the caller looks again at
what it cares about.
When the per-user limit of watches is reached, the directories past it
are not watched (logged once); the rest still are.
"""

from __future__ import annotations

import array
import contextlib
import errno
import fcntl
import logging
import os
import select
import termios
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, Final

log = logging.getLogger(__name__)

IN_MODIFY: Final = 0x00000002
IN_CLOSE_WRITE: Final = 0x00000008
IN_MOVED_FROM: Final = 0x00000040
IN_MOVED_TO: Final = 0x00000080
IN_CREATE: Final = 0x00000100
IN_DELETE: Final = 0x00000200
IN_DELETE_SELF: Final = 0x00000400
IN_MOVE_SELF: Final = 0x00000800
IN_Q_OVERFLOW: Final = 0x00004000
IN_IGNORED: Final = 0x00008000
IN_ONLYDIR: Final = 0x01000000
IN_DONT_FOLLOW: Final = 0x02000000
IN_EXCL_UNLINK: Final = 0x04000000
IN_ISDIR: Final = 0x40000000

CHANGES: Final = (
    IN_CREATE
    | IN_DELETE
    | IN_MOVED_FROM
    | IN_MOVED_TO
    | IN_MODIFY
    | IN_CLOSE_WRITE
    | IN_DELETE_SELF
    | IN_MOVE_SELF
)
_WATCH_FLAGS: Final = IN_ONLYDIR | IN_DONT_FOLLOW | IN_EXCL_UNLINK

# What :meth:`TreeWatcher.changes` yields when events were lost.
RESCAN: Final = None


class TreeWatcher:
    """Watches ``root`` and every directory below it; see the module docstring.

    Raises ``OSError`` (or ``ImportError`` without ``inotify_simple``) when
    inotify cannot be used at all; the caller then watches another way.
    """

    def __init__(self, root: str, skip: Callable[[str], bool] | None = None) -> None:
        from inotify_simple import INotify  # Linux only; imported where it is used

        self.root = root.rstrip(os.sep) or os.sep
        self._skip = skip or (lambda name: False)
        self._ino = INotify()
        self._paths: dict[int, str] = {}  # watch descriptor -> directory
        self._wds: dict[str, int] = {}
        self._full = False
        # True from the moment events are taken from the kernel's queue
        # until the consumer has handled what was yielded of them (settle).
        self._busy = False
        self._hurry = threading.Event()
        if self._add(self.root) is None:
            self._ino.close()
            raise OSError(errno.ENOENT, "cannot watch the project root", self.root)
        self._add_below(self.root)

    @property
    def complete(self) -> bool:
        """Whether every directory is watched (none was left out at the watch limit)."""
        return not self._full

    def close(self) -> None:
        self._ino.close()

    # --- watches ---------------------------------------------------------------

    def _add(self, path: str) -> int | None:
        try:
            wd = int(self._ino.add_watch(path, CHANGES | _WATCH_FLAGS))
        except OSError as exc:
            if exc.errno == errno.ENOSPC and not self._full:
                self._full = True
                log.warning(
                    "the inotify watch limit is reached (fs.inotify.max_user_watches); "
                    "directories past it are not watched: stale files are still "
                    "caught when edited"
                )
            return None  # gone already, not a directory, or over the limit
        self._paths[wd] = path
        self._wds[path] = wd
        return wd

    def _add_below(self, top: str) -> None:
        """Watch every directory below ``top`` (which is watched already)."""
        stack = [top]
        while stack:
            here = stack.pop()
            try:
                with os.scandir(here) as it:
                    children = [e for e in it if e.is_dir(follow_symlinks=False)]
            except OSError:
                continue
            for entry in children:
                if self._skip(entry.name):
                    continue
                if self._add(entry.path) is not None:
                    stack.append(entry.path)

    def _forget(self, top: str) -> None:
        """Stop watching ``top`` and everything below it (moved away)."""
        prefix = top + os.sep
        for path in [p for p in self._wds if p == top or p.startswith(prefix)]:
            wd = self._wds.pop(path)
            self._paths.pop(wd, None)
            with contextlib.suppress(OSError):  # the kernel dropped it already
                self._ino.rm_watch(wd)

    # --- events --------------------------------------------------------------------

    def settle(self, timeout: float) -> bool:
        """Wait until every event queued before this call has been handled by the
        consumer of :meth:`changes`; False if ``timeout`` passed first.

        A command about to start must not be confined by masks computed
        before the change the last one made (a directory holding a secret
        renamed aside) reached the index.  Events leave the kernel's queue
        only once ``_busy`` is set, and it is cleared only when the consumer
        asks for more: a queue found empty, then ``_busy`` found clear,
        means all of them were handled.
        """
        end = time.monotonic() + timeout
        self._hurry.set()  # no debounce wait while a command waits
        try:
            while True:
                if self._queued() == 0 and not self._busy:
                    return True
                if time.monotonic() >= end:
                    return False
                time.sleep(0.0005)
        finally:
            self._hurry.clear()

    def _queued(self) -> int:
        """Bytes of events waiting in the kernel's queue; -1 if it cannot be asked."""
        size = array.array("i", [0])
        try:
            fcntl.ioctl(self._ino.fileno(), termios.FIONREAD, size, True)
        except OSError:
            return -1
        return size[0]

    def changes(
        self,
        stop: threading.Event,
        *,
        debounce: float = 0.05,
        idle: float = 0.2,
    ) -> Iterator[set[str] | None]:
        """Yield the set of paths changed since the last yield (never empty),
        or :data:`RESCAN`, until ``stop`` is set.

        Events are gathered for ``debounce`` seconds after the first one, so
        a burst of writes comes as one set; ``stop`` is looked at every
        ``idle`` seconds at least.
        """
        while not stop.is_set():
            # The consumer has handled the last yield: nothing is in hand.
            self._busy = False
            ready, _, _ = select.select([self._ino.fileno()], [], [], idle)
            if not ready:
                continue
            # Set before the events leave the kernel's queue (settle).
            self._busy = True
            events = self._ino.read(timeout=0)
            if not events:
                continue
            changed: set[str] = set()
            lost = False
            deadline = time.monotonic() + debounce
            while True:
                for event in events:
                    lost |= self._take(event, changed)
                left = deadline - time.monotonic()
                if left <= 0 or stop.is_set() or self._hurry.is_set():
                    break
                events = self._ino.read(timeout=max(int(left * 1000), 1))
            if lost:
                # Lost events may have been creations of directories, which
                # then have no watch: walk the tree again to add the missing
                # ones (a watch already there is kept as it is).
                self._add_below(self.root)
                yield RESCAN
            if changed:
                yield changed

    def _take(self, event: Any, changed: set[str]) -> bool:
        """Add what ``event`` (wd, mask, cookie, name) changed to ``changed``;
        True when events were lost."""
        wd: int = event.wd
        mask: int = event.mask
        name: str = event.name
        if mask & IN_Q_OVERFLOW:
            return True
        if mask & IN_IGNORED:  # the directory is gone, or was never ours
            path = self._paths.pop(wd, None)
            if path is not None and self._wds.get(path) == wd:
                del self._wds[path]
            return False
        here = self._paths.get(wd)
        if here is None:
            return False
        path = os.path.join(here, name) if name else here
        changed.add(path)
        if mask & IN_ISDIR and name:
            if mask & (IN_CREATE | IN_MOVED_TO):
                if not self._skip(name) and self._add(path) is not None:
                    self._add_below(path)
            elif mask & IN_MOVED_FROM:
                self._forget(path)
        return False
