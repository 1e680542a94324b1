"""``python -m forj_py sdk``: forj's tools as JSON lines, in the Tool Runtime SDK's envelopes.

One JSON object per line each way.  A client opens a session
(``SessionOpen``), sends ``ToolRequest`` envelopes naming it, and gets a
``ToolResponse`` for each, ``EventMessage`` envelopes for a call's streamed
output and for the session's metrics, ``Heartbeat`` envelopes while the
session is open, and an ``ErrorMessage`` for any line it cannot serve.

Each ToolRequest is one batch through the worker's own ``plan`` and
``execute``, so it meets exactly what a call from Emacs meets: schema
validation, the sandbox, permission rules and modes, the stale-file rule,
backups and the journal.  The envelopes have none for asking the user,
so a call that needs review is not run: its error names the ``[permissions]
allow`` rule that would let it run unasked.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Annotated, Any, BinaryIO, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from .. import __version__
from ..config import PERMISSION_MODES
from ..errors import ProtocolError
from ..protocol import ErrorCode, Event, PermissionMode
from ..service import Caller, Worker
from . import standalone

log = logging.getLogger(__name__)

PROTOCOL = "forj-sdk/1"

# A Heartbeat every 30 seconds: a client can tell a long call from a dead worker.
DEFAULT_HEARTBEAT_SECONDS = 30.0

# A line longer than this is refused unread (a file_write of a large file fits).
MAX_LINE_BYTES = 32 * 1024 * 1024

# Calls running or queued at once, over all sessions; more are refused until
# responses come back, so a flood of lines cannot pile up without bound.
MAX_IN_FLIGHT = 64
WORKERS = 4

MAX_SESSIONS = 64

# What an error message quotes of a bad line.
QUOTE_CHARS = 200

SessionName = Annotated[
    str, Field(min_length=1, max_length=100, pattern=r"^[A-Za-z0-9][A-Za-z0-9._:-]*$")
]
RequestId = Annotated[str, Field(min_length=1, max_length=200)]


# --- envelopes in ------------------------------------------------------------------


class _In(BaseModel):
    # A field the host does not know is a mistake the client should hear about.
    model_config = ConfigDict(extra="forbid")


class ToolRequest(_In):
    type: Literal["ToolRequest"]
    tool: str = Field(min_length=1, max_length=128)
    args: dict[str, Any] = Field(default_factory=dict)
    request_id: RequestId
    session_id: SessionName
    timestamp: float | None = None


class Heartbeat(_In):
    type: Literal["Heartbeat"]
    session_id: SessionName
    timestamp: float | None = None


class SessionOpen(_In):
    type: Literal["SessionOpen"]
    # Absent: the host makes one up.
    session_id: SessionName | None = None
    # The session's permission mode; absent: the user's configured one.
    permission_mode: PermissionMode | None = None
    request_id: RequestId | None = None
    timestamp: float | None = None


class SessionClose(_In):
    type: Literal["SessionClose"]
    session_id: SessionName
    request_id: RequestId | None = None
    timestamp: float | None = None


class MetricsRequest(_In):
    type: Literal["MetricsRequest"]
    session_id: SessionName
    request_id: RequestId | None = None
    timestamp: float | None = None


Incoming = ToolRequest | Heartbeat | SessionOpen | SessionClose | MetricsRequest

ENVELOPES: dict[str, type[Incoming]] = {
    "ToolRequest": ToolRequest,
    "Heartbeat": Heartbeat,
    "SessionOpen": SessionOpen,
    "SessionClose": SessionClose,
    "MetricsRequest": MetricsRequest,
}


@dataclass(frozen=True)
class LineError:
    """A line that is no envelope the host serves: the ErrorMessage it gets."""

    code: ErrorCode
    message: str
    recovery: list[str]
    request_id: str | None = None

    def wire(self) -> dict[str, Any]:
        return error_message(self.code, self.message, self.recovery, self.request_id)


def error_message(
    code: ErrorCode, message: str, recovery: list[str], request_id: str | None = None
) -> dict[str, Any]:
    return {
        "type": "ErrorMessage",
        "code": code.value,
        "message": message,
        "recovery": recovery,
        "request_id": request_id,
    }


def _quote(line: bytes | str) -> str:
    text = line if isinstance(line, str) else line.decode("utf-8", "replace")
    text = text.strip()
    return repr(text if len(text) <= QUOTE_CHARS else text[:QUOTE_CHARS] + "…")


_ONE_OBJECT = "Send one JSON object per line, ending in a newline"


def decode_line(line: bytes) -> Incoming | LineError | None:
    """One line of input as an envelope, or the error it earns; None for a blank line.

    Never raises: whatever the bytes, the caller gets something to answer with.
    """
    if len(line) > MAX_LINE_BYTES:
        return LineError(
            ErrorCode.VALIDATION_FAIL,
            f"The line is {len(line)} bytes, over the {MAX_LINE_BYTES}-byte limit; it was not read",
            ["Send smaller requests (write a large file in parts)"],
        )
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError as exc:
        return LineError(
            ErrorCode.VALIDATION_FAIL,
            f"The line is not UTF-8 (byte {exc.start}): {_quote(line)}",
            [_ONE_OBJECT + ", encoded as UTF-8"],
        )
    if not text.strip():
        return None
    try:
        value = json.loads(text)
    except (ValueError, RecursionError) as exc:
        return LineError(
            ErrorCode.VALIDATION_FAIL,
            f"The line is not JSON ({str(exc)[:200]}): {_quote(text)}",
            [_ONE_OBJECT + "; escape newlines inside strings as \\n"],
        )
    if not isinstance(value, dict):
        return LineError(
            ErrorCode.VALIDATION_FAIL,
            f"The line is JSON but not an object ({type(value).__name__}): {_quote(text)}",
            [_ONE_OBJECT + ' with a "type" field, e.g. {"type": "SessionOpen"}'],
        )
    rid = value.get("request_id")
    request_id = rid if isinstance(rid, str) and 0 < len(rid) <= 200 else None
    kind = value.get("type")
    model = ENVELOPES.get(kind) if isinstance(kind, str) else None
    if model is None:
        said = 'has no "type"' if kind is None else f"has the unknown type {_quote(str(kind))}"
        return LineError(
            ErrorCode.VALIDATION_FAIL,
            f"The envelope {said}; this host serves {', '.join(ENVELOPES)}",
            ['Set "type" to one of ' + ", ".join(ENVELOPES)],
            request_id,
        )
    try:
        return model.model_validate(value)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or 'envelope'}: {e['msg']}"
            for e in exc.errors()[:5]
        )
        recovery = [f"Fix the fields of the {kind} envelope and send it again"]
        if any(e["loc"][:1] == ("session_id",) for e in exc.errors()):
            recovery.append(
                'Open a session with {"type": "SessionOpen"} and send the session_id it '
                "returns with every request"
            )
        return LineError(
            ErrorCode.VALIDATION_FAIL, f"Invalid {kind}: {problems}", recovery, request_id
        )


# --- the host ------------------------------------------------------------------------


@dataclass
class SdkSession:
    session_id: str
    permission_mode: str | None
    opened_at: float
    in_flight: set[str] = field(default_factory=set)
    # Requests of one session run one after another, in the order sent: a
    # read and the edit after it must not race.
    queue: deque[ToolRequest] = field(default_factory=deque)
    draining: bool = False

    @property
    def chat(self) -> str:
        # Session grants and deduplication stay apart from every Emacs chat's.
        return f"sdk-{self.session_id}"


class SdkHost:
    """Serves decoded lines against one :class:`Worker`, writing envelopes to ``out``."""

    def __init__(
        self,
        worker: Worker,
        out: BinaryIO,
        heartbeat_seconds: float = DEFAULT_HEARTBEAT_SECONDS,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.worker = worker
        # This host's one connection (stdin and stdout): never the user.
        self.caller = Caller("sdk", f"sdk-{uuid.uuid4().hex[:12]}")
        self.out = out
        self.heartbeat_seconds = heartbeat_seconds
        self.clock = clock
        self.sessions: dict[str, SdkSession] = {}
        self._lock = threading.Lock()
        self._write_lock = threading.Lock()
        self._pool = ThreadPoolExecutor(max_workers=WORKERS, thread_name_prefix="forj-sdk")
        self._in_flight = 0
        self._stop = threading.Event()
        # Input ended: requests still queued are dropped, not run for nobody.
        self._closing = False
        self._beat = threading.Thread(target=self._heartbeats, name="forj-sdk-beat", daemon=True)

    # --- output -----------------------------------------------------------------------

    def write(self, message: dict[str, Any]) -> bool:
        """One envelope, one line; False when the client is gone."""
        try:
            text = json.dumps(message, ensure_ascii=False, separators=(",", ":"))
            data = text.encode("utf-8")
        except UnicodeEncodeError:  # a lone surrogate: ASCII escapes keep it exactly
            data = json.dumps(message, ensure_ascii=True, separators=(",", ":")).encode()
        with self._write_lock:
            try:
                self.out.write(data + b"\n")
                self.out.flush()
            except (OSError, ValueError):
                return False
        return True

    # --- input ------------------------------------------------------------------------

    def serve(self, inp: BinaryIO) -> None:
        """Read lines until end of input, then let running calls end (they are cancelled)."""
        self._beat.start()
        try:
            while True:
                line = inp.readline(MAX_LINE_BYTES + 1)
                if not line:
                    break
                if len(line) > MAX_LINE_BYTES and not line.endswith(b"\n"):
                    self._skip_rest(inp)
                self.handle_line(line)
        finally:
            with self._lock:
                self._closing = True
            self._stop.set()
            self.worker.cancel_all()
            self._pool.shutdown(wait=True)

    @staticmethod
    def _skip_rest(inp: BinaryIO) -> None:
        while True:
            chunk = inp.readline(1024 * 1024)
            if not chunk or chunk.endswith(b"\n"):
                return

    def handle_line(self, line: bytes) -> None:
        decoded = decode_line(line)
        if decoded is None:
            return
        if isinstance(decoded, LineError):
            log.warning("sdk: refused a line: %s", decoded.message[:300])
            self.write(decoded.wire())
            return
        try:
            self._dispatch(decoded)
        except Exception as exc:  # a bug here must cost one answer, never the host
            log.exception("sdk: serving %s failed", decoded.type)
            self.write(
                error_message(
                    ErrorCode.INTERNAL,
                    f"forj failed serving this {decoded.type} ({type(exc).__name__}: {exc})",
                    ["Send it again; if it fails again, report the host's log (stderr)"],
                    getattr(decoded, "request_id", None),
                )
            )

    def _dispatch(self, env: Incoming) -> None:
        if isinstance(env, SessionOpen):
            self._open(env)
            return
        session = self._session(env.session_id, getattr(env, "request_id", None))
        if session is None:
            return
        if isinstance(env, Heartbeat):
            return  # the client is alive; the host's own heartbeats keep their pace
        if isinstance(env, SessionClose):
            with self._lock:
                self.sessions.pop(session.session_id, None)
            # A session opened again under the same id starts with no reads.
            self.worker.forget_connection(self.caller.connection, session.chat)
            self.write(
                {
                    "type": "SessionClosed",
                    "session_id": session.session_id,
                    "request_id": env.request_id,
                    "metrics": self.worker.metrics({"session": session.chat})["session"],
                }
            )
            return
        if isinstance(env, MetricsRequest):
            self._metrics_event(session, env.request_id)
            return
        self._submit(session, env)

    def _open(self, env: SessionOpen) -> None:
        sid = env.session_id or f"sess-{uuid.uuid4().hex[:16]}"
        mode, note = self._mode(env.permission_mode)
        with self._lock:
            if sid in self.sessions:
                taken = True
            elif len(self.sessions) >= MAX_SESSIONS:
                taken = False
                sid = ""
            else:
                taken = False
                self.sessions[sid] = SdkSession(sid, mode, self.clock())
        if taken or not sid:
            self.write(
                error_message(
                    ErrorCode.VALIDATION_FAIL,
                    f"Session {sid!r} is open already"
                    if taken
                    else f"{MAX_SESSIONS} sessions are open, the most this host keeps",
                    ["Use the open session, or open one with another session_id"]
                    if taken
                    else ["Close a session with SessionClose first"],
                    env.request_id,
                )
            )
            return
        defs = self.worker.tool_definitions({"permission_mode": mode} if mode else {})
        self.write(
            {
                **({"mode_note": note} if note else {}),
                "type": "SessionOpened",
                "session_id": sid,
                "request_id": env.request_id,
                "protocol": PROTOCOL,
                "version": __version__,
                "root": self.worker.root,
                "permission_mode": defs["permission_mode"],
                "heartbeat_seconds": self.heartbeat_seconds,
                "tools": [
                    {"name": d["name"], "description": d["description"], "args": d["parameters"]}
                    for d in defs["tools"]
                ],
                "instructions": defs.get("instructions", ""),
            }
        )

    def _mode(self, requested: str | None) -> tuple[str | None, str | None]:
        """The session's mode: the one asked for, unless it is looser than the user's.

        The host is not the user: it may make a session stricter than the
        user's configured mode, never looser (that is the user's word alone).
        """
        configured = self.worker.consent.policy.mode
        if requested is None or requested not in PERMISSION_MODES:
            return None, None
        if PERMISSION_MODES.index(requested) <= PERMISSION_MODES.index(configured):
            return requested, None
        return None, (
            f"permission_mode {requested!r} is looser than the user's configured mode "
            f"{configured!r}; the session runs in {configured!r}. The user sets "
            "[permissions] mode in their own forj config"
        )

    def _session(self, sid: str, request_id: str | None) -> SdkSession | None:
        with self._lock:
            session = self.sessions.get(sid)
        if session is None:
            self.write(
                error_message(
                    ErrorCode.POLICY,
                    f"No open session {sid!r}: nothing was run",
                    [
                        'Open a session with {"type": "SessionOpen"} and use the '
                        "session_id of its SessionOpened reply",
                        "A session ends with SessionClose or when the host restarts",
                    ],
                    request_id,
                )
            )
        return session

    def _submit(self, session: SdkSession, req: ToolRequest) -> None:
        with self._lock:
            busy = req.request_id in session.in_flight
            full = self._in_flight >= MAX_IN_FLIGHT
            if not busy and not full:
                session.in_flight.add(req.request_id)
                self._in_flight += 1
        if busy or full:
            self.write(
                error_message(
                    ErrorCode.VALIDATION_FAIL,
                    f"request_id {req.request_id!r} is still running in this session"
                    if busy
                    else f"{MAX_IN_FLIGHT} requests are running or queued: this one was not run",
                    ["Give every request its own request_id"]
                    if busy
                    else ["Wait for ToolResponses before sending more requests"],
                    req.request_id,
                )
            )
            return
        with self._lock:
            session.queue.append(req)
            start = not session.draining
            session.draining = True
        if start:
            self._pool.submit(self._drain, session)

    def _drain(self, session: SdkSession) -> None:
        while True:
            with self._lock:
                if self._closing and session.queue:
                    dropped = [r.request_id for r in session.queue]
                    log.warning("sdk: input ended; requests never run: %s", ", ".join(dropped))
                    self._in_flight -= len(session.queue)
                    session.in_flight.difference_update(dropped)
                    session.queue.clear()
                if not session.queue:
                    session.draining = False
                    return
                req = session.queue.popleft()
            self._run_guarded(session, req)

    def _run_guarded(self, session: SdkSession, req: ToolRequest) -> None:
        try:
            self._run(session, req)
        except Exception as exc:
            log.exception("sdk: request %s failed", req.request_id)
            self.write(
                error_message(
                    ErrorCode.INTERNAL,
                    f"forj failed running {req.tool} ({type(exc).__name__}: {exc}); "
                    "the journal has what was received",
                    ["Check the files it touches before repeating it"],
                    req.request_id,
                )
            )
        finally:
            with self._lock:
                session.in_flight.discard(req.request_id)
                self._in_flight -= 1

    def _run(self, session: SdkSession, req: ToolRequest) -> None:
        started = time.monotonic()
        call_id = f"sdk-{uuid.uuid4().hex[:12]}"
        call = {"id": call_id, "name": req.tool, "args": req.args}
        body: dict[str, Any] = {"calls": [call], "session": session.chat}
        if session.permission_mode is not None:
            body["permission_mode"] = session.permission_mode
        try:
            plan = self.worker.plan(body, self.caller)
            item = plan["items"][0]
            denied = {}
            if item["disposition"] == "confirm":
                denied[call_id] = _cannot_ask(item)
            reply = self.worker.execute(
                {"batch_id": plan["batch_id"], "approved": [], "denied": denied},
                lambda event: self._event(session, req, event),
                self.caller,
            )
        except ProtocolError as exc:  # parse_only mode, or a bug: say so, never hang
            code = ErrorCode.VALIDATION_FAIL if exc.type == "bad-request" else ErrorCode.INTERNAL
            self.write(
                error_message(
                    code,
                    exc.message,
                    exc.recovery or ["Check the host's configuration"],
                    req.request_id,
                )
            )
            return
        result = reply["results"][0]
        ok = bool(result.get("ok"))
        error = result.get("error") if not ok else None
        sent = self.write(
            {
                "type": "ToolResponse",
                "ok": ok,
                "tool": req.tool,
                "request_id": req.request_id,
                "session_id": session.session_id,
                "duration_ms": round((time.monotonic() - started) * 1000),
                "data": result.get("result") if ok else None,
                "errors": [_error(error)] if isinstance(error, dict) else [],
            }
        )
        on_sent = getattr(reply, "on_sent", None)
        if sent and on_sent is not None:
            on_sent()  # the journal notes that the result reached the client
        self._metrics_event(session, req.request_id)

    def _event(self, session: SdkSession, req: ToolRequest, event: Event) -> None:
        names = {
            "started": "TaskStarted",
            "stdout": "TaskOutput",
            "stderr": "TaskOutput",
            "finished": "TaskFinished",
        }
        message: dict[str, Any] = {
            "type": "EventMessage",
            "event": names[event.kind],
            "request_id": req.request_id,
            "session_id": session.session_id,
            "tool": req.tool,
        }
        if event.kind in ("stdout", "stderr"):
            message["stream"] = event.kind
            message["data"] = event.data or ""
        if event.kind == "finished":
            message["ok"] = bool(event.ok)
        self.write(message)

    def _metrics_event(self, session: SdkSession, request_id: str | None) -> None:
        self.write(
            {
                "type": "EventMessage",
                "event": "Metrics",
                "request_id": request_id,
                "session_id": session.session_id,
                "metrics": self.worker.metrics({"session": session.chat})["session"],
            }
        )

    def _heartbeats(self) -> None:
        while not self._stop.wait(self.heartbeat_seconds):
            with self._lock:
                open_ids = list(self.sessions)
            for sid in open_ids:
                if not self.write(
                    {"type": "Heartbeat", "session_id": sid, "timestamp": int(self.clock())}
                ):
                    return


def _error(error: dict[str, Any]) -> dict[str, Any]:
    """A tool error in a ToolResponse: its canonical code first, then forj's own fields."""
    details = error.get("details") or {}
    return {"code": details.get("code", ErrorCode.INTERNAL.value), **error}


