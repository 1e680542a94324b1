"""The EPC transport: the worker's methods on one loopback socket.

Speaks EPC (what Emacs' ``epc.el`` speaks) on the standard library's
threaded TCP server, without the ``epc`` package, for three reasons (and
because importing it, with the XML-RPC and HTTP modules it pulls in, would
slow the worker's start):

- **Replies never interleave.**  python-epc's threaded handler lets every
  thread write to the socket unlocked, so two large replies can mix their
  bytes.  Here every frame is written whole under one lock per connection.
- **Fast codec.**  Messages are read and printed with :mod:`forj_py.transport.sexp`
  instead of ``sexpdata``, which is two orders of magnitude slower on the
  megabyte-sized JSON texts results can be.
- **Authentication first.**  Until a connection has called ``hello`` with
  the token from ``FORJ_TOKEN``, every method answers ``unauthenticated``;
  a wrong token closes the connection.

Each method takes one JSON text and returns one JSON text.  A request the
worker cannot serve is answered with EPC's ``return-error`` carrying a JSON
object ``{type, message, recovery}``.  ``hello``, ``ping``, ``cancel``,
``tool_definitions`` and ``shutdown`` are answered on the connection's own
thread, so a ``cancel`` is never stuck behind the ``execute`` it cancels;
``plan`` and ``execute`` run on a thread pool.  Nothing received is ever
evaluated: the reader builds lists, strings, numbers and symbols, and a
method name is only looked up in a fixed table.
"""

from __future__ import annotations

import contextlib
import functools
import hmac
import itertools
import json
import logging
import secrets
import socket
import socketserver
import sys
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from typing import Any, Literal

from ..config import PERMISSION_MODES
from ..errors import ProtocolError
from ..output import sanitize_value
from ..protocol import Event, HelloRequest
from ..service import Caller, Encoded, Worker, parse_request
from . import sexp
from .review import review_in_emacs
from .sexp import Symbol

log = logging.getLogger(__name__)

POOL_THREADS = 8

# Orders connections, so the newest Emacs connection answers reviews.
_SERIALS = itertools.count(1)


# After a reply this large (a listing of 100,000 files is ~7 MB of JSON, and
# many times that as Python objects on the way) the freed memory is handed
# back to the system: glibc keeps what a pool thread freed in that thread's
# arena, and a worker that once listed a big tree would hold it for good.
LARGE_REPLY_CHARS = 1 << 20


def give_back_memory() -> None:
    """Return freed heap memory to the system where the C library can (glibc)."""
    trim = _malloc_trim()
    if trim is not None:
        trim(0)


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    if sys.platform != "linux":
        return None
    try:
        import ctypes

        libc = ctypes.CDLL(None)
        trim: Callable[[int], int] = libc.malloc_trim
    except (OSError, AttributeError):  # not glibc (musl has no malloc_trim)
        return None
    return trim


@dataclass(frozen=True)
class Method:
    func: Callable[[ForjHandler, Any], Any]
    inline: bool  # answered on the connection's thread: quick, never blocks
    doc: str
    # Waits on a person (a review in Emacs): a thread of its own, so pending
    # reviews never hold the pool's threads that plan and execute.
    waits: bool = False


def _hello(handler: ForjHandler, body: Any) -> Any:
    req = parse_request(HelloRequest, body)
    offered = req.token.encode("utf-8", "surrogatepass")
    secret = handler.server.mcp_secret
    if secret and hmac.compare_digest(offered, secret.encode("utf-8")):
        # forj's MCP server, proving the rendezvous secret: it may plan and
        # execute, and ask the user's Emacs to review its calls.
        handler.role = "mcp"
        handler.mcp_session = f"mcp-{secrets.token_hex(8)}"
    elif not hmac.compare_digest(offered, handler.server.token.encode("utf-8")):
        handler.reject_after_reply = True
        raise ProtocolError(
            "unauthenticated",
            "wrong token; closing the connection",
            ["Connect with the token the worker was started with (FORJ_TOKEN)"],
        )
    handler.authenticated = True
    payload = handler.server.worker.hello_payload(req.client.model_dump())
    frames = _offered_frames(body)
    if sexp.JSON_FRAMES in frames:
        handler.json_frames = True
        payload["frames"] = [sexp.JSON_FRAMES]
        if sexp.RAW_STRINGS in frames:
            handler.raw_strings = True
            payload["frames"].append(sexp.RAW_STRINGS)
    return payload


