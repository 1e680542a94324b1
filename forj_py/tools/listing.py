"""``list_files`` and ``glob``: what is in the project (seed 001 sections 4.2, 4.9).

Both walk with :class:`forj_py.system.walk.Walker` (ignore files, hidden files,
denied patterns, no escape through symlinks), stop at the configured entry
cap and say so, and return entries ``{path, size, mtime, type}`` with
paths relative to the project root, sorted by path.
"""

from __future__ import annotations

import os
from typing import Any

from pydantic import BaseModel, ConfigDict, Field
from wcmatch import glob as wcglob

from .. import errors
from ..system.walk import Entry, Walker
from .registry import Tool, ToolContext

_GLOB_FLAGS = wcglob.GLOBSTAR | wcglob.BRACE | wcglob.DOTGLOB
# wcmatch compiles globs to backtracking ``re`` expressions.  Stars within
# a name stay cheap (it makes them non-backtracking), but each "**" can
# retry every directory level: against a 60-level path, two take about
# 5 ms, three 0.1 s, five 18 s.  Patterns come from the model, so the
# count is bounded.
MAX_GLOBSTARS = 2


def _wire(entry: Entry) -> dict[str, Any]:
    return {"path": entry.rel, "size": entry.size, "mtime": entry.mtime, "type": entry.kind}


class ListFilesArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    directory: str = Field(default=".", min_length=1, description="Directory to list")
    max_depth: int = Field(default=5, ge=1, le=64, description="1 lists direct children only")
    include_hidden: bool = Field(default=False, description="Include names starting with '.'")
    follow_symlinks: bool = Field(
        default=False, description="Descend into symlinked directories inside the project"
    )


class ListFiles(Tool[ListFilesArgs]):
    name = "list_files"
    description = (
        "List files and directories under a directory of the project, honouring "
        ".gitignore/.ignore. Entries are {path, size, mtime, type}."
    )
    Args = ListFilesArgs
    timeout_kind = "file"

    def summary(self, args: ListFilesArgs) -> str:
        return f"List {args.directory} [depth {args.max_depth}]"

    def paths(self, args: ListFilesArgs) -> list[str]:
        return [args.directory]

    def execute(self, args: ListFilesArgs, ctx: ToolContext) -> Any:
        sp = ctx.sandbox.resolve(args.directory, ctx.working_dir)
        if not sp.exists or not os.path.isdir(sp.canonical):
            raise errors.file_error(
                f"{sp.display} is not a directory"
                if sp.exists
                else f"No such directory: {sp.display}",
                sp.display,
                recovery=["List the project root ('.') to see what exists"],
            )
        start = "" if sp.display == "." else sp.display
        if sp.canonical != ctx.sandbox.project_root and not sp.canonical.startswith(
            ctx.sandbox.project_root + os.sep
        ):
            raise errors.bad_args(
                f"{args.directory} is outside the project root; only the project can be listed"
            )
        cap = ctx.config.tools.listing.max_entries
        walker = Walker(ctx.sandbox, include_hidden=args.include_hidden)
        entries: list[Entry] = []
        truncated = False
        for i, entry in enumerate(
            walker.walk(start, max_depth=args.max_depth, follow_symlinks=args.follow_symlinks)
        ):
            if i % 2048 == 0:
                ctx.check_cancelled()
            if len(entries) >= cap:
                truncated = True
                break
            entries.append(entry)
        entries.sort(key=lambda e: e.rel)
        result: dict[str, Any] = {
            "directory": sp.display,
            "files": [_wire(e) for e in entries],
            "truncated": truncated,
        }
        if truncated:
            result["note"] = (
                f"Stopped at {cap} entries; list a subdirectory or use a smaller max_depth"
            )
        if walker.unreadable_names:
            result["skipped_names"] = walker.unreadable_names
        return result


class GlobArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    patterns: list[str] = Field(
        min_length=1,
        max_length=100,
        description="Glob patterns relative to the project root: '*' stays within a "
        "directory, '**' spans any depth, {a,b} alternates (e.g. 'src/**/*.py')",
    )
    max_results: int = Field(default=1000, ge=1, le=100_000)
    include_hidden: bool = Field(default=False, description="Include names starting with '.'")


class Glob(Tool[GlobArgs]):
    name = "glob"
    description = (
        "Find files and directories whose project-relative path matches any of the glob "
        "patterns ('src/**/*.py', '*.md', 'test_*.{py,el}'), honouring .gitignore/.ignore."
    )
    Args = GlobArgs
    timeout_kind = "file"

    def summary(self, args: GlobArgs) -> str:
        return "Glob " + " ".join(args.patterns)

    def execute(self, args: GlobArgs, ctx: ToolContext) -> Any:
        patterns = [_strip_dot_slash(p) for p in args.patterns]
        for pattern in patterns:
            if pattern.startswith("/") or ".." in pattern.split("/"):
                raise errors.bad_args(
                    f"Pattern {pattern!r} must be relative to the project root, without '..'"
                )
            if pattern.count("**") > MAX_GLOBSTARS:
                raise errors.bad_args(
                    f"Pattern {pattern!r} has more than {MAX_GLOBSTARS} '**'; each one "
                    "multiplies the work of matching a deep path",
                    recovery=[
                        "Use at most two '**' per pattern ('src/**/test_*.py')",
                        "Or list the files of a narrower directory with list_files",
                    ],
                )
        try:
            matcher = wcglob.compile(patterns, flags=_GLOB_FLAGS)
        except Exception as exc:  # wcmatch has its own errors (pattern limits, ...)
            raise errors.bad_args(f"Invalid glob pattern: {exc}") from None
        walker = Walker(ctx.sandbox, include_hidden=args.include_hidden)
        matches: list[Entry] = []
        truncated = False
        limit = min(args.max_results, ctx.config.tools.listing.max_entries)
        for i, entry in enumerate(walker.walk("")):
            if i % 2048 == 0:
                ctx.check_cancelled()
            if matcher.match(entry.rel):
                if len(matches) >= limit:
                    truncated = True
                    break
                matches.append(entry)
        matches.sort(key=lambda e: e.rel)
        result: dict[str, Any] = {"files": [_wire(e) for e in matches], "truncated": truncated}
        if truncated:
            result["note"] = f"Stopped at {limit} matches; use a narrower pattern"
        return result


def _strip_dot_slash(pattern: str) -> str:
    while pattern.startswith("./"):
        pattern = pattern[2:]
    return pattern
