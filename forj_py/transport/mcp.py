"""forj's tools served to other agents over MCP (stdio): ``python -m forj_py mcp``.

Each ``tools/call`` is one batch through the worker's own methods (plan,
then execute), so an MCP client's call meets exactly what a call from Emacs
meets: schema validation, the sandbox, permission rules and modes, the
stale-file rule, backups and the journal.  A call the consent stage sends
to review is put to the user through MCP elicitation when the client
supports it; otherwise it is not run, and the result says which
``[permissions] allow`` rule would let it run unasked.

This module needs the optional ``mcp`` extra (``pip install 'forj[mcp]'``).
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import mcp_types as types
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from .. import __version__
from ..config import ConfigError, load
from ..errors import ProtocolError
from ..protocol import Event
from ..service import Worker
from ..store.journal import Journal, JournalError, default_state_dir
from ..system import process
from ..tools import builtin_registry

log = logging.getLogger(__name__)

# The chat name MCP calls run under: their session grants and deduplication
# stay apart from every Emacs chat's.
MCP_SESSION = "mcp"

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
    """The user's answer to one review: approved, or denied with a reason."""

    approved: bool
    reason: str = ""


class McpTools:
    """The MCP handlers over one :class:`Worker`."""

    def __init__(self, worker: Worker) -> None:
        self.worker = worker

    # --- tools/list -------------------------------------------------------------

    def tools(self) -> list[types.Tool]:
        definitions = self.worker.tool_definitions({})
        out = []
        for d in definitions["tools"]:
            entry = self.worker.registry.get(d["name"])
            writes = entry is not None and entry.info.side_effecting
            commands = entry is not None and entry.info.runs_commands
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
                self.worker.plan, {"calls": [call], "session": MCP_SESSION}
            )
            item = plan["items"][0]
            approved: list[str] = []
            denied: dict[str, str] = {}
            if item["disposition"] == "confirm":
                decision = await self._review(ctx, item)
                if decision.approved:
                    approved.append(call_id)
                else:
                    denied[call_id] = decision.reason
            reply = await anyio.to_thread.run_sync(
                lambda: self.worker.execute(
                    {"batch_id": plan["batch_id"], "approved": approved, "denied": denied},
                    _ignore_event,
                )
            )
        except ProtocolError as exc:  # not expected for one call; say so rather than hang
            return _text_result({"error": exc.wire()}, error=True)
        on_sent = getattr(reply, "on_sent", None)
        result = reply["results"][0]
        if on_sent is not None:
            on_sent()  # the journal notes that the result reached the client
        if result.get("ok"):
            return _text_result(result.get("result"), error=False)
        return _text_result(result.get("error"), error=True)

    async def _review(self, ctx: ServerRequestContext[Any], item: dict[str, Any]) -> Decision:
        """Ask the user through the client, or refuse with the rule that would allow it."""
        if not _can_elicit(ctx):
            return Decision(False, _cannot_ask(item))
        try:
            answer = await ctx.session.elicit_form(
                _review_message(item), APPROVAL_SCHEMA, related_request_id=ctx.request_id
            )
        except Exception as exc:  # the client failed to ask: never run unreviewed
            log.warning("elicitation failed: %s", exc)
            return Decision(False, _cannot_ask(item, f"asking through the client failed ({exc})"))
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


def _cannot_ask(item: dict[str, Any], why: str | None = None) -> str:
    pattern = item.get("grant_pattern")
    rule = f' (this call: allow = ["{pattern}"])' if pattern else ""
    return (
        f"nobody reviewed it: {why or 'this MCP client cannot ask the user (no elicitation)'}. "
        "forj runs a call that needs review only when the user approves it, or when a "
        f"[permissions] allow rule in the user's forj config covers it{rule}. "
        "Tell the user what you wanted to do"
    )


def _review_message(item: dict[str, Any]) -> str:
    parts = [f"forj: approve {item['name']}? {item.get('summary', '')}".rstrip()]
    parts += [f"Warning: {w}" for w in item.get("warnings") or []]
    parts += list(item.get("notes") or [])
    if item.get("reason"):
        parts.append(f"Why asked: {item['reason']}")
    preview = item.get("preview")
    if preview:
        if len(preview) > MAX_PREVIEW_CHARS:
            preview = preview[:MAX_PREVIEW_CHARS] + "\n[preview cut; the whole diff is journaled]"
        parts.append(preview)
    return "\n\n".join(parts)


def _text_result(value: Any, *, error: bool) -> types.CallToolResult:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, indent=1)
    structured = value if isinstance(value, dict) else None
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=text)],
        structured_content=structured,
        is_error=error,
    )


def build_server(worker: Worker) -> Server[Any]:
    handlers = McpTools(worker)

    async def list_tools(
        ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        return types.ListToolsResult(tools=handlers.tools())

    return Server(
        "forj",
        version=__version__,
        instructions=INSTRUCTIONS,
        on_list_tools=list_tools,
        on_call_tool=handlers.call,
    )


# --- start-up ------------------------------------------------------------------


def _args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m forj_py mcp", description="Serve forj's tools over MCP on stdio."
    )
    p.add_argument("--root", required=True, help="the project root every path is confined to")
    p.add_argument("--config", help="the user's config file (default: $FORJ_CONFIG or XDG)")
    p.add_argument("--state-dir", help="where the journal lives (default: $FORJ_STATE_DIR or XDG)")
    p.add_argument("--log-level", default="WARNING", choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    return p.parse_args(argv)


def main(argv: list[str]) -> int:
    args = _args(argv)
    # stdout carries the protocol: every log line goes to stderr.
    logging.basicConfig(
        level=args.log_level,
        stream=sys.stderr,
        format="%(asctime)s %(name)s %(levelname)s %(message)s",
    )
    root = Path(args.root).expanduser()
    if not root.is_dir():
        return _fail(f"--root {args.root}: not a directory")
    try:
        loaded = load(root, args.config)
    except ConfigError as exc:
        return _fail(f"configuration error:\n{exc}")
    state_dir = Path(args.state_dir).expanduser() if args.state_dir else default_state_dir()
    try:
        journal = Journal(state_dir / "journal.sqlite3")
    except JournalError as exc:
        return _fail(str(exc))
    for warning in loaded.warnings:
        log.warning("%s", warning)
    if process.become_subreaper():
        process.start_reaper()
    try:
        worker = Worker(root, loaded, builtin_registry(), journal, state_dir)
    except ConfigError as exc:
        return _fail(f"configuration error:\n{exc}")
    worker.commands.start()
    worker.watcher.start()
    try:
        anyio.run(_serve, worker)
    finally:
        worker.watcher.stop()
        worker.cancel_all()
        worker.commands.close()
        journal.close()
    return 0


async def _serve(worker: Worker) -> None:
    server = build_server(worker)
    async with stdio_server() as (read_stream, write_stream):
        await server.run(read_stream, write_stream, server.create_initialization_options())


def _fail(message: str) -> int:
    print(f"forj mcp: {message}", file=sys.stderr, flush=True)
    return 2
