"""A real MCP server for the tests of forj's outside MCP servers, built on the MCP SDK.

``python mcp_probe_server.py`` serves on stdio; ``http PORT`` on streamable
HTTP at http://127.0.0.1:PORT/mcp.  Two more ways to start show how forj
copes with a server gone wrong: ``garbage`` writes what is not JSON-RPC
to stdout and never answers, ``die`` writes a reason to stderr and exits,
``slow SECONDS`` waits that long before it serves on stdio.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from mcp.server.mcpserver import MCPServer

app = MCPServer("probe")


@app.tool()
def echo(text: str) -> str:
    """Return the text as given."""
    return text


@app.tool()
def has_env(variable: str) -> str:
    """Say whether the environment variable is set (and how long it is), not its value."""
    value = os.environ.get(variable)
    return "unset" if value is None else f"set, {len(value)} characters"


@app.tool()
def say_env(variable: str) -> str:
    """Return the value of an environment variable."""
    return f"{variable} is {os.environ.get(variable, '')}"


@app.tool()
def touch(path: str) -> str:
    """Create a file: a call with an effect forj cannot see."""
    Path(path).write_text("touched\n", encoding="utf-8")
    return f"created {path}"


@app.tool()
def big(kib: int) -> str:
    """Return about KIB kibibytes of text."""
    return ("0123456789abcdef" * 64 + "\n") * kib


@app.tool()
def noisy() -> str:
    """Return text with terminal controls and a credential in it."""
    return "\x1b[31mred\x1b[0m \x1b]0;title\x07 api_key=sk-ant-api03-AAAAAAAAAAAAAAAAAAAAAAAA done"


@app.tool()
def nap(seconds: float) -> str:
    """Sleep, then answer."""
    time.sleep(seconds)
    return "awake"


@app.tool()
def mark_and_wait(path: str, seconds: float) -> str:
    """Append a line to a file, then sleep: each start of the call leaves one line."""
    with open(path, "a", encoding="utf-8") as f:
        f.write("started\n")
    time.sleep(seconds)
    return "done"


@app.tool()
def crash() -> str:
    """Exit the server at once, in the middle of the call."""
    sys.stderr.write("probe: crashing on purpose\n")
    sys.stderr.flush()
    os._exit(3)


@app.tool()
def fail() -> str:
    """Raise: the server answers with an error result."""
    raise ValueError("the probe was asked to fail")


def main() -> None:
    mode = sys.argv[1] if len(sys.argv) > 1 else "stdio"
    if mode == "http":
        app.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]))
    elif mode == "garbage":
        sys.stdout.write("hello, this is not JSON-RPC\n{]not json either\n")
        sys.stdout.flush()
        time.sleep(3600)
    elif mode == "slow":
        time.sleep(float(sys.argv[2]))
        app.run()
    elif mode == "die":
        sys.stderr.write("probe: missing PROBE_DATABASE, cannot start\n")
        sys.exit(3)
    else:
        app.run()


if __name__ == "__main__":
    main()
