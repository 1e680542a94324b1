"""An MCP client for the Emacs tests: another agent using forj through MCP.

``python mcp_client.py ROOT PATH OLD NEW`` starts ``python -m forj_py mcp
--root ROOT`` (config and state from the environment, as Emacs's worker
has them), connects with the official MCP SDK's client over stdio, reads
PATH through forj, then asks to replace OLD with NEW in it.  It prints one
JSON line: ``{"read": {...}, "edit": {...}}``, each with ``is_error`` and
the decoded text of the result.  The client declares no elicitation, so a
review can only happen in Emacs.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

import anyio
import mcp_types as types
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client


def _decoded(result: types.CallToolResult) -> dict[str, Any]:
    text = result.content[0].text if isinstance(result.content[0], types.TextContent) else ""
    try:
        body = json.loads(text)
    except ValueError:
        body = text
    return {"is_error": bool(result.is_error), "body": body}


async def _run(root: str, path: str, old: str, new: str) -> dict[str, Any]:
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "forj_py", "mcp", "--root", root, "--log-level", "INFO"],
        cwd=root,
        # The SDK passes on only a few variables by default; forj's config and
        # state locations must reach the server, as they reach Emacs's worker.
        env=dict(os.environ),
    )
    async with (
        stdio_client(params, errlog=sys.stderr) as (read, write),
        ClientSession(
            read, write, client_info=types.Implementation(name="test-agent", version="1.0")
        ) as session,
    ):
        await session.initialize()
        with anyio.fail_after(120):
            first = await session.call_tool("read_file", {"path": path})
            second = await session.call_tool(
                "edit", {"path": path, "old_string": old, "new_string": new}
            )
    return {"read": _decoded(first), "edit": _decoded(second)}


def main() -> None:
    root, path, old, new = sys.argv[1:5]
    print(json.dumps(anyio.run(_run, root, path, old, new)), flush=True)


if __name__ == "__main__":
    main()