def _cannot_ask(item: dict[str, Any]) -> str:
    pattern = item.get("grant_pattern")
    rule = f' (this call: allow = ["{pattern}"])' if pattern else ""
    return (
        "nobody reviewed it: the SDK transport cannot ask the user. forj runs a call that "
        "needs review only when a [permissions] allow rule in the user's forj config covers "
        f"it{rule}, or from the Emacs chat, where the user reviews it. Tell the user what "
        "you wanted to do"
    )


# --- start-up ----------------------------------------------------------------------


def _args(argv: list[str]) -> argparse.Namespace:
    p = standalone.parser(
        "python -m forj_py sdk",
        "Serve forj's tools as JSON lines (the Tool Runtime SDK's envelopes) on stdio.",
    )
    p.add_argument(
        "--heartbeat-seconds",
        type=float,
        default=DEFAULT_HEARTBEAT_SECONDS,
        help="how often each open session gets a Heartbeat (default: 30)",
    )
    return p.parse_args(argv)


def main(argv: list[str]) -> int:
    args = _args(argv)
    standalone.log_to_stderr(args.log_level)
    if not 0.05 <= args.heartbeat_seconds <= 3600:
        return _fail("--heartbeat-seconds: give a number from 0.05 to 3600")
    try:
        found = standalone.setup(args)
    except standalone.StartError as exc:
        return _fail(str(exc))
    # The protocol owns stdin and stdout: keep private copies and point the
    # descriptors elsewhere, so nothing else can read a request or write a line.
    inp = os.fdopen(os.dup(0), "rb", buffering=1024 * 1024)
    out = os.fdopen(os.dup(1), "wb")
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    os.dup2(2, 1)
    try:
        with standalone.own_worker(found) as worker:
            SdkHost(worker, out, args.heartbeat_seconds).serve(inp)
    except standalone.StartError as exc:
        return _fail(str(exc))
    return 0


def _fail(message: str) -> int:
    print(f"forj sdk: {message}", file=sys.stderr, flush=True)
    return 2