def _offered_frames(body: Any) -> list[Any]:
    """What a hello's ``client.frames`` offers: ``json`` frames, and in them
    ``raw`` long strings (see :mod:`.sexp`)."""
    client = body.get("client") if isinstance(body, dict) else None
    frames = client.get("frames") if isinstance(client, dict) else None
    return frames if isinstance(frames, list) else []


def _ping(handler: ForjHandler, body: Any) -> Any:
    return {}


def _tool_definitions(handler: ForjHandler, body: Any) -> Any:
    return handler.server.worker.tool_definitions(body)


def _plan(handler: ForjHandler, body: Any) -> Any:
    if handler.role == "mcp" and isinstance(body, dict):
        body = handler.as_mcp_plan(body)
    return handler.server.worker.plan(body, handler.caller)


def _execute(handler: ForjHandler, body: Any) -> Any:
    return handler.server.worker.execute(body, handler.emit_event, handler.caller)


def _proposal(handler: ForjHandler, body: Any) -> Any:
    return handler.server.worker.proposal(body)


def _journal_calls(handler: ForjHandler, body: Any) -> Any:
    return handler.server.worker.journal_calls(body)


def _resolve_batch(handler: ForjHandler, body: Any) -> Any:
    return handler.server.worker.resolve_batch(body)


def _checkpoints(handler: ForjHandler, body: Any) -> Any:
    return handler.server.worker.checkpoints(body)


def _stage(handler: ForjHandler, body: Any) -> Any:
    return handler.server.worker.stage(body)


def _undo(handler: ForjHandler, body: Any) -> Any:
    return handler.server.worker.undo(body)


def _rewind(handler: ForjHandler, body: Any) -> Any:
    return handler.server.worker.rewind(body)


def _cancel(handler: ForjHandler, body: Any) -> Any:
    return handler.server.worker.cancel(body)


def _grants(handler: ForjHandler, body: Any) -> Any:
    return handler.server.worker.grants(body)


def _revoke_grant(handler: ForjHandler, body: Any) -> Any:
    return handler.server.worker.revoke_grant(body)


def _review(handler: ForjHandler, body: Any) -> Any:
    if handler.role != "mcp":
        raise ProtocolError(
            "bad-request",
            "review is for forj's MCP server; Emacs reviews its own batches",
            ["Open the review in Emacs from the plan's confirm items"],
        )
    batch_id = body.get("batch_id") if isinstance(body, dict) else None
    owner = handler.server.worker.batch_owner(batch_id) if isinstance(batch_id, str) else None
    if owner is not None and owner != handler.connection_id:
        # Putting another client's call (an Emacs chat's) to the user under
        # this client's name would hand this client the user's answer.
        raise ProtocolError(
            "not-allowed",
            "that batch was planned by another client; an MCP server asks reviews of its own",
            ["Plan the calls first, then ask the review of a confirm item of that plan"],
        )
    return review_in_emacs(handler.server.worker, handler.server.reviewer, body)


def _metrics(handler: ForjHandler, body: Any) -> Any:
    return handler.server.worker.metrics(body)


def _audit(handler: ForjHandler, body: Any) -> Any:
    return handler.server.worker.audit(body)


def _audit_entry(handler: ForjHandler, body: Any) -> Any:
    return handler.server.worker.audit_entry(body)


def _mcp_servers(handler: ForjHandler, body: Any) -> Any:
    return handler.server.worker.mcp_servers(body)


def _shutdown(handler: ForjHandler, body: Any) -> Any:
    handler.stop_after_reply = True  # the caller gets its answer before the socket closes
    return {}


