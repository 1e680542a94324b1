"""An outside server's tool as a forj tool: checked when listed, reviewed, its result cleaned.

What a server lists is not taken on trust, even from a server the user
chose: a name that is not a valid tool name, a schema that is not a JSON
Schema of an object (or points outside itself, or is huge) leaves that
tool out, with a warning naming server and tool.  The description is
cleaned of controls and cut.

Every call always asks (``requires_approval``) unless the user's rules, a
standing grant or the auto mode say otherwise: forj cannot see what the
server does, so nothing a server says about its tool (MCP's "read-only"
hints) makes a call run unasked.  The review shows the server, what it
is (command or URL), the tool and the arguments in full.  The result's
text is cut to the output budget, credentials in it (and the values the
user gave this server in ``env`` or ``headers``) are redacted, and the
executor removes controls from it, as for every result.
"""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING, Any, ClassVar

from pydantic import BaseModel, ConfigDict

from .. import errors
from ..config import Config
from ..output import REDACTED, redact, sanitize, truncate_text, utf8_len
from ..protocol import ErrorKind, ErrorType
from ..safety import secretenv
from ..tools.registry import Tool, ToolContext

if TYPE_CHECKING:
    from .client import Servers, ServerTool

PREFIX = "mcp__"
TOOL_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}\Z")
MAX_NAME = 64
MAX_DESCRIPTION = 2000
MAX_SCHEMA_BYTES = 32 * 1024
# The most of the arguments a review shows: larger arguments are refused, never cut.
MAX_PREVIEW_BYTES = 64 * 1024


def tool_name(server: str, name: str) -> str:
    """The name the model calls a server's tool by."""
    return f"{PREFIX}{server}__{name}"


class OutsideArgs(BaseModel):
    """Whatever the server's schema allows: the schema itself is checked before parsing."""

    model_config = ConfigDict(extra="allow")


class OutsideTool(Tool[OutsideArgs]):
    """A tool of an outside MCP server; :func:`outside_tool` makes one class per tool."""

    name: ClassVar[str] = "mcp__server__tool"
    description: ClassVar[str] = "A tool of an outside MCP server."
    Args: ClassVar[type[BaseModel]] = OutsideArgs
    side_effecting = True
    requires_approval = True
    server: ClassVar[str] = ""
    remote: ClassVar[str] = ""
    servers: ClassVar[Servers | None] = None

    def _arguments(self, args: OutsideArgs) -> dict[str, Any]:
        return dict(args.model_extra or {})

    def summary(self, args: OutsideArgs) -> str:
        shown = json.dumps(self._arguments(args), ensure_ascii=False, sort_keys=True)
        if len(shown) > 160:
            shown = shown[:159] + "…"
        return f"MCP server {self.server}: {self.remote} {shown}"

    def summary_tags(self, args: OutsideArgs, ctx: ToolContext) -> list[str]:
        return [f"mcp {self.server}"]

    def preview(self, args: OutsideArgs, ctx: ToolContext) -> str | None:
        target = self.servers.target(self.server) if self.servers is not None else "?"
        shown = json.dumps(self._arguments(args), ensure_ascii=False, indent=2, sort_keys=True)
        if utf8_len(shown) > MAX_PREVIEW_BYTES:
            # Cut, the review would hide the end of what the server is sent.
            raise errors.limits_exceeded(
                f"The arguments to {self.name} are {utf8_len(shown)} bytes, over the "
                f"{MAX_PREVIEW_BYTES} bytes a review shows in full",
                ["Send smaller arguments (split the work into several calls)"],
                size=utf8_len(shown),
                limit=MAX_PREVIEW_BYTES,
            )
        lines = [
            f"MCP server: {self.server} ({target})",
            f"tool: {self.remote}",
            "What the tool does is up to the server: forj cannot review, sandbox or undo it.",
            "arguments:",
            redact(shown),
        ]
        return "\n".join(lines)

    def timeout(self, config: Config) -> float:
        server = config.mcp.servers.get(self.server)
        # The server's own limit, and a margin for the call to say it timed out itself.
        return (server.timeout_seconds if server is not None else 120.0) + 5.0

    def execute(self, args: OutsideArgs, ctx: ToolContext) -> Any:
        servers = self.servers
        if servers is None:
            raise errors.process_error(
                f"MCP server {self.server!r} is not available in this worker",
                recovery=["Tell the user; the worker may need a restart"],
            )
        limit = servers.config(self.server).timeout_seconds
        if ctx.time_limit is not None:
            limit = min(limit, max(ctx.time_limit - 5.0, 1.0))
        result = servers.call(self.server, self.remote, self._arguments(args), limit, ctx.cancel)
        cfg = servers.config(self.server)
        secrets = [*secretenv.held_values(), *cfg.env.values(), *cfg.headers.values()]
        return shown_result(self.server, self.remote, result, ctx.output_limit, secrets)


