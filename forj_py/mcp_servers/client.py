"""Connections to the outside MCP servers: started in the background, stopped with the worker.

Every connection lives in one event loop on a thread of its own (the MCP
SDK is asynchronous; the worker's calls come from its own threads and wait
on a future).  A connection is a task that opens the transport and the
session, lists the tools, then waits to be told to stop: the SDK's
context managers are entered and left in that one task, as they must be.

A stdio server gets an environment of its own: the few variables every
program needs (``PATH``, ``HOME``, the locale...) and those the user's
config names for that server, nothing else; the editor's and the
worker's other variables (a provider's key, a token) never reach it.  Its
stderr goes to a file whose last lines are quoted when it fails.

A server that cannot start, exits, hangs or speaks something other than
MCP is reported by name with what to do (``status``, the worker's
warnings, the call's error); a call to a server that stopped starts it
again once.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import os
import tempfile
import threading
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Literal

from .. import errors
from ..config import McpServerConfig
from ..output import redact
from ..protocol import ErrorKind, ErrorType

if TYPE_CHECKING:
    from mcp.client.session import ClientSession

log = logging.getLogger(__name__)

# What a stdio server inherits from the worker: what programs need to
# run, and nothing that could be a secret.
INHERITED = (
    "PATH",
    "HOME",
    "USER",
    "LOGNAME",
    "SHELL",
    "LANG",
    "LC_ALL",
    "LC_CTYPE",
    "TERM",
    "TMPDIR",
    "TZ",
)
# Tools taken from one server; more are left out with a warning.
MAX_TOOLS = 128
# Pages of tools/list followed before the rest is left out.
MAX_PAGES = 16
# How much of a failed server's stderr its error quotes.
STDERR_TAIL_BYTES = 600
# How long stopping all servers may take before the worker goes on.
STOP_SECONDS = 5.0

State = Literal["disabled", "starting", "running", "failed", "stopped"]


@dataclass(frozen=True)
class ServerTool:
    """A tool as its server listed it (name, description and schema unchecked)."""

    server: str
    name: str
    description: str
    schema: Any


@dataclass
class _Connection:
    name: str
    config: McpServerConfig
    state: State = "stopped"
    error: str | None = None
    tools: list[ServerTool] = field(default_factory=list)
    session: ClientSession | None = None
    stop: asyncio.Event | None = None
    task: concurrent.futures.Future[None] | None = None
    settled: threading.Event = field(default_factory=threading.Event)
    stderr: IO[str] | None = None
    # Whether it ran once: a call to it after it stopped starts it again.
    started_once: bool = False

    @property
    def target(self) -> str:
        """The command line or URL, credentials in it (user:password@) redacted."""
        if self.config.url is not None:
            return redact(self.config.url)
        return redact(" ".join(self.config.command or []))


class ServerError(Exception):
    """A server that could not be used; the message names it and says what to do."""


class Servers:
    """The configured outside MCP servers of one worker."""

    def __init__(self, configs: dict[str, McpServerConfig], root: Path) -> None:
        self.root = root
        self._conns = {name: _Connection(name, cfg) for name, cfg in sorted(configs.items())}
        for conn in self._conns.values():
            if not conn.config.enabled:
                conn.state = "disabled"
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._closed = False

    def __bool__(self) -> bool:
        return bool(self._conns)

    def names(self) -> list[str]:
        return list(self._conns)

    def config(self, server: str) -> McpServerConfig:
        return self._conns[server].config

    def target(self, server: str) -> str:
        """What the server is, for a review: its command line or its URL."""
        return self._conns[server].target

    # --- starting and stopping ---------------------------------------------------

    def start(self) -> None:
        """Start every enabled server in the background; :meth:`wait_started` waits for them."""
        enabled = [c for c in self._conns.values() if c.state != "disabled"]
        if not enabled or self._closed:
            return
        try:
            import mcp.client.session  # noqa: F401  (only to know the SDK is there)
        except ImportError as exc:
            for conn in enabled:
                conn.state = "failed"
                conn.error = (
                    f"MCP server {conn.name!r}: the MCP SDK is not installed ({exc}); "
                    "install it with pip install 'forj[mcp]', then restart the worker"
                )
                conn.settled.set()
            return
        for conn in enabled:
            self._launch(conn)

    def _ensure_loop(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None:
                loop = asyncio.new_event_loop()
                thread = threading.Thread(
                    target=loop.run_forever, name="forj-mcp-servers", daemon=True
                )
                thread.start()
                self._loop, self._thread = loop, thread
            return self._loop

    def _launch(self, conn: _Connection) -> None:
        conn.settled.clear()
        conn.state = "starting"
        conn.error = None
        conn.started_once = True
        conn.task = asyncio.run_coroutine_threadsafe(self._serve(conn), self._ensure_loop())

    def wait_started(self, at_most: float | None = None) -> list[str]:
        """Wait until every server started is running or has failed (each within its limit).

        ``at_most``: seconds to wait in all, after which the servers still
        starting (returned by name) go on starting in the background.
        """
        deadline = None if at_most is None else time.monotonic() + at_most
        for conn in self._conns.values():
            if conn.state != "starting":
                continue
            # The task enforces the limit; the margin covers a spawn that hangs.
            limit = conn.config.startup_timeout_seconds + 5
            if deadline is not None and deadline - time.monotonic() < limit:
                conn.settled.wait(max(deadline - time.monotonic(), 0))
                continue
            if not conn.settled.wait(limit):
                conn.state = "failed"
                conn.error = self._startup_timeout(conn)
        return self.starting()

    def starting(self) -> list[str]:
        """The servers still starting."""
        return [c.name for c in self._conns.values() if c.state == "starting"]

    def close(self) -> None:
        """Stop every server (a stdio server's process ends) and the loop's thread."""
        loop = self._loop
        if self._closed or loop is None:
            self._closed = True
            return
        self._closed = True
        for conn in self._conns.values():
            stop = conn.stop
            if stop is not None:
                loop.call_soon_threadsafe(stop.set)
        deadline = time.monotonic() + STOP_SECONDS
        for conn in self._conns.values():
            if conn.task is not None:
                with contextlib.suppress(Exception):
                    conn.task.result(max(deadline - time.monotonic(), 0.01))
                conn.task.cancel()
        loop.call_soon_threadsafe(loop.stop)
        if self._thread is not None:
            self._thread.join(max(deadline - time.monotonic(), 0.1))
            if not self._thread.is_alive():
                loop.close()
        for conn in self._conns.values():
            if conn.stderr is not None:
                conn.stderr.close()

    # --- what the worker asks ------------------------------------------------------

    def tools(self) -> list[ServerTool]:
        """The tools of every running server, as listed."""
        return [t for c in self._conns.values() if c.state == "running" for t in c.tools]

    def problems(self) -> list[str]:
        """One sentence per server that failed or is still starting: which, why, what to do."""
        found = [c.error for c in self._conns.values() if c.state == "failed" and c.error]
        found += [
            f"MCP server {name!r} is still starting; its tools are offered once it is up "
            "(M-x forj-mcp-servers shows it)"
            for name in self.starting()
        ]
        return found

    def status(self) -> list[dict[str, Any]]:
        """Each server: its name, transport, target, state, error and tools (for the menu)."""
        return [
            {
                "name": c.name,
                "transport": "http" if c.config.url is not None else "stdio",
                "target": c.target,
                "state": c.state,
                "error": c.error,
                # Only names a tool may have: a listed name is the server's
                # text, and could carry controls or a fake line into the menu.
                "tools": [t.name for t in c.tools if _shown_name(t.name)]
                if c.state == "running"
                else [],
            }
            for c in self._conns.values()
        ]

    def call(
        self,
        server: str,
        tool: str,
        arguments: dict[str, Any],
        timeout: float,
        cancel: threading.Event,
    ) -> dict[str, Any]:
        """Call ``tool`` of ``server``; its ``CallToolResult`` as JSON.

        Raises :class:`~forj_py.errors.ToolFailure` for a server that is
        not running, a call that timed out or was cancelled, and an error
        the server answered with.
        """
        conn = self._conns.get(server)
        if conn is None:
            raise _failure(f"no MCP server {server!r} is configured", [_config_hint(server)])
        if conn.state != "running" and conn.started_once and not self._closed:
            # It exited (or never came up): one more try, within its start limit.
            self._launch(conn)
            self.wait_started()
        session, loop = conn.session, self._loop
        if conn.state != "running" or session is None or loop is None:
            raise _failure(
                conn.error or f"MCP server {server!r} is not running ({conn.state})",
                [
                    "Tell the user the server is not available; do not retry it now",
                    _config_hint(server),
                ],
                server=server,
            )
        future = asyncio.run_coroutine_threadsafe(
            _call_tool(session, tool, arguments, timeout), loop
        )
        deadline = time.monotonic() + timeout + 2
        while True:
            try:
                result = future.result(0.1)
                break
            except concurrent.futures.TimeoutError:
                if cancel.is_set():
                    future.cancel()
                    raise errors.cancelled() from None
                if time.monotonic() > deadline:
                    future.cancel()
                    raise self._timed_out(conn, tool, timeout) from None
            except TimeoutError:
                raise self._timed_out(conn, tool, timeout) from None
            except ServerError as exc:
                raise _failure(
                    f"MCP server {server!r} refused the call to {tool!r}: {exc}",
                    ["Check the arguments against the tool's schema, or use another tool"],
                    server=server,
                ) from None
            except Exception as exc:  # the connection broke: the server exited, say
                self._broken(conn, exc)
                raise _failure(
                    conn.error or f"MCP server {server!r} failed",
                    [
                        "Tell the user the server stopped; the next call starts it again",
                        _config_hint(server),
                    ],
                    server=server,
                ) from None
        return result

    # --- the connection task ---------------------------------------------------------

    async def _serve(self, conn: _Connection) -> None:
        from mcp.client.session import ClientSession

        conn.stop = asyncio.Event()
        started = False
        try:
            async with contextlib.AsyncExitStack() as stack:
                streams = await stack.enter_async_context(self._transport(conn))
                session = await stack.enter_async_context(ClientSession(streams[0], streams[1]))
                try:
                    listed = await asyncio.wait_for(
                        _handshake(conn.name, session), conn.config.startup_timeout_seconds
                    )
                except asyncio.TimeoutError:
                    raise ServerError(self._startup_timeout(conn)) from None
                conn.tools = listed
                conn.session = session
                conn.state = "running"
                started = True
                conn.settled.set()
                log.info("MCP server %s: %d tools", conn.name, len(listed))
                await conn.stop.wait()
        except asyncio.CancelledError:
            conn.state = "stopped"
            raise
        except BaseException as exc:
            if conn.state != "failed":
                conn.state = "failed"
                conn.error = (
                    str(exc)
                    if isinstance(exc, ServerError)
                    else self._explain(conn, exc, "could not start" if not started else "failed")
                )
            log.warning("%s", conn.error)
        finally:
            conn.session = None
            if conn.state in ("running", "starting"):
                conn.state = "stopped"
            conn.settled.set()

    @contextlib.asynccontextmanager
    async def _transport(self, conn: _Connection) -> AsyncIterator[Any]:
        cfg = conn.config
        if cfg.url is not None:
            from mcp.client.streamable_http import streamable_http_client
            from mcp.shared._httpx_utils import create_mcp_http_client

            client = create_mcp_http_client(headers=dict(cfg.headers) or None)
            async with client, streamable_http_client(cfg.url, http_client=client) as streams:
                yield streams
            return
        from mcp.client.stdio import StdioServerParameters, stdio_client

        assert cfg.command is not None
        if conn.stderr is not None:
            conn.stderr.close()
        # Open for as long as the server runs (its stderr), closed at the next start.
        conn.stderr = tempfile.TemporaryFile("w+", encoding="utf-8", errors="replace")  # noqa: SIM115
        cwd = (self.root / Path(cfg.cwd).expanduser()) if cfg.cwd is not None else self.root
        params = StdioServerParameters(
            command=cfg.command[0],
            args=cfg.command[1:],
            env=server_environment(cfg),
            cwd=str(cwd),
            encoding_error_handler="replace",
        )
        async with stdio_client(params, errlog=conn.stderr) as streams:
            yield streams

    # --- saying what went wrong -----------------------------------------------------

    def _stderr_tail(self, conn: _Connection) -> str:
        f = conn.stderr
        if f is None:
            return ""
        try:
            f.flush()
            size = f.seek(0, os.SEEK_END)
            f.seek(max(size - STDERR_TAIL_BYTES * 4, 0))
            text = f.read()
        except (OSError, ValueError):
            return ""
        lines = [line.strip() for line in text.splitlines() if line.strip()]
        tail = " | ".join(lines[-4:])
        return tail[-STDERR_TAIL_BYTES:]

    def _explain(self, conn: _Connection, exc: BaseException, what: str) -> str:
        reason = _reason(exc)
        tail = self._stderr_tail(conn)
        where = f"{'url' if conn.config.url else 'command'} {conn.target!r}"
        text = f"MCP server {conn.name!r} ({where}) {what}: {reason}"
        if tail:
            text += f"; its stderr ends: {tail}"
        return text + f". {_config_hint(conn.name)}"

    def _startup_timeout(self, conn: _Connection) -> str:
        tail = self._stderr_tail(conn)
        text = (
            f"MCP server {conn.name!r} ({conn.target!r}) did not finish starting within "
            f"{conn.config.startup_timeout_seconds:g} s (no answer to initialize or tools/list; "
            "is it an MCP server speaking on stdout, or the right URL?)"
        )
        if tail:
            text += f"; its stderr ends: {tail}"
        hint = _config_hint(conn.name)
        return text + f". Raise startup_timeout_seconds or fix the server. {hint}"

    def _timed_out(self, conn: _Connection, tool: str, timeout: float) -> errors.ToolFailure:
        return errors.ToolFailure(
            ErrorType.TIMEOUT,
            f"MCP server {conn.name!r} did not answer the call to {tool!r} within {timeout:g} s; "
            "the call was cancelled (what the server did meanwhile is unknown)",
            kind=ErrorKind.TIMEOUT,
            recovery=[
                "Tell the user: the server may be stuck or the work too long",
                f"The user can raise timeout_seconds in [mcp.servers.{conn.name}]",
            ],
            server=conn.name,
            timeout_s=timeout,
        )

    def _broken(self, conn: _Connection, exc: BaseException) -> None:
        conn.state = "failed"
        conn.error = self._explain(conn, exc, "stopped answering")
        loop, stop = self._loop, conn.stop
        if loop is not None and stop is not None:
            loop.call_soon_threadsafe(stop.set)


def _shown_name(name: str) -> bool:
    from .tools import TOOL_NAME

    return bool(TOOL_NAME.match(name))


def server_environment(cfg: McpServerConfig) -> dict[str, str]:
    """A stdio server's whole environment: the harmless basics and its own ``env``."""
    env = {name: os.environ[name] for name in INHERITED if name in os.environ}
    env.update(cfg.env)
    return env


async def _handshake(server: str, session: ClientSession) -> list[ServerTool]:
    import mcp_types as types

    await session.initialize()
    found: list[ServerTool] = []
    cursor: str | None = None
    for _ in range(MAX_PAGES):
        params = types.PaginatedRequestParams(cursor=cursor) if cursor else None
        page = await session.list_tools(params=params)
        for tool in page.tools:
            found.append(ServerTool(server, tool.name, tool.description or "", tool.input_schema))
        cursor = page.next_cursor
        if not cursor or len(found) >= MAX_TOOLS:
            break
    return found


async def _call_tool(
    session: ClientSession, tool: str, arguments: dict[str, Any], timeout: float
) -> dict[str, Any]:
    import mcp_types as types
    from mcp.shared.exceptions import MCPError
    from mcp_types.jsonrpc import CONNECTION_CLOSED

    try:
        result = await asyncio.wait_for(session.call_tool(tool, arguments), timeout)
    except asyncio.TimeoutError:
        raise TimeoutError from None
    except MCPError as exc:
        if exc.code == CONNECTION_CLOSED:
            raise ConnectionError(exc.message) from None
        raise ServerError(exc.message[:2000]) from None
    if not isinstance(result, types.CallToolResult):
        raise ServerError(f"the server answered with a {type(result).__name__}, not a tool result")
    dumped: dict[str, Any] = result.model_dump(mode="json", exclude_none=True)
    return dumped


def _reason(exc: BaseException) -> str:
    """The innermost useful message of ``exc`` (task groups wrap what happened)."""
    # An exception group (Python 3.11, or the backport anyio brings to 3.10).
    inner = getattr(exc, "exceptions", None)
    while isinstance(inner, tuple) and inner and isinstance(inner[0], BaseException):
        exc = inner[0]
        inner = getattr(exc, "exceptions", None)
    if isinstance(exc, FileNotFoundError):
        return f"program not found ({exc.filename or exc})"
    text = str(exc).strip().splitlines()[0][:300] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _config_hint(server: str) -> str:
    return (
        f"Check [mcp.servers.{server}] in your config file, then restart the worker "
        "(M-x forj-worker-restart)"
    )


def _failure(message: str, recovery: list[str], **details: Any) -> errors.ToolFailure:
    return errors.process_error(message, recovery=recovery, **details)
