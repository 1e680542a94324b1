"""forj's tools served to other agents over MCP (stdio): ``python -m forj_py mcp``.

Each ``tools/call`` is one batch through the worker's own methods (plan,
then execute), so an MCP client's call meets exactly what a call from Emacs
meets: schema validation, the sandbox, permission rules and modes, the
stale-file rule, backups and the journal.  When Emacs runs a worker for the
project, the calls go through that worker (found through the rendezvous
file, see ``rendezvous.py``), which knows this server's connection as an
MCP one (it proved the rendezvous secret, not Emacs's token): its reads
and session grants are its own, and a grant for every chat of the project
is the user's alone; otherwise this process runs a worker of its own over
the same shared stores.

A call the consent stage sends to review is put to the user in Emacs when
the user's own config sets ``[mcp] review_in_emacs`` and an Emacs is
connected, else through MCP elicitation when the client supports it;
otherwise it is not run, and the result says how to let it run.

This module needs the optional ``mcp`` extra (``pip install 'forj[mcp]'``).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import anyio
import anyio.to_thread
import mcp_types as types
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from .. import __version__
from ..errors import ProtocolError
from ..protocol import Event
from ..service import Caller, Worker
from ..tools import builtin_registry
from . import rendezvous, standalone
from .client import Client, ConnectionLost, RemoteError

log = logging.getLogger(__name__)

READ_FIRST = (
    " Read the file with this server's read_file first: forj refuses to change a file "
    "it has not read, or that changed since it was read (re-read it after a stale-file error)."
)

INSTRUCTIONS = (
    "forj's tools work inside one project directory, checked against a JSON Schema, "
    "the user's permission rules, a sandbox and a journal; every changed file is backed "
    "up. Paths are relative to the project root. Read files through forj (read_file) "
    "before editing them with forj's edit tools. A call the user must review is asked "
    "for through your client when it can, else refused with the rule that would allow "
    "it. Errors carry type, message, details (kind, and code such as E_FILE_IO or "
    "E_POLICY) and recovery: the steps to take next."
)

# What the user is asked: approve or not, with an optional reason for the model.
APPROVAL_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "approve": {
            "type": "boolean",
            "title": "Run this call",
            "description": "Yes runs it exactly as shown; no refuses it",
            "default": False,
        },
        "reason": {
            "type": "string",
            "title": "Reason (when refusing)",
            "description": "Told to the model, so it can change its approach",
        },
    },
    "required": ["approve"],
}

# The preview shown in an approval request is cut here; the journal has all of it.
MAX_PREVIEW_CHARS = 20_000


@dataclass(frozen=True)
class Decision:
    """The answer to one review: approved (perhaps edited, perhaps with a
    standing grant), denied with the user's reason, or refused because
    nobody could review it (``unreviewed``; the reason says why)."""

    approved: bool
    reason: str = ""
    modified: dict[str, str] = field(default_factory=dict)
    grant: dict[str, Any] | None = None
    unreviewed: bool = False


class BackendLost(Exception):
    """The worker this server sends its calls to is gone."""


class Backend(Protocol):
    """Where the calls go: a worker in this process, or the project's running worker."""

    def tool_definitions(self) -> dict[str, Any]: ...

    def plan(self, body: dict[str, Any]) -> dict[str, Any]: ...

    def execute(self, body: dict[str, Any]) -> dict[str, Any]: ...

    def review(self, body: dict[str, Any]) -> dict[str, Any]: ...


class LocalBackend:
    """A worker of this process's own, over the stores it shares with other workers."""

    def __init__(self, worker: Worker) -> None:
        self.worker = worker
        # The one MCP client of this process: not the user, whatever it sends.
        self.caller = Caller("mcp", f"mcp-{uuid.uuid4().hex[:12]}")

    def tool_definitions(self) -> dict[str, Any]:
        return self.worker.tool_definitions({})

    def plan(self, body: dict[str, Any]) -> dict[str, Any]:
        return self.worker.plan(body, self.caller)

    def execute(self, body: dict[str, Any]) -> dict[str, Any]:
        reply = self.worker.execute(body, _ignore_event, self.caller)
        on_sent = getattr(reply, "on_sent", None)
        if on_sent is not None:
            on_sent()  # the journal notes that the result reached the client
        return reply

    def review(self, body: dict[str, Any]) -> dict[str, Any]:
        if not self.worker.config.mcp.review_in_emacs:
            why = "[mcp] review_in_emacs is not set in the user's own forj config"
        else:
            why = "no Emacs runs forj on this project (this MCP server runs its own worker)"
        return {"outcome": "unavailable", "why": why}


