"""Where the worker finds the programs it runs itself, outside the command sandbox.

git (and what git starts: ssh, gpg) and ripgrep run with the
user's rights, unconfined.  A command in the sandbox may write the project,
so none of them may be looked up there: not through an entry of ``PATH``
inside the project (direnv's ``PATH_add bin``, ``node_modules/.bin``) nor
through an empty or relative entry (the working directory, where git runs:
the project root).
"""

from __future__ import annotations

import os


def program_path(path: str, root: str | None) -> str:
    """``path`` (a ``PATH`` value) without relative entries and entries inside ``root``."""
    real_root = os.path.realpath(root) if root else None
    kept = []
    for entry in path.split(os.pathsep):
        if not os.path.isabs(entry):
            continue
        if real_root is not None:
            real = os.path.realpath(entry)
            if real == real_root or real.startswith(real_root.rstrip(os.sep) + os.sep):
                continue
        kept.append(entry)
    return os.pathsep.join(kept) or "/usr/bin:/bin"
