"""A small Python client for the worker, for scripts, tests and benchmarks.

Emacs speaks to the worker with ``elisp/forj-epc.el``; this is the same
protocol from Python, using the worker's own fast codec.  One reader thread
routes replies to waiting calls (by uid) and events to a callback.  Any
program can drive the worker with it::

    with WorkerProcess(root) as proc, Client(proc.port) as c:
        c.call("hello", {"token": proc.token})
        plan = c.call("plan", {"calls": [...]})

or, over the worker's own stdin and stdout (``--stdio``), perhaps through
ssh on another host::

    with StdioWorkerProcess(root) as proc, proc.client() as c:
        c.call("hello", {"token": proc.token})
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import secrets
import socket
import subprocess
import sys
import threading
from collections.abc import Callable
from concurrent.futures import Future
from pathlib import Path
from types import TracebackType
from typing import IO, Any

from . import sexp
from .sexp import Symbol


class RemoteError(Exception):
    """The worker answered with ``return-error`` (a JSON object) or ``epc-error``."""

    def __init__(self, kind: str, payload: Any) -> None:
        self.kind = kind
        self.payload = payload
        if isinstance(payload, str):
            with contextlib.suppress(json.JSONDecodeError):
                payload = json.loads(payload)
        self.error = payload if isinstance(payload, dict) else {"message": str(payload)}
        super().__init__(f"{kind}: {self.error.get('type', '')} {self.error.get('message', '')}")

    @property
    def type(self) -> str:
        return str(self.error.get("type", self.kind))


class ConnectionLost(Exception):
    pass


class Client:
    def __init__(
        self,
        port: int,
        host: str = "127.0.0.1",
        on_event: Callable[[dict[str, Any]], None] | None = None,
        timeout: float = 10.0,
        json_frames: bool = True,
        on_request: Callable[[str, Any], Any] | None = None,
        pipes: tuple[IO[bytes], IO[bytes]] | None = None,
        preamble: bytes | None = None,
    ) -> None:
        """Connect to a worker on ``host``:``port``, or over ``pipes``.

        ``pipes`` is (what the worker writes, what it reads): the stdout
        and stdin of a worker started with ``--stdio`` (``port`` is then
        ignored); closing the client closes the worker's stdin.
        ``preamble``, if given, is the line that precedes the frames: what
        comes before it (a login shell's chatter) is dropped, kept in
        :attr:`noise`.

        With ``json_frames`` (the default) the ``hello`` call asks for JSON
        frames (replies and events as raw JSON, see :mod:`.sexp`); without
        it the worker sends standard EPC frames only.  The reader handles
        both either way.  ``on_request(method, body)``, if given, answers
        the worker's own calls other than events (a ``review``, as Emacs
        answers it); its value goes back as JSON.  Without it they are
        answered with nil.
        """
        self.sock: socket.socket | None = None
        self._wfile: IO[bytes] | None = None
        if pipes is not None:
            self._rfile: IO[bytes] = pipes[0]
            self._wfile = pipes[1]
        else:
            self.sock = socket.create_connection((host, port), timeout=timeout)
            self.sock.settimeout(None)
            self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self._rfile = self.sock.makefile("rb")
        self._uids = itertools.count(1)
        self._pending: dict[int, Future[Any]] = {}
        self._lock = threading.Lock()
        self._wlock = threading.Lock()
        self.on_event = on_event
        self.on_request = on_request
        self.json_frames = json_frames
        self.closed = threading.Event()
        self.preamble = preamble
        self.noise = b""
        self._reader = threading.Thread(target=self._read_loop, name="forj-client", daemon=True)
        self._reader.start()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self.sock is None:
            with contextlib.suppress(OSError), self._wlock:
                assert self._wfile is not None
                self._wfile.close()  # the worker's end of file: it stops
            self._reader.join(timeout=5)
            return
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)
        self._reader.join(timeout=2)
        self._rfile.close()
        self.sock.close()

    def send_raw(self, data: bytes) -> None:
        with self._wlock:
            if self.sock is not None:
                self.sock.sendall(data)
            else:
                assert self._wfile is not None
                self._wfile.write(data)
                self._wfile.flush()

    def call_async(self, method: str, body: Any) -> Future[Any]:
        uid = next(self._uids)
        fut: Future[Any] = Future()
        with self._lock:
            if self.closed.is_set():
                fut.set_exception(ConnectionLost("connection closed"))
                return fut
            self._pending[uid] = fut
        if method == "hello" and self.json_frames:
            body = _offer_json_frames(body)
        self.send_raw(sexp.frame([Symbol("call"), uid, Symbol(method), [json.dumps(body)]]))
        return fut

    def call(self, method: str, body: Any = None, timeout: float | None = 30.0) -> Any:
        """Call ``method`` with ``body`` (JSON-able) and return its decoded JSON reply."""
        reply = self.call_async(method, {} if body is None else body).result(timeout)
        return json.loads(reply)

    def _json_frame(self, header: Any, body: bytes) -> None:
        """Handle a JSON frame: ``(return-json UID)`` or ``(event-json)``."""
        kind = str(header[0]) if isinstance(header, list) and header else ""
        if kind == "event-json":
            if self.on_event is not None:
                self.on_event(_json_event(header, body))
            return
        if kind != "return-json" or len(header) != 2 or not isinstance(header[1], int):
            raise sexp.SexpError(f"unknown JSON frame {header!r}")
        with self._lock:
            fut = self._pending.pop(header[1], None)
        if fut is not None:
            # The same JSON text a standard frame carries, so callers see no difference.
            fut.set_result(body.decode("utf-8"))

    def _skip_preamble(self) -> bool:
        """Read up to the end of :attr:`preamble`; False if the pipe ended first."""
        assert self.preamble is not None
        seen = b""
        while not seen.endswith(self.preamble):
            byte = self._rfile.read(1)
            if not byte or len(seen) > 1 << 20:
                return False
            seen += byte
        self.noise = seen[: -len(self.preamble)]
        return True

    def _read_loop(self) -> None:
        try:
            if self.preamble is not None and not self._skip_preamble():
                return
            while True:
                head = self._rfile.read(6)
                if len(head) < 6:
                    break
                data = self._rfile.read(sexp.parse_header(head))
                split = sexp.split_json_frame(data)
                if split is not None:
                    self._json_frame(*split)
                    continue
                msg = sexp.loads(data.decode("utf-8"))
                kind, uid = str(msg[0]), msg[1]
                if kind == "call":
                    method = str(msg[2])
                    if method == "event" and self.on_event is not None:
                        self.on_event(json.loads(msg[3][0]))
                    if method != "event" and self.on_request is not None:
                        # Answered on a thread of its own: the answer may wait
                        # on replies this loop has yet to read.
                        threading.Thread(
                            target=self._answer, args=(uid, method, msg[3]), daemon=True
                        ).start()
                        continue
                    self.send_raw(sexp.frame([Symbol("return"), uid, []]))
                    continue
                if not isinstance(uid, int):
                    continue  # an error about a message that had no readable uid
                with self._lock:
                    fut = self._pending.pop(uid, None)
                if fut is None:
                    continue
                if kind == "return":
                    fut.set_result(msg[2])
                else:
                    fut.set_exception(RemoteError(kind, msg[2] if len(msg) > 2 else None))
        except (OSError, ValueError):
            pass
        finally:
            self.closed.set()
            with self._lock:
                pending, self._pending = self._pending, {}
            for fut in pending.values():
                fut.set_exception(ConnectionLost("the worker closed the connection"))

    def _answer(self, uid: Any, method: str, args: Any) -> None:
        assert self.on_request is not None
        body = json.loads(args[0]) if isinstance(args, list) and args else None
        try:
            answer = json.dumps(self.on_request(method, body))
        except Exception as exc:
            frame = sexp.frame([Symbol("return-error"), uid, f"{type(exc).__name__}: {exc}"])
        else:
            frame = sexp.frame([Symbol("return"), uid, answer])
        with contextlib.suppress(OSError):
            self.send_raw(frame)


def _json_event(header: list[Any], body: bytes) -> dict[str, Any]:
    """The event of an ``(event-json)`` or ``(event-json N [ascii])`` frame's body."""
    if len(header) == 1:
        event: dict[str, Any] = json.loads(body)
        return event
    size = header[1]
    if len(header) > 3 or not isinstance(size, int) or not 0 <= size <= len(body) - 1:
        raise sexp.SexpError(f"bad event frame header {header!r}")
    end = len(body) - 1  # the frame's final newline
    event = json.loads(body[: end - size])
    event["data"] = body[end - size : end].decode("utf-8")
    return event