class RemoteBackend:
    """The worker Emacs started for the project, reached through the rendezvous."""

    def __init__(self, client: Client) -> None:
        self.client = client

    def _call(self, method: str, body: dict[str, Any], timeout: float | None) -> dict[str, Any]:
        try:
            reply: dict[str, Any] = self.client.call(method, body, timeout=timeout)
        except RemoteError as exc:
            recovery = exc.error.get("recovery")
            raise ProtocolError(
                exc.type,
                str(exc.error.get("message", exc)),
                [str(r) for r in recovery] if isinstance(recovery, list) else None,
            ) from None
        except ConnectionLost as exc:
            raise BackendLost(str(exc)) from None
        return reply

    def tool_definitions(self) -> dict[str, Any]:
        return self._call("tool_definitions", {}, 30.0)

    def plan(self, body: dict[str, Any]) -> dict[str, Any]:
        return self._call("plan", body, None)

    def execute(self, body: dict[str, Any]) -> dict[str, Any]:
        return self._call("execute", body, None)

    def review(self, body: dict[str, Any]) -> dict[str, Any]:
        return self._call("review", body, None)


class McpTools:
    """The MCP handlers over one :class:`Backend`: this process's worker, or Emacs's."""

    def __init__(self, backend: Backend) -> None:
        self.backend = backend
        # Each client connection is a chat of its own: its session grants
        # and deduplication stay apart from every other's.
        self.session = f"mcp-{uuid.uuid4().hex[:12]}"
        self.tool_flags = builtin_registry()

    # --- tools/list -------------------------------------------------------------

    async def tools(self) -> list[types.Tool]:
        definitions = await anyio.to_thread.run_sync(self.backend.tool_definitions)
        out = []
        for d in definitions["tools"]:
            entry = self.tool_flags.get(d["name"])
            writes = entry is not None and entry.info.side_effecting
            # Commands and calls matched by words (curl, push, pull) change no file.
            commands = entry is not None and (entry.info.runs_commands or entry.info.matches_words)
            description = d["description"]
            if writes and not commands:
                description += READ_FIRST
            out.append(
                types.Tool(
                    name=d["name"],
                    description=description,
                    input_schema=d["parameters"],
                    annotations=types.ToolAnnotations(
                        read_only_hint=not writes,
                        destructive_hint=writes,
                        open_world_hint=commands,
                    ),
                )
            )
        return out

    # --- tools/call -------------------------------------------------------------

    async def call(
        self, ctx: ServerRequestContext[Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        call_id = f"mcp-{uuid.uuid4().hex[:12]}"
        call = {"id": call_id, "name": params.name, "args": params.arguments or {}}
        try:
            plan = await anyio.to_thread.run_sync(
                self.backend.plan, {"calls": [call], "session": self.session}
            )
            item = plan["items"][0]
            body: dict[str, Any] = {"batch_id": plan["batch_id"]}
            if item["disposition"] == "confirm":
                decision = await self._review(ctx, plan["batch_id"], item)
                if decision.approved:
                    body["approved"] = [call_id]
                    if decision.modified:
                        body["modified"] = {call_id: decision.modified}
                    if decision.grant:
                        body["grants"] = {call_id: decision.grant}
                elif decision.unreviewed:
                    body["unreviewed"] = {call_id: decision.reason}
                else:
                    body["denied"] = {call_id: decision.reason}
            reply = await anyio.to_thread.run_sync(self.backend.execute, body)
        except ProtocolError as exc:  # not expected for one call; say so rather than hang
            return _text_result({"error": exc.wire()}, error=True)
        except BackendLost as exc:
            return _text_result(_worker_gone(str(exc)), error=True)
        result = reply["results"][0]
        if result.get("ok"):
            return _text_result(result.get("result"), error=False)
        return _text_result(result.get("error"), error=True)

    async def _review(
        self, ctx: ServerRequestContext[Any], batch_id: str, item: dict[str, Any]
    ) -> Decision:
        """Ask the user in Emacs, else through the client; else refuse, saying why."""
        why: list[str] = []
        asked = await anyio.to_thread.run_sync(
            self.backend.review,
            {"batch_id": batch_id, "call_id": item["id"], "client": _client_name(ctx)},
        )
        if asked["outcome"] == "approved":
            return Decision(True, modified=asked.get("modified") or {}, grant=asked.get("grant"))
        if asked["outcome"] == "denied":
            return Decision(False, str(asked.get("reason") or ""))
        why.append(str(asked.get("why") or "Emacs cannot review it"))
        if not _can_elicit(ctx):
            why.append("this MCP client cannot ask the user (no elicitation)")
            return Decision(False, "; ".join(why), unreviewed=True)
        try:
            answer = await ctx.session.elicit_form(
                _review_message(item), APPROVAL_SCHEMA, related_request_id=ctx.request_id
            )
        except Exception as exc:  # the client failed to ask: never run unreviewed
            log.warning("elicitation failed: %s", exc)
            why.append(f"asking through the client failed ({exc})")
            return Decision(False, "; ".join(why), unreviewed=True)
        content = answer.content or {}
        if answer.action == "accept" and content.get("approve") is True:
            return Decision(True)
        reason = content.get("reason") if answer.action == "accept" else None
        if isinstance(reason, str) and reason.strip():
            return Decision(False, reason.strip()[:2000])
        if answer.action == "cancel":
            return Decision(False, "the user dismissed the review without answering")
        return Decision(False, "")


def _ignore_event(event: Event) -> None:
    """Events (a command's live output) have no MCP counterpart here; results carry it all."""


def _ignore_event_json(event: dict[str, Any]) -> None:
    """The same, for events the running worker sends over EPC."""


def _can_elicit(ctx: ServerRequestContext[Any]) -> bool:
    # Protocol 2026-07-28 asks through an InputRequiredResult and a retried
    # call instead of a request in the middle of one; forj does not speak it yet.
    if ctx.protocol_version in MODERN_PROTOCOL_VERSIONS:
        return False
    caps = ctx.session.client_capabilities
    if caps is None or caps.elicitation is None:
        return False
    el = caps.elicitation
    # An empty elicitation capability means form mode (older clients).
    return el.form is not None or el.url is None


def _client_name(ctx: ServerRequestContext[Any]) -> str:
    params = ctx.session.client_params
    info = params.client_info if params is not None else None
    if info is None or not info.name.strip():
        return "an MCP client"
    version = f" {info.version}" if info.version else ""
    return f"{info.name.strip()}{version}"[:200]


def _worker_gone(why: str) -> dict[str, Any]:
    return {
        "type": "execution-error",
        "message": f"The forj worker this server sends its calls to is gone ({why}); "
        "the call may or may not have run",
        "details": {"kind": "ExecutionFailed"},
        "recovery": [
            "Read the files the call touches to see whether it ran",
            "Restart this MCP server (it then finds the project's new worker, or runs its own)",
        ],
    }


def _review_message(item: dict[str, Any]) -> str:
    parts = [f"forj: approve {item['name']}? {item.get('summary', '')}".rstrip()]
    parts += [f"Warning: {w}" for w in item.get("warnings") or []]
    parts += list(item.get("notes") or [])
    if item.get("reason"):
        parts.append(f"Why asked: {item['reason']}")
    preview = item.get("preview")
    if preview:
        parts.append(_cut_preview(preview))
    return "\n\n".join(parts)


def _cut_preview(preview: str) -> str:
    """The preview, or its head cut at a line's end and exactly how much is not shown."""
    if len(preview) <= MAX_PREVIEW_CHARS:
        return preview
    head = preview[:MAX_PREVIEW_CHARS]
    if "\n" in head:
        head = head[: head.rindex("\n") + 1]
    rest = preview[len(head) :]
    lines = rest.count("\n") + (0 if rest.endswith("\n") else 1)
    return (
        f"{head}[preview cut here: {len(rest)} more characters in {lines} more line(s) are "
        "not shown; the whole preview is journaled]"
    )


def _text_result(value: Any, *, error: bool) -> types.CallToolResult:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, indent=1)
    structured = value if isinstance(value, dict) else None
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=text)],
        structured_content=structured,
        is_error=error,
    )