METHODS: dict[str, Method] = {
    "hello": Method(_hello, True, "Authenticate; returns the worker's root, config and tools."),
    "ping": Method(_ping, True, "Do nothing; for liveness checks and latency measurements."),
    "tool_definitions": Method(_tool_definitions, True, "The tool definitions, sorted by name."),
    "plan": Method(_plan, False, "Validate a batch of calls; one disposition per call."),
    "execute": Method(_execute, False, "Run a planned batch; one result per call, in order."),
    "proposal": Method(
        _proposal, False, "The old and proposed text of a reviewed call, for editing."
    ),
    "journal_calls": Method(
        _journal_calls, False, "Journal a complete message's calls before planning them."
    ),
    "resolve_batch": Method(
        _resolve_batch, False, "Resume or discard a batch a crash left unfinished."
    ),
    "checkpoints": Method(_checkpoints, False, "The batches that changed files, newest first."),
    "undo": Method(_undo, False, "Put back the files a batch or a turn changed (dry run first)."),
    "stage": Method(
        _stage, False, "git add -A the files forj changed; the repository's programs never run."
    ),
    "rewind": Method(_rewind, False, "Put back every file forj changed from a turn on."),
    "cancel": Method(_cancel, True, "Cancel a batch: the running call and all later ones."),
    "grants": Method(_grants, True, "The standing grants in force for this project."),
    "revoke_grant": Method(_revoke_grant, True, "Revoke one standing grant by its id."),
    "review": Method(
        _review,
        False,
        "Have the connected Emacs review an MCP client's call; its answer.",
        waits=True,
    ),
    "metrics": Method(_metrics, True, "Per-session counters: calls, errors, time, bytes, files."),
    "audit": Method(_audit, False, "One page of the journaled calls, newest first, filterable."),
    "audit_entry": Method(_audit_entry, False, "One journaled call and its result, in full."),
    "mcp_servers": Method(
        _mcp_servers, False, "The outside MCP servers: state, command or URL, tools."
    ),
    "shutdown": Method(_shutdown, True, "Stop the worker."),
}


# What forj's MCP server may call on a worker it joined: its own calls and
# their review.  The rest (undo, grants, shutdown...) belongs to the user's Emacs.
MCP_METHODS = frozenset({"hello", "ping", "tool_definitions", "plan", "execute", "review"})


