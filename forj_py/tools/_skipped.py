"""Which files a search did not look into, so "no match" is never a lie by omission.

Both engines leave out files over the size cap (``[tools.read_file]
max_scan_bytes``) and binary files (a NUL byte).  Neither says so: rg
prints nothing for them.  After a search that was not cut short, one walk
with the search's own filters counts them: the size from the walk's stat,
binary from a NUL byte in the file's first ``SNIFF`` bytes (where both
engines look first).  A file whose first NUL comes later is searched up
to it, so it is not counted.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from typing import Any

from ..system.walk import Excludes, Walker
from .registry import ToolContext

SNIFF = 8192
# Examples named in the result, per reason: enough to act on, never a flood.
NAMED = 5


def skipped_files(
    ctx: ToolContext, excludes: Excludes, wanted: Callable[[str], bool]
) -> dict[str, Any] | None:
    """``{too_large, binary, examples}`` for the files the search left out, or None."""
    max_size = ctx.config.tools.read_file.max_scan_bytes
    large: list[str] = []
    binary: list[str] = []
    too_large = is_binary = 0
    walker = Walker(ctx.sandbox, excludes=excludes)
    for count, entry in enumerate(walker.walk("", files_only=True)):
        if count % 256 == 0:
            ctx.check_cancelled()
        if entry.kind != "file" or not wanted(entry.rel):
            continue
        if entry.size > max_size:
            too_large += 1
            if len(large) < NAMED:
                large.append(entry.rel)
        elif entry.size and _has_nul(os.path.join(ctx.sandbox.project_root, entry.rel)):
            is_binary += 1
            if len(binary) < NAMED:
                binary.append(entry.rel)
    if not too_large and not is_binary:
        return None
    return {
        "too_large": too_large,
        "binary": is_binary,
        "max_bytes": max_size,
        "examples": {"too_large": large, "binary": binary},
    }


def describe(skipped: dict[str, Any]) -> str:
    """One sentence on what was not searched, and what to do about it."""
    parts = []
    if skipped["too_large"]:
        n = skipped["too_large"]
        parts.append(
            f"{n} file{'' if n == 1 else 's'} over the {skipped['max_bytes']}-byte size cap "
            f"({', '.join(skipped['examples']['too_large'])}{', ...' if n > NAMED else ''})"
        )
    if skipped["binary"]:
        n = skipped["binary"]
        parts.append(
            f"{n} binary file{'' if n == 1 else 's'} "
            f"({', '.join(skipped['examples']['binary'])}{', ...' if n > NAMED else ''})"
        )
    return (
        "Not searched: "
        + " and ".join(parts)
        + "; read_file reads a large file by line range, run_shell can inspect a binary one"
    )


def _has_nul(path: str) -> bool:
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
    try:
        fd = os.open(path, flags)
    except OSError:
        return False
    with os.fdopen(fd, "rb") as fh:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return False
        return b"\x00" in fh.read(SNIFF)
