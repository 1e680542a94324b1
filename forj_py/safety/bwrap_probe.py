"""The bubblewrap probe's run, in the background, with the standard library alone.

Whether bwrap can create the namespaces a command needs is known only by
running it, which takes 10-50 ms.  The worker starts the run first thing
(:func:`start`), while it imports everything else, and
:func:`forj_py.safety.commands.probe` reads the outcome when the worker is
built.  This module imports nothing of forj's, so starting it costs
nothing.  It starts before the configuration is read: when that says
``[tools.shell] sandbox = "none"``, the run (bwrap running ``true`` in a
read-only sandbox) is left unread.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import threading

PROBE_SECONDS = 10.0


def argv(path: str, *, sizes: bool = True) -> list[str]:
    """bwrap running ``true`` with every namespace a command gets, the root read-only.

    ``sizes``: with a size-capped tmpfs, as every command's are.  A bwrap
    older than 0.7, or one installed setuid, refuses ``--size``; the probe
    then runs again without it (see ``commands.probe``).
    """
    capped = ["--size", str(1 << 20), "--tmpfs", "/tmp"] if sizes else []  # noqa: S108
    return [
        path,
        "--unshare-all",
        "--die-with-parent",
        "--ro-bind",
        "/",
        "/",
        "--proc",
        "/proc",
        "--dev",
        "/dev",
        *capped,
        "true",
    ]


def find() -> str | None:
    """Where bwrap is, on Linux; None elsewhere or when it is not installed."""
    if not sys.platform.startswith("linux"):
        return None
    return shutil.which("bwrap")


def run(path: str, *, sizes: bool = True) -> subprocess.CompletedProcess[bytes] | Exception:
    """Run the probe now; an OSError or a timeout is returned, not raised."""
    try:
        return subprocess.run(
            argv(path, sizes=sizes),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=PROBE_SECONDS,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return exc


class Started:
    """A probe running on its own thread since :func:`start`."""

    def __init__(self) -> None:
        self.path = find()
        self._outcome: subprocess.CompletedProcess[bytes] | Exception | None = None
        self._done = threading.Event()
        if self.path is None:
            self._done.set()
        else:
            threading.Thread(
                target=self._run, args=(self.path,), name="forj-bwrap-probe", daemon=True
            ).start()

    def _run(self, path: str) -> None:
        try:
            self._outcome = run(path)
        finally:
            self._done.set()

    def outcome(self) -> subprocess.CompletedProcess[bytes] | Exception | None:
        """The run's result (waiting for it); None when there is no bwrap to run."""
        self._done.wait()
        return self._outcome


def start() -> Started:
    """Start the probe in the background."""
    return Started()