class ForjHandler(socketserver.StreamRequestHandler):
    # A ForjServer, or for the stdio connection a server that is no
    # socketserver at all: what a connection needs of either is WorkerServer.
    server: WorkerServer  # type: ignore[assignment]

    def setup(self) -> None:
        super().setup()
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.start_connection()

    def start_connection(self) -> None:
        """The state of a new connection, whatever carries it (a socket, stdio)."""
        self.server.add_client(self)
        self.write_lock = threading.Lock()
        self.authenticated = False
        self.reject_after_reply = False
        self.stop_after_reply = False
        self.serial = next(_SERIALS)
        self.role: Literal["emacs", "mcp"] = "emacs"  # "mcp": proved the rendezvous secret
        # Assigned here, never by the client: session grants and read records
        # belong to one chat of this connection, and end when it closes.
        self.connection_id = f"conn-{self.serial}-{secrets.token_hex(6)}"
        # An MCP server's chat: its batches, session grants and deduplication,
        # bound to its connection whatever session its requests name.
        self.mcp_session = ""
        # Set by hello when the client accepts JSON frames: then replies and
        # events go out as those, every other message as standard EPC.
        self.json_frames = False
        self.raw_strings = False
        self._uids = itertools.count(1)
        # Our own calls to the peer that wait for its answer: uid -> future.
        self._asks: dict[int, Future[Any]] = {}

    def as_mcp_plan(self, body: dict[str, Any]) -> dict[str, Any]:
        """An MCP server's plan: in its own chat, never in a mode looser than the user's.

        The MCP server speaks for another agent, not for the user: the
        user's configured mode is the loosest it gets (as on the SDK).
        """
        out = dict(body)
        out["session"] = self.mcp_session
        requested = out.get("permission_mode")
        configured = self.server.worker.consent.policy.mode
        if requested in PERMISSION_MODES and PERMISSION_MODES.index(
            requested
        ) > PERMISSION_MODES.index(configured):
            out["permission_mode"] = configured
        return out

    @property
    def caller(self) -> Caller:
        """Who this connection is, as it proved at hello: Emacs (the token) or MCP (the secret)."""
        return Caller(self.role, self.connection_id)

    def handle(self) -> None:
        try:
            while not self.server.stopping.is_set():
                head = self.rfile.read(6)
                if len(head) < 6:
                    return
                try:
                    length = sexp.parse_header(head)
                except sexp.SexpError as exc:
                    log.warning("closing connection: %s", exc)
                    return
                data = self.rfile.read(length)
                if len(data) < length:
                    return
                try:
                    self._dispatch(data)
                except Exception:
                    # A message we cannot even answer properly (an odd uid, say):
                    # say so without a uid and keep the connection.
                    log.warning("unusable message", exc_info=True)
                    self.send([Symbol("epc-error"), [], "unusable message"])
        except (OSError, ValueError):
            return  # the peer went away
        finally:
            self.abandon_asks()
            self.server.connection_closed(self)

    # --- incoming messages ---------------------------------------------------------

    def _dispatch(self, data: bytes) -> None:
        try:
            msg = sexp.loads(data.decode("utf-8"))
        except (UnicodeDecodeError, sexp.SexpError) as exc:
            self.send(["epc-error", [], f"unreadable message: {exc}"])
            return
        if not (isinstance(msg, list) and len(msg) >= 2 and isinstance(msg[0], Symbol)):
            self.send(["epc-error", [], "a message must be (KIND UID ...)"])
            return
        kind, uid = str(msg[0]), msg[1]
        if not isinstance(uid, int) or isinstance(uid, bool) or abs(uid) > 2**61:
            self.send([Symbol("epc-error"), [], "a message's uid must be a small integer"])
            return
        if kind == "call":
            if len(msg) != 4 or not isinstance(msg[2], str) or not isinstance(msg[3], list):
                self.send(["epc-error", uid, "a call must be (call UID METHOD (ARGS...))"])
                return
            self._call(uid, str(msg[2]), msg[3])
        elif kind == "methods":
            if not self.authenticated:
                self._reply_error(uid, ProtocolError("unauthenticated", "call hello first"))
                return
            listing = [[Symbol(name), [], m.doc] for name, m in sorted(METHODS.items())]
            self.send([Symbol("return"), uid, listing])
        elif kind in ("return", "return-error", "epc-error"):
            # Answers to our own calls: event notices (nothing waits for
            # them) and questions put with ask().
            waiting = self._asks.pop(uid, None)
            if waiting is not None and not waiting.done():
                if kind == "return" and len(msg) > 2:
                    waiting.set_result(msg[2])
                else:
                    waiting.set_exception(RuntimeError(f"{kind}: {msg[2:]!r}"))
        else:
            self.send([Symbol("epc-error"), uid, f"unknown message kind {kind!r}"])

    def _call(self, uid: Any, name: str, args: list[Any]) -> None:
        method = METHODS.get(name)
        if method is None:
            self.send([Symbol("epc-error"), uid, f"EPC-ERROR: No such method : {name}"])
            return
        if not self.authenticated and name != "hello":
            self._reply_error(
                uid,
                ProtocolError(
                    "unauthenticated",
                    f"{name}: call hello with the worker's token first",
                    ["Call hello with the token from FORJ_TOKEN"],
                ),
            )
            return
        if self.role == "mcp" and name not in MCP_METHODS:
            self._reply_error(
                uid,
                ProtocolError(
                    "not-allowed",
                    f"{name}: not open to an MCP server; only the user's Emacs may call it",
                    [f"Use one of: {', '.join(sorted(MCP_METHODS))}"],
                ),
            )
            return
        if len(args) != 1 or not isinstance(args[0], str):
            self._reply_error(
                uid, ProtocolError("bad-request", f"{name} takes exactly one JSON text argument")
            )
            return
        if method.inline:
            self._serve(uid, name, method, args[0])
        elif method.waits:
            threading.Thread(
                target=self._serve, args=(uid, name, method, args[0]), daemon=True
            ).start()
        else:
            try:
                self.server.pool.submit(self._serve, uid, name, method, args[0])
            except RuntimeError:  # the pool is shut down: we are stopping
                self._reply_error(uid, ProtocolError("shutting-down", "the worker is stopping"))

    def _serve(self, uid: Any, name: str, method: Method, text: str) -> None:
        # Counted, so that a stopping worker closes its journal only after what
        # follows a reply (the record that it reached the client) is written.
        with self.server.in_flight():
            self._answer(uid, name, method, text)

    def _answer(self, uid: Any, name: str, method: Method, text: str) -> None:
        try:
            try:
                body = json.loads(text)
            except json.JSONDecodeError as exc:
                raise ProtocolError(
                    "bad-request", f"{name}: the argument is not valid JSON: {exc}"
                ) from None
            result = method.func(self, body)
            if isinstance(result, Encoded) and result.text:
                reply = result.text
            else:
                reply = json.dumps(result, ensure_ascii=False)
        except ProtocolError as exc:
            self._reply_error(uid, exc)
        except Exception as exc:
            log.exception("method %s failed", name)
            self._reply_error(
                uid,
                ProtocolError(
                    "internal-error",
                    f"{name} failed: {type(exc).__name__}",
                    ["This is a fault in forj; the worker log has the traceback"],
                ),
            )
        else:
            try:
                if self.json_frames:
                    frame = None
                    if self.raw_strings and len(reply) >= sexp.RAW_MIN_CHARS:
                        frame = sexp.raw_reply_frame(uid, result)
                    if frame is not None:
                        sent = self._write(frame)
                    else:
                        sent = self.send_json([Symbol("return-json"), uid], reply)
                else:
                    sent = self.send([Symbol("return"), uid, reply])
            except sexp.SexpError as exc:
                self._reply_error(uid, ProtocolError("internal-error", f"{name}: {exc}"))
            else:
                if sent and isinstance(result, Encoded) and result.on_sent is not None:
                    result.on_sent()  # the reply is the client's now (recovery)
                if len(reply) >= LARGE_REPLY_CHARS:
                    del result, reply
                    give_back_memory()
        if self.reject_after_reply:
            self.close()
        if self.stop_after_reply:
            threading.Thread(target=self.server.stop, name="forj-shutdown", daemon=True).start()

    def _reply_error(self, uid: Any, exc: ProtocolError) -> None:
        self.send([Symbol("return-error"), uid, json.dumps(exc.wire(), ensure_ascii=False)])

    # --- outgoing -----------------------------------------------------------------------

    def send(self, message: list[Any]) -> bool:
        """Write one whole frame; frames from different threads never interleave.

        False when the connection was already gone.
        """
        if message and isinstance(message[0], str) and not isinstance(message[0], Symbol):
            message = [Symbol(message[0]), *message[1:]]
        try:
            data = sexp.frame(message)
        except UnicodeEncodeError:  # a lone surrogate slipped through: never drop a reply
            data = sexp.frame(sanitize_value(message))
        return self._write(data)

    def _write(self, data: bytes) -> bool:
        with self.write_lock:
            try:
                self.wfile.write(data)
            except (OSError, ValueError):
                log.debug("dropping a message: the connection is closed")
                return False
        return True

    def send_json(self, header: list[Any], text: str) -> bool:
        """Write one JSON frame: ``header`` then the JSON ``text`` as it is.

        False when the connection was already gone.
        """
        try:
            body = text.encode("utf-8")
        except UnicodeEncodeError:  # a lone surrogate slipped through: never drop a reply
            body = json.dumps(sanitize_value(json.loads(text)), ensure_ascii=False).encode()
        return self._write(sexp.json_frame(header, body))

    def emit_event(self, event: Event) -> None:
        """Tell the client about progress; no reply awaited.

        To a client that accepts JSON frames, ``(event-json)`` and the
        event's JSON, or ``(event-json N [ascii])``, the event's JSON without
        its ``data``, and then ``data`` as N bytes of UTF-8 (``ascii`` when
        they all are); to any other,
        ``(call UID event ("{json}"))``.
        """
        wire = event.wire()
        if self.json_frames:
            data = wire.pop("data", None)
            if data is None:
                self.send_json([Symbol("event-json")], json.dumps(wire, ensure_ascii=False))
                return
            # Output goes raw after the event's JSON: the reader takes the
            # bytes as they are instead of parsing them out of a JSON string.
            raw = data.encode("utf-8", "replace")
            meta = json.dumps(wire, ensure_ascii=False).encode("utf-8", "replace")
            header: list[Any] = [Symbol("event-json"), len(raw)]
            if data.isascii():  # known for free here; spares the reader a scan
                header.append(Symbol("ascii"))
            self._write(sexp.json_frame(header, meta + b"\n" + raw))
        else:
            text = json.dumps(wire, ensure_ascii=False)
            self.send([Symbol("call"), next(self._uids), Symbol("event"), [text]])

    def ask(self, method: str, body: Any, timeout: float) -> Any:
        """Call ``method`` on the peer with ``body`` as JSON; its decoded answer.

        Raises TimeoutError when no answer comes in ``timeout`` seconds, and
        ConnectionError when the connection is gone.
        """
        uid = next(self._uids)
        waiting: Future[Any] = Future()
        self._asks[uid] = waiting
        try:
            if not self.send([Symbol("call"), uid, Symbol(method), [json.dumps(body)]]):
                raise ConnectionError("the connection is closed")
            answer = waiting.result(timeout)
        except FutureTimeout:
            raise TimeoutError(f"no answer to {method} within {timeout:g} s") from None
        finally:
            self._asks.pop(uid, None)
        return json.loads(answer) if isinstance(answer, str) else answer

    def abandon_asks(self) -> None:
        for waiting in list(self._asks.values()):
            if not waiting.done():
                waiting.set_exception(ConnectionError("the connection closed"))

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.connection.shutdown(socket.SHUT_RDWR)


