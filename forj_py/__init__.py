"""forj's worker: validates, sandboxes, journals and executes a model's tool calls.

Started by Emacs once per project (``python -m forj_py --root DIR``) and
spoken to over EPC; see ``docs/protocol.md`` for the methods.
"""

__version__ = "0.1.0"