def build_server(backend: Backend) -> Server[Any]:
    handlers = McpTools(backend)

    async def list_tools(
        ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        return types.ListToolsResult(tools=await handlers.tools())

    return Server(
        "forj",
        version=__version__,
        instructions=INSTRUCTIONS,
        on_list_tools=list_tools,
        on_call_tool=handlers.call,
    )


# --- start-up ------------------------------------------------------------------


def _args(argv: list[str]) -> argparse.Namespace:
    return standalone.parser(
        "python -m forj_py mcp", "Serve forj's tools over MCP on stdio."
    ).parse_args(argv)


def main(argv: list[str]) -> int:
    args = _args(argv)
    standalone.log_to_stderr(args.log_level)
    try:
        found = standalone.setup(args)
    except standalone.StartError as exc:
        return _fail(str(exc))
    client = _join_running_worker(found.state_dir, os.path.realpath(found.root))
    if client is not None:
        try:
            anyio.run(_serve, RemoteBackend(client))
        finally:
            client.close()
        return 0
    try:
        with standalone.own_worker(found) as worker:
            anyio.run(_serve, LocalBackend(worker))
    except standalone.StartError as exc:
        return _fail(str(exc))
    return 0


def _join_running_worker(state_dir: Path, root: str) -> Client | None:
    """A connection to the worker Emacs runs for ``root``, proven with its secret; or None."""
    try:
        found = rendezvous.find(state_dir, root)
    except rendezvous.RendezvousRefused as exc:
        log.warning("not joining the running worker: %s; running a worker of my own", exc)
        return None
    if found is None:
        log.info("no worker runs for %s; running a worker of my own", root)
        return None
    try:
        client = Client(found.port, on_event=_ignore_event_json)
    except OSError as exc:
        log.warning("cannot reach the worker on port %d (%s); running my own", found.port, exc)
        return None
    try:
        client.call("hello", {"token": found.secret, "client": {"name": "forj mcp"}})
    except (RemoteError, ConnectionLost, TimeoutError) as exc:
        log.warning("the worker on port %d refused this server: %s", found.port, exc)
        client.close()
        return None
    log.info("joined the worker on port %d for %s", found.port, root)
    return client


async def _serve(backend: Backend) -> None:
    server = build_server(backend)
    async with stdio_server() as (read_stream, write_stream):
        await server.run(read_stream, write_stream, server.create_initialization_options())


def _fail(message: str) -> int:
    print(f"forj mcp: {message}", file=sys.stderr, flush=True)
    return 2