def shown_result(
    server: str, tool: str, result: dict[str, Any], limit: int, secrets: list[str]
) -> dict[str, Any]:
    """What the model sees of a ``CallToolResult``: its text, cut and redacted.

    Images, audio and embedded blobs are named with their size, not
    passed on (the model reads text here).  A result the server marked as
    an error becomes a tool error carrying the same text.
    """
    content = result.get("content")
    parts: list[Any] = []
    for block in content if isinstance(content, list) else []:
        parts.append(_block(block, limit, secrets))
    shown: dict[str, Any] = {"server": server, "tool": tool, "content": parts}
    structured = result.get("structured_content", result.get("structuredContent"))
    if structured is not None:
        text = json.dumps(structured, ensure_ascii=False)
        if utf8_len(text) <= limit:
            shown["structured_content"] = _redacted(structured, secrets)
        else:
            shown["structured_content_omitted_bytes"] = utf8_len(text)
    if result.get("is_error") or result.get("isError"):
        message = " ".join(p for p in parts if isinstance(p, str))[:4000]
        raise errors.ToolFailure(
            ErrorType.PROCESS,
            f"MCP server {server!r}: {tool} reported an error: {message or '(no text)'}",
            kind=ErrorKind.EXECUTION_FAILED,
            recovery=["Read the server's message; fix the arguments or use another tool"],
            server=server,
        )
    return shown


def _block(block: Any, limit: int, secrets: list[str]) -> Any:
    if not isinstance(block, dict):
        return f"[a content block that is not an object: {type(block).__name__}]"
    kind = block.get("type")
    if kind == "text" and isinstance(block.get("text"), str):
        return truncate_text(redact(block["text"], secrets), limit)
    if kind == "resource" and isinstance(block.get("resource"), dict):
        resource = block["resource"]
        if isinstance(resource.get("text"), str):
            text = truncate_text(redact(resource["text"], secrets), limit)
            return {"resource": redact(str(resource.get("uri", "")), secrets), "text": text}
    if kind == "resource_link":
        return {"resource_link": redact(str(block.get("uri", "")), secrets)}
    data = block.get("data")
    if not isinstance(data, str):
        resource = block.get("resource")
        data = resource.get("blob") if isinstance(resource, dict) else None
    size = len(data) * 3 // 4 if isinstance(data, str) else 0
    mime = block.get("mime_type", block.get("mimeType", ""))
    return f"[{kind} content, {mime or 'unknown type'}, about {size} bytes: not shown]"


def _redacted(value: Any, secrets: list[str]) -> Any:
    if isinstance(value, str):
        return redact(value, secrets)
    if isinstance(value, dict):
        return {str(k): _redacted(v, secrets) for k, v in value.items()}
    if isinstance(value, list):
        return [_redacted(v, secrets) for v in value]
    return value


def checked(listed: ServerTool) -> tuple[str, str, dict[str, Any]] | str:
    """A listed tool's (name, description, schema), or why it is left out."""
    from jsonschema import Draft202012Validator
    from jsonschema.exceptions import SchemaError

    name = tool_name(listed.server, listed.name)
    where = f"MCP server {listed.server!r}: tool {listed.name[:80]!r}"
    if not TOOL_NAME.match(listed.name) or len(name) > MAX_NAME:
        return (
            f"{where} left out: its name must be letters, digits, _ and - and fit "
            f"{MAX_NAME} characters as {tool_name(listed.server, '…')}"
        )
    schema = listed.schema
    if not isinstance(schema, dict) or schema.get("type") != "object":
        return f'{where} left out: its input schema is not a JSON Schema with type "object"'
    try:
        size = len(json.dumps(schema))
    except (TypeError, ValueError):
        return f"{where} left out: its input schema is not JSON"
    if size > MAX_SCHEMA_BYTES:
        return f"{where} left out: its input schema is {size} bytes, over {MAX_SCHEMA_BYTES}"
    try:
        Draft202012Validator.check_schema(schema)
    except SchemaError as exc:
        return f"{where} left out: its input schema is not valid JSON Schema: {exc.message[:200]}"
    if _outward_ref(schema):
        # Checking a call would fetch a URL or read a file.
        return f"{where} left out: its input schema has a $ref outside itself"
    loop = _ref_loop(schema)
    if loop:
        # Checking a call would follow the references without end.
        return f"{where} left out: its input schema's $ref {loop}"
    if _has_keyword(schema, "patternProperties"):
        return (
            f"{where} left out: its input schema has patternProperties "
            "(regular expressions forj would have to run on each call)"
        )
    # Python's re has no time limit: a pattern like ^(a+)+$ would hold the
    # review for hours.  The server checks its own patterns.
    schema = _without_patterns(schema)
    text = sanitize(listed.description).strip() or f"The {listed.name} tool."
    if len(text) > MAX_DESCRIPTION:
        text = text[: MAX_DESCRIPTION - 1] + "…"
    description = f"{text}\n(Tool {listed.name!r} of the outside MCP server {listed.server!r}.)"
    return name, description, schema