def _offer_json_frames(body: Any) -> Any:
    """``body`` of a hello call, with ``client.frames`` asking for JSON frames."""
    if not isinstance(body, dict):
        return body
    client = body.get("client")
    client = dict(client) if isinstance(client, dict) else {}
    frames = client.get("frames")
    frames = list(frames) if isinstance(frames, list) else []
    if sexp.JSON_FRAMES not in frames:
        frames.append(sexp.JSON_FRAMES)
    return {**body, "client": {**client, "frames": frames}}


class WorkerProcess:
    """Start ``python -m forj_py`` for ``root`` with a fresh token; stop it on exit.

    The token goes as Emacs sends it, on the first line of stdin
    (``--token-stdin``), when stdin is a pipe; else (or with
    ``token_in_env``) in ``FORJ_TOKEN``, and the worker starts itself
    again without it.
    """

    def __init__(
        self,
        root: str | Path,
        *,
        config: str | Path | None = None,
        state_dir: str | Path | None = None,
        settings: str | None = None,
        python: str = sys.executable,
        env: dict[str, str] | None = None,
        stdin: int | None = subprocess.PIPE,
        token_in_env: bool = False,
    ) -> None:
        self.token = secrets.token_hex(16)
        full_env = dict(os.environ if env is None else env)
        on_stdin = stdin == subprocess.PIPE and not token_in_env
        if not on_stdin:
            full_env["FORJ_TOKEN"] = self.token
        cmd = [python, "-m", "forj_py", "--root", str(root)]
        if on_stdin:
            cmd.append("--token-stdin")
        if config is not None:
            cmd += ["--config", str(config)]
        if state_dir is not None:
            cmd += ["--state-dir", str(state_dir)]
        if settings is not None:
            cmd += ["--settings", settings]
        self.proc = subprocess.Popen(
            cmd,
            stdin=stdin,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=full_env,
        )
        if on_stdin:
            assert self.proc.stdin is not None
            self.proc.stdin.write(f"{self.token}\n".encode())
            self.proc.stdin.flush()
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line.strip().isdigit():
            _, err = self.proc.communicate(timeout=10)
            raise RuntimeError(f"worker did not start: {err.decode(errors='replace')}")
        self.port = int(line)

    def __enter__(self) -> WorkerProcess:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def stop(self, timeout: float = 5.0) -> int:
        if self.proc.stdin is not None:
            self.proc.stdin.close()  # the worker stops when its stdin closes
        if self.proc.poll() is None:
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        for stream in (self.proc.stdout, self.proc.stderr):
            if stream is not None:
                stream.close()
        return int(self.proc.returncode)


