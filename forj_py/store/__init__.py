"""What the worker keeps across calls and restarts, in SQLite files of its own.

The journal (every call and result), the backups and the change log of
each writing call (what undo puts back), standing grants, the plan stores
of ``todo_write`` and ``task``, and the AST index.
"""
