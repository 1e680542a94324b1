"""Start the worker: ``python -m forj_py --root DIR``.

(``python -m forj_py --stdio --root DIR`` serves the same methods on its
own stdin and stdout instead of a port, for Emacs on another host; see
``transport/stdio.py``.  ``python -m forj_py mcp --root DIR`` serves the same tools over MCP on
stdio instead; see ``transport/mcp.py``; ``python -m forj_py sdk --root DIR``
serves them as JSON lines in the Tool Runtime SDK's envelopes, see
``transport/sdk.py``.)

Takes the token from the first line of stdin (``--token-stdin``, as Emacs
starts it) or from ``FORJ_TOKEN``.  A worker started with the token or any
other secret in its environment first starts itself again without them
(``safety/secretenv.py``): nothing secret stays in the environment it
runs with, which ``/proc/<pid>/environ`` shows.  Then it loads the configuration,
becomes the child subreaper of the commands it runs (Linux),
opens the journal, listens on 127.0.0.1 and prints the port as the first
line of stdout.  It serves until ``shutdown``, until its stdin closes, or
until its parent dies: the worker never outlives the Emacs that started it.

Exit codes: 0 after a clean stop, 2 when it cannot start (the reason is on
stderr, one line per problem).
"""

from __future__ import annotations

import argparse
import ctypes
import logging
import os
import signal
import stat
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from . import __version__
from .safety import bwrap_probe, secretenv

if TYPE_CHECKING:
    from .service import Worker
    from .transport.server import WorkerServer

log = logging.getLogger("forj_py")

PARENT_POLL_SECONDS = 0.5
# How long housekeeping waits for the first hello before starting anyway.
HOUSEKEEPING_DELAY_SECONDS = 3.0


def _args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m forj_py", description=__doc__.splitlines()[0])
    p.add_argument("--root", required=True, help="the project root every path is confined to")
    p.add_argument("--config", help="the user's config file (default: $FORJ_CONFIG or XDG)")
    p.add_argument("--state-dir", help="where the journal lives (default: $FORJ_STATE_DIR or XDG)")
    p.add_argument(
        "--settings",
        help="the editor's options as JSON, [{key, value, option}]; they count as the "
        "user's config file and override its keys",
    )
    p.add_argument(
        "--log-level",
        default=os.environ.get("FORJ_LOG_LEVEL", "WARNING"),
        choices=["DEBUG", "INFO", "WARNING", "ERROR"],
    )
    p.add_argument(
        "--token-stdin",
        action="store_true",
        help="read the token from the first line of stdin instead of $FORJ_TOKEN",
    )
    p.add_argument(
        "--stdio",
        action="store_true",
        help="serve on stdin and stdout instead of a loopback port (implies --token-stdin)",
    )
    p.add_argument("--version", action="version", version=f"forj worker {__version__}")
    return p.parse_args(argv)


def _fail(message: str) -> int:
    print(f"forj worker: {message}", file=sys.stderr, flush=True)
    return 2


def main(argv: list[str] | None = None) -> int:
    """Serve; ``argv`` None means this is the program (``python -m forj_py``, ``forj-worker``)."""
    if argv is None:
        # Only the program itself may start again in its own place; a test
        # that calls main() in its own process only has os.environ cleaned.
        secretenv.allow_restart()
        argv = sys.argv[1:]
    secretenv.receive()
    # Before anything else is imported: a restart costs one interpreter start.
    secretenv.enforce(secretenv.BUILTIN_ENV_DENYLIST)
    if argv[:1] == ["mcp"]:
        # Imported here: the MCP SDK is an optional extra, and the EPC worker
        # must not pay for importing it.
        try:
            from .transport.mcp import main as mcp_main
        except ImportError as exc:
            return _fail(f"mcp: the MCP SDK is not installed ({exc}); pip install 'forj[mcp]'")
        return mcp_main(argv[1:])
    if argv[:1] == ["sdk"]:
        from .transport.sdk import main as sdk_main

        return sdk_main(argv[1:])
    args = _args(argv)
    logging.basicConfig(
        level=args.log_level,
        stream=sys.stderr,
        format="%(asctime)s %(name)s %(levelname)s %(message)s",
    )
    if args.stdio:
        _keep_others_out()
    # Read once: a restart hands it over with the rest (stdin has moved on).
    if (args.token_stdin or args.stdio) and not secretenv.has_token():
        secretenv.keep_token(_read_token_line())
    token = secretenv.take_token()
    if not token:
        return _fail(
            "no token on stdin's first line"
            if args.token_stdin or args.stdio
            else "FORJ_TOKEN is not set; the worker will not serve without a token"
        )
    root = Path(args.root).expanduser()
    if not root.is_dir():
        return _fail(f"--root {args.root}: not a directory")
    # The sandbox probe runs bwrap (10-50 ms): started now, it runs while the
    # worker imports the rest of itself, which is why those imports are here.
    bwrap = bwrap_probe.start()
    from .config import ConfigError, load, parse_settings
    from .service import Worker
    from .store.journal import Journal, JournalError, default_state_dir
    from .system import process
    from .tools import builtin_registry
    from .transport import rendezvous
    from .transport.server import ForjServer

    try:
        settings = parse_settings(args.settings) if args.settings else []
        loaded = load(root, args.config, settings)
    except ConfigError as exc:
        return _fail(f"configuration error:\n{exc}")
    # Names the configuration adds to the denylist: a second restart, after
    # the sandbox probe (a child of this process) has finished.
    secretenv.keep_token(token)
    secretenv.enforce(
        [*secretenv.BUILTIN_ENV_DENYLIST, *loaded.config.tools.environment.denylist],
        before_restart=bwrap.outcome,
    )
    token = secretenv.take_token()
    state_dir = Path(args.state_dir).expanduser() if args.state_dir else default_state_dir()
    try:
        journal = Journal(state_dir / "journal.sqlite3")
    except JournalError as exc:
        return _fail(str(exc))
    for warning in loaded.warnings:
        log.warning("%s", warning)
    # Orphans of the commands it runs are re-parented to the worker and reaped
    # here (Linux); from the main thread, before any command starts.
    if process.become_subreaper():
        process.start_reaper()
    try:
        worker = Worker(root, loaded, builtin_registry(), journal, state_dir, bwrap=bwrap)
    except ConfigError as exc:  # a permission pattern the tools cannot use
        return _fail(f"configuration error:\n{exc}")
    server: WorkerServer
    meeting = None
    if args.stdio:
        from .transport.stdio import StdioServer

        # Takes stdin and stdout for its frames; its end of file stops it.
        server = StdioServer(worker, token)
    else:
        server = ForjServer(worker, token)
        # forj_py mcp on this project finds this worker through a private file.
        try:
            meeting = rendezvous.publish(state_dir, worker.root, server.port)
            server.mcp_secret = meeting.secret
        except OSError as exc:
            log.warning("no rendezvous for MCP servers: %s", exc)
    stop = server.stop
    _watch_parent(stop)
    if not args.stdio:
        _watch_stdin(stop)
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, lambda *_: threading.Thread(target=stop, daemon=True).start())
    if isinstance(server, ForjServer):
        sys.stdout.write(f"{server.port}\n")
        sys.stdout.flush()
    threading.Thread(
        target=_housekeeping, args=(worker, server), name="forj-housekeeping", daemon=True
    ).start()
    try:
        server.serve_forever(poll_interval=0.2)
    finally:
        if meeting is not None:
            rendezvous.withdraw(meeting)
        server.stopping.set()
        worker.watcher.stop()
        worker.cancel_all()
        worker.outside.close()
        worker.commands.close()
        server.server_close()
        # A reply already sent is followed by the journal's note that it reached
        # the client; closing the journal under it would make the next worker
        # offer results the client has.  Cancelled calls end within this.
        server.wait_idle(STOP_WAIT_SECONDS)
        journal.close()
    return 0


