"""Runs one repository hook inside the command sandbox; git starts this, not the hook.

When the user's own file sets ``[tools.git] run_hooks = true``, the git
tools point ``core.hooksPath`` at a private directory of small scripts,
one per hook the repository has, each of which runs this file with the
request the worker wrote (:func:`forj_py.system.hooks.HookGate`).  This
file then replaces itself with bubblewrap running the real hook: the
sandbox's command line and the clean environment come from the worker,
and of git's own environment only the variables a hook needs to find the
repository pass.  It imports nothing of forj's (it runs with ``python -I``).
"""

from __future__ import annotations

import json
import os
import sys

# What git tells a hook, besides its arguments and standard input.
_PASSED = (
    "GIT_DIR",
    "GIT_INDEX_FILE",
    "GIT_PREFIX",
    "GIT_AUTHOR_NAME",
    "GIT_AUTHOR_EMAIL",
    "GIT_AUTHOR_DATE",
    "GIT_COMMITTER_NAME",
    "GIT_COMMITTER_EMAIL",
    "GIT_COMMITTER_DATE",
    "GIT_REFLOG_ACTION",
    "GIT_PUSH_OPTION_COUNT",
)


def main(argv: list[str]) -> int:
    request_path, name, *args = argv[1:]
    with open(request_path, encoding="utf-8") as f:
        request = json.load(f)
    hook = os.path.join(request["hooks_dir"], name)
    if not os.access(hook, os.X_OK):
        return 0  # git would not have run it either
    env = dict(request["env"])
    for key, value in os.environ.items():
        if key in _PASSED or key.startswith("GIT_PUSH_OPTION_"):
            env[key] = value
    command = [*request["sandbox"], hook, *args]
    os.execve(command[0], command, env)  # noqa: S606  (bwrap, from the worker)
    return 127  # execve does not return


if __name__ == "__main__":
    sys.exit(main(sys.argv))