# Keywords whose value is a map of names to schemas, a list of schemas, one schema.
_SCHEMA_MAPS = ("properties", "$defs", "definitions", "dependentSchemas", "patternProperties")
_SCHEMA_LISTS = ("allOf", "anyOf", "oneOf", "prefixItems")
_SCHEMA_ONE = (
    "items",
    "additionalItems",
    "additionalProperties",
    "not",
    "if",
    "then",
    "else",
    "contains",
    "propertyNames",
    "unevaluatedItems",
    "unevaluatedProperties",
)
# Schema nodes a reference check visits before it gives up on a schema.
MAX_REF_VISITS = 20_000


def _subschemas(node: dict[str, Any]) -> list[Any]:
    found: list[Any] = []
    for key, value in node.items():
        if key in _SCHEMA_MAPS and isinstance(value, dict):
            found += value.values()
        elif key in _SCHEMA_LISTS and isinstance(value, list):
            found += value
        elif key in _SCHEMA_ONE:
            found.append(value)
    return found


def _has_keyword(node: Any, keyword: str) -> bool:
    if not isinstance(node, dict):
        return False
    return keyword in node or any(_has_keyword(sub, keyword) for sub in _subschemas(node))


def _without_patterns(node: Any) -> Any:
    """``node`` without its ``pattern`` keywords (a property named pattern stays)."""
    if not isinstance(node, dict):
        return node
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key == "pattern" and isinstance(value, str):
            continue
        if key in _SCHEMA_MAPS and isinstance(value, dict):
            out[key] = {name: _without_patterns(sub) for name, sub in value.items()}
        elif key in _SCHEMA_LISTS and isinstance(value, list):
            out[key] = [_without_patterns(sub) for sub in value]
        elif key in _SCHEMA_ONE:
            out[key] = _without_patterns(value)
        else:
            out[key] = value
    return out


def _ref_loop(schema: dict[str, Any]) -> str | None:
    """Why the schema's references could be followed without end, or None.

    Stricter than a validator needs: any reference that leads back to
    itself is refused (a recursive tree schema too), as is a reference
    forj cannot resolve within the schema, and a schema whose references
    expand past :data:`MAX_REF_VISITS` nodes.
    """
    visits = 0

    def resolve(ref: str) -> Any:
        if ref == "#":
            return schema
        if not ref.startswith("#/"):
            raise LookupError(ref)
        node: Any = schema
        for part in ref[2:].split("/"):
            part = part.replace("~1", "/").replace("~0", "~")
            if isinstance(node, dict) and part in node:
                node = node[part]
            elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
                node = node[int(part)]
            else:
                raise LookupError(ref)
        return node

    def walk(node: Any, following: tuple[str, ...]) -> str | None:
        nonlocal visits
        visits += 1
        if visits > MAX_REF_VISITS:
            return f"references expand past {MAX_REF_VISITS} schema nodes"
        if not isinstance(node, dict):
            return None
        for key in ("$dynamicRef", "$recursiveRef"):
            if key in node:
                return f"uses {key}, which forj does not follow"
        ref = node.get("$ref")
        if isinstance(ref, str):
            if ref in following:
                return f"{ref!r} leads back to itself"
            try:
                target = resolve(ref)
            except LookupError:
                return f"{ref!r} names nothing forj can find in the schema"
            found = walk(target, (*following, ref))
            if found:
                return found
        for sub in _subschemas(node):
            found = walk(sub, following)
            if found:
                return found
        return None

    return walk(schema, ())


def _outward_ref(node: Any) -> bool:
    if isinstance(node, dict):
        for key, value in node.items():
            if key in ("$ref", "$dynamicRef") and isinstance(value, str):
                if not value.startswith("#"):
                    return True
            elif _outward_ref(value):
                return True
    elif isinstance(node, list):
        return any(_outward_ref(item) for item in node)
    return False


def outside_tool(
    servers: Servers, server: str, remote: str, name: str, description: str
) -> OutsideTool:
    """A tool object for ``remote`` of ``server``, called ``name`` in forj."""
    cls = type(
        "Outside_" + re.sub(r"\W", "_", name),
        (OutsideTool,),
        {
            "name": name,
            "description": description,
            "server": server,
            "remote": remote,
            "servers": servers,
        },
    )
    tool: OutsideTool = cls()
    return tool


__all__ = ["REDACTED", "OutsideTool", "checked", "outside_tool", "shown_result", "tool_name"]
