"""Which files hold uncommitted changes, as git sees them.

The worker asks git itself, outside the command sandbox, so nothing the
repository holds may start a program: commands the model runs can write
``.git/config`` (the sandbox lets them change the project), and a
``core.fsmonitor`` or a filter driver there would otherwise run here,
unsandboxed.  So every git run gets configuration that turns those off:
no fsmonitor, no hooks, no pager, no external diff, every filter driver
the configuration defines emptied (an empty driver is no driver), no
submodule recursion, no optional index locks.  A missing git, a directory
that is not a repository, or any failure means "nothing to say".
"""

from __future__ import annotations

import logging
import os
import subprocess
from collections.abc import Iterable

log = logging.getLogger(__name__)

TIMEOUT_SECONDS = 5.0

_SAFE = (
    "-c",
    "core.fsmonitor=false",
    "-c",
    "core.hooksPath=/dev/null",
    "-c",
    "core.pager=cat",
    "-c",
    "diff.external=",
    "-c",
    "safe.bareRepository=explicit",
    "-c",
    "submodule.recurse=false",
    "--no-pager",
)


def _env() -> dict[str, str]:
    """The worker's environment without any GIT_* setting that could redirect git."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env["GIT_OPTIONAL_LOCKS"] = "0"  # status must not rewrite the index
    env["GIT_TERMINAL_PROMPT"] = "0"
    env["LC_ALL"] = "C"
    return env


def _git(cwd: str, args: list[str]) -> bytes | None:
    try:
        done = subprocess.run(
            ["git", *_SAFE, *args],
            cwd=cwd,
            env=_env(),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=TIMEOUT_SECONDS,
            check=False,
        )
    except (OSError, subprocess.SubprocessError) as exc:
        log.debug("git %s: %s", args[:1], exc)
        return None
    if done.returncode != 0:
        return None
    return done.stdout


def _filter_overrides(cwd: str) -> list[str]:
    """``-c`` pairs that empty every filter driver the configuration names."""
    out = _git(cwd, ["config", "--null", "--name-only", "--get-regexp", r"^filter\."])
    if not out:
        return []
    drivers = set()
    for key in out.decode("utf-8", "surrogateescape").split("\0"):
        # filter.<driver>.<key>; the driver name may itself hold dots.
        if key.count(".") >= 2:
            drivers.add(key[len("filter.") : key.rindex(".")])
    pairs: list[str] = []
    for driver in sorted(drivers):
        for key, value in (("clean", ""), ("smudge", ""), ("process", ""), ("required", "false")):
            pairs += ["-c", f"filter.{driver}.{key}={value}"]
    return pairs


def uncommitted(root: str, paths: Iterable[str]) -> dict[str, str] | None:
    """Absolute path -> git's two-letter status, for those of ``paths`` that differ from HEAD.

    ``paths`` are absolute (canonical).  None when git cannot tell (no git,
    not a repository, a failure); an empty dict when every path is clean.
    """
    wanted = sorted(set(paths))
    if not wanted:
        return {}
    top = _git(root, ["rev-parse", "--show-toplevel"])
    if top is None:
        return None
    toplevel = os.path.realpath(top.decode("utf-8", "surrogateescape").strip())
    inside = [p for p in wanted if p == toplevel or p.startswith(toplevel.rstrip("/") + "/")]
    if not inside:
        return {}
    specs = [":(literal)" + os.path.relpath(p, toplevel) for p in inside]
    out = _git(
        toplevel,
        [
            *_filter_overrides(toplevel),
            "status",
            "--porcelain=v1",
            "-z",
            "--ignore-submodules=all",
            "--untracked-files=all",
            "--no-renames",
            "--",
            *specs,
        ],
    )
    if out is None:
        return None
    found: dict[str, str] = {}
    for entry in out.decode("utf-8", "surrogateescape").split("\0"):
        if len(entry) > 3:
            found[os.path.join(toplevel, entry[3:])] = entry[:2]
    return found
