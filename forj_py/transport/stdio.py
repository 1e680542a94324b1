"""The EPC transport on the worker's own stdin and stdout: one connection, its parent's.

``python -m forj_py --stdio --root DIR`` serves exactly what the loopback
socket serves (:mod:`.server`), in the same frames, but on the pipes it
was started with: Emacs starts it through TRAMP on another host (``ssh
host python -m forj_py --stdio ...``) and speaks EPC over the process's
own pipe, so no port is opened on either machine and nothing but the
connection TRAMP already makes is needed.

Who can talk to it: only whoever holds the other ends of its stdin and
stdout, which is the process that started it (over ssh, the user's Emacs
through their own ssh session).  The authentication is still the
socket's, for the same behaviour on both: the first line of stdin is the
token, and until ``hello`` proves it every method answers
``unauthenticated``; a wrong token ends the worker.  There is no
rendezvous, so forj's MCP server on that host cannot join this worker.

The frames own the two descriptors.  Before serving, the worker moves
them to private descriptors (not inherited by the commands it runs) and
points descriptor 0 at ``/dev/null`` and descriptor 1 at stderr: a
stray ``print`` or a child process that writes to its inherited stdout
lands in the log instead of in the middle of a frame, and no child can
read the frames meant for the worker.  End of file on stdin (the
connection dropped, Emacs went away) stops the worker like ``shutdown``.

What the remote login printed before the worker started (a ``~/.bashrc``
that echoes, a ``motd`` script run for every shell) arrives on the same
pipe ahead of the frames.  The worker's first bytes are therefore
:data:`FRAMES_FOLLOW`, a line no frame header can look like, and the
other end drops everything up to and including it.
"""

from __future__ import annotations

import io
import logging
import os
import threading
from typing import TYPE_CHECKING

from .server import ForjHandler, WorkerServer

if TYPE_CHECKING:
    from ..service import Worker

log = logging.getLogger(__name__)

# The first line a stdio worker writes; whatever came before it on the pipe
# was the login shell's, not the worker's.  Emacs (forj-epc.el) knows it too.
FRAMES_FOLLOW = b"\nforj: frames follow\n"


class StdioConnection(ForjHandler):
    """The one connection of a stdio worker: frames in on ``rfile``, out on ``wfile``."""

    # socketserver's constructor runs setup, handle and finish at once; this
    # one only sets up, and the server runs handle on a thread of its own.
    def __init__(
        self, server: StdioServer, rfile: io.BufferedReader, wfile: io.BufferedWriter
    ) -> None:
        self.server = server
        self.rfile = rfile
        self.wfile = wfile
        self.request = None
        self.client_address = ("stdio", 0)
        self.closed = threading.Event()
        self.start_connection()

    def _write(self, data: bytes) -> bool:
        # A buffered pipe: each frame is written whole and flushed at once,
        # under the same lock as on a socket, so frames never interleave.
        with self.write_lock:
            try:
                self.wfile.write(data)
                self.wfile.flush()
            except (OSError, ValueError):
                log.debug("dropping a message: stdout is closed")
                return False
        return True

    def close(self) -> None:
        """End the connection, and with it the worker (it has no other)."""
        if self.closed.is_set():
            return
        self.closed.set()
        threading.Thread(target=self.server.stop, name="forj-stdio-close", daemon=True).start()


class StdioServer(WorkerServer):
    """Serve the worker's methods on stdin and stdout until either ends or ``shutdown``."""

    def __init__(self, worker: Worker, token: str, stdin_fd: int = 0, stdout_fd: int = 1) -> None:
        super().__init__(worker, token)
        rfile, wfile = take_stdio(stdin_fd, stdout_fd)
        self.connection = StdioConnection(self, rfile, wfile)
        self.connection._write(FRAMES_FOLLOW)
        self._ended = threading.Event()

    def serve_forever(self, poll_interval: float = 0.5) -> None:
        """Read frames until end of file, the token is refused, or :meth:`stop`.

        Frames are read on a thread of their own: a read blocked on the pipe
        cannot be interrupted, and the worker must still stop when asked.
        """
        reader = threading.Thread(target=self._read, name="forj-stdio", daemon=True)
        reader.start()
        while not self._ended.wait(poll_interval):
            pass

    def _read(self) -> None:
        try:
            self.connection.handle()
        finally:
            log.info("stdin closed; stopping")
            self._ended.set()

    def end_serving(self) -> None:
        self._ended.set()


def take_stdio(
    stdin_fd: int = 0, stdout_fd: int = 1
) -> tuple[io.BufferedReader, io.BufferedWriter]:
    """The frames' own copies of stdin and stdout; the originals made harmless.

    Descriptors from ``os.dup`` are not inheritable, so no command gets
    them; descriptor 0 becomes ``/dev/null`` and descriptor 1 a copy of
    stderr for everything else in the process and its children.
    """
    frames_in = os.dup(stdin_fd)
    frames_out = os.dup(stdout_fd)
    null = os.open(os.devnull, os.O_RDWR)
    try:
        os.dup2(null, stdin_fd)
        try:
            os.dup2(2, stdout_fd)
        except OSError:  # no stderr: then what goes to stdout goes nowhere
            os.dup2(null, stdout_fd)
    finally:
        os.close(null)
    return (
        io.BufferedReader(io.FileIO(frames_in, "rb"), 65536),
        io.BufferedWriter(io.FileIO(frames_out, "wb"), 65536),
    )
