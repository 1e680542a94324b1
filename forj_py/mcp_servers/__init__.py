"""Outside MCP servers: tools of servers the user configured, offered to the chat.

The user's own config file names each server under ``[mcp.servers.NAME]``
(a project's file cannot: see ``config.py``).  The worker starts them in
the background when it starts (:class:`~.client.Servers`): a program
speaking MCP on stdin and stdout, started with a clean environment, or a
streamable HTTP endpoint.  Each tool a server lists becomes a forj tool
named ``mcp__NAME__TOOL`` (:mod:`.tools`), with the server's input schema
checked first; from there on it is a tool like any other: planned, judged
by the permission rules (it always asks unless a rule, a grant or the auto
mode says otherwise), reviewed, journaled, and its result sanitized,
redacted and fitted to the output budget before the model sees it.
"""

from __future__ import annotations

from .client import Servers, ServerTool
from .tools import outside_tool, tool_name

__all__ = ["ServerTool", "Servers", "outside_tool", "tool_name"]