class StdioWorkerProcess:
    """Start ``python -m forj_py --stdio`` for ``root``; :meth:`client` speaks to it.

    ``launcher`` goes before the command: ``["ssh", "host"]`` starts the
    worker on another host, the arguments then joined into one command line
    for its shell (each quoted).  The token goes as the first line of
    stdin, as Emacs sends it; the frames follow on the same pipe.
    """

    def __init__(
        self,
        root: str | Path,
        *,
        python: str = sys.executable,
        launcher: list[str] | None = None,
        state_dir: str | Path | None = None,
        env: dict[str, str] | None = None,
        extra: list[str] | None = None,
    ) -> None:
        self.token = secrets.token_hex(16)
        cmd = [python, "-m", "forj_py", "--stdio", "--root", str(root)]
        if state_dir is not None:
            cmd += ["--state-dir", str(state_dir)]
        cmd += extra or []
        if launcher:
            import shlex

            cmd = [*launcher, " ".join(shlex.quote(a) for a in cmd)]
        self.proc = subprocess.Popen(
            cmd,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=dict(os.environ if env is None else env),
        )
        assert self.proc.stdin is not None
        self.proc.stdin.write(f"{self.token}\n".encode())
        self.proc.stdin.flush()

    def client(self, **kwargs: Any) -> Client:
        """A client on the worker's pipes (one only: the pipes are its)."""
        assert self.proc.stdout is not None and self.proc.stdin is not None
        from .stdio import FRAMES_FOLLOW

        return Client(
            0, pipes=(self.proc.stdout, self.proc.stdin), preamble=FRAMES_FOLLOW, **kwargs
        )

    def __enter__(self) -> StdioWorkerProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self, timeout: float = 5.0) -> int:
        if self.proc.stdin is not None:
            with contextlib.suppress(OSError):
                self.proc.stdin.close()  # the worker stops at its end of file
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        for stream in (self.proc.stdout, self.proc.stderr):
            if stream is not None:
                stream.close()
        return int(self.proc.returncode)