MAX_TOKEN_LINE = 256
# How long a stopping worker waits for the requests it is still answering.
STOP_WAIT_SECONDS = 5.0


def _read_token_line() -> str:
    """The first line of stdin, read a byte at a time: the rest is the stdin watch's."""
    line = b""
    while len(line) <= MAX_TOKEN_LINE:
        try:
            byte = os.read(0, 1)
        except OSError:
            return ""
        if not byte or byte == b"\n":
            break
        line += byte
    return line.decode("ascii", "replace").strip()


def _housekeeping(worker: Worker, server: WorkerServer) -> None:
    """Start the file watcher and the command sandbox's index, prune old backups.

    Only after the first ``hello`` is answered (or a few seconds without
    one): no call can come before it, and until then these threads would
    only compete with it for the interpreter.
    """
    worker.greeted.wait(HOUSEKEEPING_DELAY_SECONDS)
    if server.stopping.is_set():
        return
    worker.commands.start()
    worker.watcher.start()
    worker.backups.prune()


def _keep_others_out() -> None:
    """Let no other process of the user open this one's descriptors through /proc.

    A stdio worker's frames are its pipes, and once ``hello`` has passed
    whatever is written into them is an authenticated call (or, the other
    way, a reply Emacs believes).  ``/proc/<pid>/fd/N`` lets any process
    of the same user open those pipes: another login's shell, or a
    command the user let run outside the sandbox.  A process that is not
    dumpable has its ``/proc/<pid>`` entries owned by root, so they
    cannot (nor read its memory or environment).  Children get the
    flag back at ``execve``, so the commands it runs are unaffected.  Set
    again after each restart, which clears it; before the token is read.
    """
    if not sys.platform.startswith("linux"):
        return
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(4, 0, 0, 0, 0) != 0:  # PR_SET_DUMPABLE
            log.warning("cannot make the worker undumpable: errno %d", ctypes.get_errno())
    except (OSError, AttributeError):
        log.warning("cannot make the worker undumpable: no prctl")


def _watch_parent(stop: Callable[[], None]) -> None:
    """Stop when the parent dies: PR_SET_PDEATHSIG on Linux, polling everywhere."""
    parent = os.getppid()
    if sys.platform.startswith("linux"):
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(1, signal.SIGTERM, 0, 0, 0)  # PR_SET_PDEATHSIG
        except (OSError, AttributeError):
            pass

    def poll() -> None:
        while True:
            if os.getppid() != parent:
                log.warning("parent %d is gone; stopping", parent)
                stop()
                return
            time.sleep(PARENT_POLL_SECONDS)

    threading.Thread(target=poll, name="forj-parent-watch", daemon=True).start()


def _watch_stdin(stop: Callable[[], None]) -> None:
    """Stop when stdin reaches end of file, if stdin is a pipe, socket or terminal.

    Emacs holds the write end of the pipe; when Emacs goes, so does the pipe.
    A stdin of /dev/null or a plain file would end at once, so it is not watched.
    """
    try:
        mode = os.fstat(0).st_mode
    except OSError:
        return
    if not (stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode) or os.isatty(0)):
        return

    def watch() -> None:
        try:
            while os.read(0, 65536):
                pass
        except OSError:
            pass
        log.info("stdin closed; stopping")
        stop()

    threading.Thread(target=watch, name="forj-stdin-watch", daemon=True).start()


if __name__ == "__main__":
    sys.exit(main())
