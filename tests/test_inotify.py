"""The Linux tree watcher: changes reported, reads not, new directories followed."""

from __future__ import annotations

import os
import shutil
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="inotify is Linux's")

from forj_py.system.inotify import RESCAN, TreeWatcher  # noqa: E402


class Collector:
    """Runs a watcher's ``changes`` on a thread and keeps what it yields."""

    def __init__(self, watcher: TreeWatcher) -> None:
        self.watcher = watcher
        self.stop = threading.Event()
        self.batches: list[set[str] | None] = []
        self._cond = threading.Condition()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        for batch in self.watcher.changes(self.stop, idle=0.05):
            with self._cond:
                self.batches.append(batch)
                self._cond.notify_all()

    def seen(self) -> set[str]:
        with self._cond:
            return {p for b in self.batches if b is not None for p in b}

    def mark(self) -> int:
        with self._cond:
            return len(self.batches)

    def wait_for(self, path: Path, timeout: float = 5.0, after: int = 0) -> None:
        """Until a batch yielded after the first ``after`` reports ``path``."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while str(path) not in {p for b in self.batches[after:] if b is not None for p in b}:
                left = deadline - time.monotonic()
                assert left > 0, f"{path} was never reported; saw {self.batches}"
                self._cond.wait(left)

    def close(self) -> None:
        self.stop.set()
        self.thread.join(5)
        self.watcher.close()


@pytest.fixture
def watched(tmp_path: Path) -> Iterator[tuple[Path, Collector]]:
    root = tmp_path / "p"
    (root / "src" / "deep").mkdir(parents=True)
    (root / ".git" / "objects").mkdir(parents=True)
    for n in range(50):
        (root / "src" / f"f{n}.py").write_text(f"x = {n}\n")
    collector = Collector(TreeWatcher(str(root), skip=lambda name: name == ".git"))
    try:
        yield root, collector
    finally:
        collector.close()


def test_writes_creations_deletions_and_moves_are_reported(
    watched: tuple[Path, Collector],
) -> None:
    root, seen = watched
    (root / "src" / "deep" / "new.py").write_text("new\n")
    seen.wait_for(root / "src" / "deep" / "new.py")
    with (root / "src" / "f1.py").open("a") as fh:  # written, kept open
        fh.write("y = 1\n")
        fh.flush()
        seen.wait_for(root / "src" / "f1.py")
    (root / "src" / "f2.py").unlink()
    seen.wait_for(root / "src" / "f2.py")
    os.rename(root / "src" / "f3.py", root / "src" / "renamed.py")
    seen.wait_for(root / "src" / "f3.py")
    seen.wait_for(root / "src" / "renamed.py")


def test_reading_files_wakes_nothing(watched: tuple[Path, Collector]) -> None:
    # What a search or a build does to most of a tree: open, read, close.
    root, seen = watched
    for _ in range(3):
        for path in sorted((root / "src").iterdir()):
            if path.is_file():
                path.read_bytes()
        os.listdir(root / "src")
    (root / "sentinel").write_text("done\n")
    seen.wait_for(root / "sentinel")
    assert seen.seen() == {str(root / "sentinel")}


def test_new_directories_are_watched_and_moved_ones_followed(
    watched: tuple[Path, Collector],
) -> None:
    root, seen = watched
    (root / "a" / "b").mkdir(parents=True)
    seen.wait_for(root / "a")
    time.sleep(0.2)  # the watches on a and a/b are in place once a is reported
    (root / "a" / "b" / "later.txt").write_text("x\n")
    seen.wait_for(root / "a" / "b" / "later.txt")
    # A directory moved within the tree is watched under its new name.
    os.rename(root / "a", root / "moved")
    seen.wait_for(root / "moved")
    time.sleep(0.2)
    (root / "moved" / "b" / "after.txt").write_text("y\n")
    seen.wait_for(root / "moved" / "b" / "after.txt")
    assert not any(p.startswith(str(root / "a") + os.sep) for p in seen.watcher._wds)
    # Moved out of the tree: forgotten.
    outside = root.parent / "outside"
    before = seen.mark()
    os.rename(root / "moved", outside)
    seen.wait_for(root / "moved", after=before)
    assert not any(p.startswith(str(root / "moved")) for p in seen.watcher._wds)
    shutil.rmtree(outside)


def test_inside_git_is_not_watched(watched: tuple[Path, Collector]) -> None:
    root, seen = watched
    assert str(root / ".git") not in seen.watcher._wds
    (root / ".git" / "objects" / "ab").write_text("blob\n")
    (root / "sentinel").write_text("done\n")
    seen.wait_for(root / "sentinel")
    assert not any("/.git/" in p for p in seen.seen())


def _overflowing(tmp_path: Path) -> tuple[Path, TreeWatcher]:
    """A watched tree given more events than the kernel queues, nobody reading."""
    root = tmp_path / "p"
    root.mkdir()
    limit = int(Path("/proc/sys/fs/inotify/max_queued_events").read_text())
    if limit > 200_000:
        pytest.skip(f"the kernel queues {limit} events; too many to overflow here")
    watcher = TreeWatcher(str(root))
    for n in range(limit // 2 + 100):  # each file: a creation and a close after writing
        (root / f"f{n}").write_bytes(b"")
    return root, watcher


def test_lost_events_are_said_so(tmp_path: Path) -> None:
    # The watcher yields RESCAN, so its user looks again instead of
    # trusting the gap.
    _, watcher = _overflowing(tmp_path)
    try:
        stop = threading.Event()
        batches = []
        for batch in watcher.changes(stop, idle=0.05):
            batches.append(batch)
            if batch is RESCAN or len(batches) > 50:
                break
        assert RESCAN in batches
    finally:
        watcher.close()


def test_directories_made_while_events_were_lost_are_watched_after(tmp_path: Path) -> None:
    # The queue overflows, then a directory is made: its creation is lost,
    # so it has no watch until the tree is walked again, which the RESCAN
    # does before the caller hears of it.
    root, watcher = _overflowing(tmp_path)
    try:
        (root / "late" / "deeper").mkdir(parents=True)
        stop = threading.Event()
        give_up = threading.Timer(20, stop.set)
        give_up.start()
        rescanned = False
        for batch in watcher.changes(stop, idle=0.05):
            if batch is RESCAN:
                rescanned = True
                break
        assert rescanned
        assert str(root / "late" / "deeper") in watcher._wds
        (root / "late" / "deeper" / ".env").write_text("x\n")
        secret = str(root / "late" / "deeper" / ".env")
        seen = False
        for batch in watcher.changes(stop, idle=0.05):
            if batch is not RESCAN and secret in batch:
                seen = True
                break
        give_up.cancel()
        assert seen
    finally:
        watcher.close()


def test_a_root_that_cannot_be_watched_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(OSError):
        TreeWatcher(str(tmp_path / "missing"))
