"""The repository's hooks for one git operation: skipped, or run inside the command sandbox.

git would run a hook itself, as the worker, outside any sandbox: a hook is
a program whoever wrote the repository chose.  So every git run points
``core.hooksPath`` at ``/dev/null`` (:mod:`forj_py.system.git`), and the
tools pass ``--no-verify``.  When the user's own file sets ``[tools.git]
run_hooks = true``, the operation instead gets a private directory holding
one script per hook the repository has; each script runs
:mod:`forj_py.system.hookgate`, which starts the real hook under
bubblewrap, with the same confinement as a command (project read-write
only for a reviewed or allowed call, every ``.git`` read-only, secrets
masked, no network, a clean environment).  Where that sandbox is not
available (bubblewrap missing, ``sandbox = "none"``), or the work tree's
top is outside the project (the sandbox would not hold it), hooks are
skipped and the result says why: a hook never runs unconfined.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import sys
import tempfile
from dataclasses import dataclass, field

from ..safety.commands import CommandSandbox, Request

GATE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "hookgate.py")


@dataclass
class Hooks:
    """What one git operation does with the repository's hooks."""

    existing: list[str]  # the operation's hooks the repository has (executable)
    args: list[str] = field(default_factory=list)  # git options placed before the subcommand
    run: bool = False  # they run, in the sandbox
    reason: str | None = None  # why they are skipped although the user asked for them
    _dir: str | None = None

    def verify(self) -> list[str]:
        """``--no-verify`` unless the hooks run."""
        return [] if self.run else ["--no-verify"]

    def close(self) -> None:
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None

    def describe(self) -> dict[str, object]:
        if not self.existing:
            return {}
        names = ", ".join(self.existing)
        if self.run:
            return {
                "hooks_run": self.existing,
                "note": f"The repository's hooks ran inside the command sandbox ({names})",
            }
        why = self.reason or (
            "forj skips a repository's hooks unless your own config sets [tools.git] "
            "run_hooks = true"
        )
        return {
            "hooks_skipped": self.existing,
            "note": f"The repository's hooks did not run ({names}): {why}; run them yourself "
            "if they matter",
        }


def prepare(
    existing: list[str],
    *,
    enabled: bool,
    hooks_dir: str,
    toplevel: str,
    jail: CommandSandbox | None,
    env: dict[str, str],
    writable: bool,
) -> Hooks:
    """The hooks of one operation; the caller closes the result when git is done."""
    hooks = Hooks(existing)
    if not existing or not enabled:
        return hooks
    if jail is None or not jail.sandboxed:
        why = jail.availability.reason if jail is not None else "no sandbox here"
        hooks.reason = (
            f"the command sandbox is not available ({why}), and a hook never runs outside it"
        )
        return hooks
    root = jail.root
    if not (toplevel == root or toplevel.startswith(root.rstrip(os.sep) + os.sep)):
        hooks.reason = (
            f"the work tree's top ({toplevel}) is outside the project, where the sandbox "
            "cannot hold it"
        )
        return hooks
    sandbox = jail.argv(Request(toplevel, env, writable=writable, network=False), [])
    gate_dir = tempfile.mkdtemp(prefix="forj-hooks-")
    os.chmod(gate_dir, 0o700)
    request = os.path.join(gate_dir, "request.json")
    with open(request, "w", encoding="utf-8") as f:
        json.dump({"sandbox": sandbox, "hooks_dir": hooks_dir, "env": jail.launch_env(env)}, f)
    for name in existing:
        script = os.path.join(gate_dir, name)
        with open(script, "w", encoding="utf-8") as f:
            f.write(
                "#!/bin/sh\nexec "
                + shlex.join([sys.executable, "-I", "-S", GATE, request, name])
                + ' "$@"\n'
            )
        os.chmod(script, 0o700)
    hooks.args = ["-c", f"core.hooksPath={gate_dir}"]
    hooks.run = True
    hooks._dir = gate_dir
    return hooks
