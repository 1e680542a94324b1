"""forj's worker: validates, sandboxes, journals and executes a model's tool calls.

Started by Emacs once per project (``python -m forj_py --root DIR``) and
spoken to over EPC; see ``docs/protocol.md`` for the methods.  The same
tools also serve other agents over MCP (``python -m forj_py mcp``) and as
JSON lines (``python -m forj_py sdk``).
"""

__version__ = "0.1.0"