class WorkerServer:
    """What every connection needs of the server it belongs to, whatever carries it.

    :class:`ForjServer` accepts connections on a loopback port;
    :class:`forj_py.transport.stdio.StdioServer` serves the one connection
    on the worker's own stdin and stdout.
    """

    def __init__(self, worker: Worker, token: str) -> None:
        if not token:
            raise ValueError("an empty token would let anyone in")
        self.worker = worker
        self.token = token
        # The rendezvous secret forj's MCP server proves (None: no rendezvous).
        self.mcp_secret: str | None = None
        self.pool = ThreadPoolExecutor(POOL_THREADS, thread_name_prefix="forj-call")
        self.stopping = threading.Event()
        self._conn_lock = threading.Lock()
        self._live: set[ForjHandler] = set()
        self._busy = 0
        self._idle = threading.Condition()
        # Tools only the editor can answer (diagnostics) ask the Emacs that
        # answers reviews.
        worker.runner.editor = self.ask_editor

    def serve_forever(self, poll_interval: float = 0.5) -> None:
        raise NotImplementedError

    def server_close(self) -> None:
        """Release what serving held (the listening socket)."""

    def end_serving(self) -> None:
        """Make :meth:`serve_forever` return; called once, by :meth:`stop`."""
        raise NotImplementedError

    @contextlib.contextmanager
    def in_flight(self) -> Iterator[None]:
        """Count one request being answered (see :meth:`wait_idle`)."""
        with self._idle:
            self._busy += 1
        try:
            yield
        finally:
            with self._idle:
                self._busy -= 1
                self._idle.notify_all()

    def wait_idle(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for every request to be answered; whether they were."""
        with self._idle:
            return self._idle.wait_for(lambda: self._busy == 0, timeout)

    def add_client(self, handler: ForjHandler) -> None:
        with self._conn_lock:
            self._live.add(handler)

    def reviewer(self) -> ForjHandler | None:
        """The Emacs connection that answers reviews: the newest authenticated one."""
        with self._conn_lock:
            live = list(self._live)
        emacs = [h for h in live if h.authenticated and h.role == "emacs"]
        return max(emacs, key=lambda h: h.serial, default=None)

    def ask_editor(self, method: str, body: dict[str, Any], timeout: float) -> Any:
        """Ask the connected Emacs; ConnectionError when none is connected."""
        emacs = self.reviewer()
        if emacs is None:
            raise ConnectionError("no Emacs is connected to this project's forj worker")
        return emacs.ask(method, body, timeout)

    def connection_closed(self, handler: ForjHandler) -> None:
        with self._conn_lock:
            self._live.discard(handler)
            others = any(h.authenticated for h in self._live)
        # Its session grants and what its chats read end with it: a client
        # that connects again starts with none.
        self.worker.forget_connection(handler.connection_id)
        if handler.role == "mcp":
            return  # an MCP server's batches are its own; Emacs's keep running
        if handler.authenticated and not others:
            # Nobody is left to receive results: stop what is running (the
            # journal keeps what finished).
            self.worker.cancel_all()

    def stop(self) -> None:
        """Stop serving: cancel running batches, close connections, end serve_forever."""
        if self.stopping.is_set():
            return
        self.stopping.set()
        self.worker.cancel_all()
        with self._conn_lock:
            live = list(self._live)
        for handler in live:
            handler.close()
        self.end_serving()
        self.pool.shutdown(wait=False, cancel_futures=True)


class ForjServer(WorkerServer, socketserver.ThreadingTCPServer):
    """The worker's methods on a loopback port, one thread per connection."""

    daemon_threads = True
    block_on_close = False

    def __init__(self, worker: Worker, token: str, host: str = "127.0.0.1") -> None:
        WorkerServer.__init__(self, worker, token)
        socketserver.ThreadingTCPServer.__init__(self, (host, 0), ForjHandler)

    @property
    def port(self) -> int:
        return int(self.server_address[1])

    def serve_forever(self, poll_interval: float = 0.5) -> None:
        socketserver.ThreadingTCPServer.serve_forever(self, poll_interval)

    def server_close(self) -> None:
        socketserver.ThreadingTCPServer.server_close(self)

    def end_serving(self) -> None:
        self.shutdown()

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A connection that failed outside the handler's own error handling
        # (the peer reset it during setup, say): nothing to answer, no one
        # to tell but the log; the default would print to stderr.
        log.debug("connection from %s failed", client_address, exc_info=True)
