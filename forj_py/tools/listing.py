"""``list_files`` and ``glob``: what is in the project.

Both walk with :class:`forj_py.system.walk.Walker` (ignore files, hidden files,
denied patterns, no escape through symlinks) breadth-first, stop at the
configured entry cap or at what the output limit can carry and say which
(:class:`Fit`), and return entries ``{path, size, mtime, type}`` with paths
relative to the project root, sorted by path.
"""

from __future__ import annotations

import os
import re
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from .. import errors
from ..output import dumps
from ..system.walk import Entry, Excludes, Walker
from .registry import Tool, ToolContext

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
        excludes = default_excludes(ctx)
        # A directory the model names is listed even if the excludes cover it
        # (node_modules/react), and so is everything below it they cover
        # for the same reason; other excludes still apply inside it.
        excludes = excludes.without(excludes.named_by(start or ".", is_dir=True))
        walker = Walker(ctx.sandbox, include_hidden=args.include_hidden, excludes=excludes)
        fit = Fit(cap, ctx.output_limit, _RESERVED + _json_len(sp.display))
        walk = walker.walk(start, max_depth=args.max_depth, follow_symlinks=args.follow_symlinks)
        for i, entry in enumerate(walk):
            if i % 2048 == 0:
                ctx.check_cancelled()
            if not fit.add(entry):
                break
        result: dict[str, Any] = {"directory": sp.display}
        notes = fit.finish(result, "entries", "list a subdirectory or use a smaller max_depth")
        notes.extend(say_excluded(result, [walker]))
        if notes:
            result["note"] = ". ".join(notes)
        if walker.unreadable_names:
            result["skipped_names"] = walker.unreadable_names
        return result


# Room kept in the output limit for what surrounds the entries: the result's
# envelope, its notes (which quote up to five skipped paths) and counts.
_RESERVED = 2048
_ENTRY_FRAME = len('{"path":"","size":,"mtime":,"type":""},')
_PLAIN_PATH = re.compile(r'[^"\\\x00-\x1f\x7f-\U0010ffff]*\Z')


def _json_len(text: str) -> int:
    """Bytes of ``text`` as a JSON string, quotes excluded."""
    if _PLAIN_PATH.match(text):
        return len(text)
    return len(dumps(text).encode("utf-8")) - 2


class Fit:
    """Entries kept in walk order (breadth first) up to a count and a byte budget.

    The budget is the call's output limit, so a listing is never cut again
    after the walk: it stops at what the result can carry and says which
    limit stopped it, instead of a list the output limit shortened silently.
    """

    def __init__(self, cap: int, output_limit: int, reserved: int = 0) -> None:
        self.cap = cap
        self.output_limit = output_limit
        self.budget = max(output_limit - _RESERVED - reserved, 0)
        self.used = 0
        self.entries: list[Entry] = []
        self.stopped_by: str | None = None  # "count" | "bytes"

    def add(self, entry: Entry) -> bool:
        """Keep ``entry``; False (and nothing kept) when a limit is reached."""
        if len(self.entries) >= self.cap:
            self.stopped_by = "count"
            return False
        size = (
            _ENTRY_FRAME
            + _json_len(entry.rel)
            + len(str(entry.size))
            + len(str(entry.mtime))
            + len(entry.kind)
        )
        if self.used + size > self.budget:
            self.stopped_by = "bytes"
            return False
        self.used += size
        self.entries.append(entry)
        return True

    def finish(self, result: dict[str, Any], what: str, advice: str) -> list[str]:
        """Put the entries (sorted by path) into ``result``; the notes to give."""
        kept = self.entries
        result["files"] = [_wire(e) for e in sorted(kept, key=_by_path)]
        result["truncated"] = self.stopped_by is not None
        if self.stopped_by is None:
            return []
        result["shown"] = len(kept)
        why = (
            f"the entry limit ({self.cap})"
            if self.stopped_by == "count"
            else f"as many as fit the output limit ({self.output_limit} bytes)"
        )
        complete = ""
        if kept and kept[-1].depth > 1:
            complete = f"; every entry down to depth {kept[-1].depth - 1} is listed"
        return [
            f"Listed {len(kept)} {what} breadth-first, {why}{complete}; there are more: {advice}"
        ]


def _by_path(entry: Entry) -> str:
    return entry.rel


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
        from wcmatch import glob as wcglob  # here: not every worker globs, all start

        flags = wcglob.GLOBSTAR | wcglob.BRACE | wcglob.DOTGLOB
        try:
            matcher = wcglob.compile(patterns, flags=flags)
        except Exception as exc:  # wcmatch has its own errors (pattern limits, ...)
            raise errors.bad_args(f"Invalid glob pattern: {exc}") from None
        # Patterns that name an excluded thing ('node_modules/**', '**/*.png')
        # are matched in a walk without it; one walk per distinct set.
        excludes = default_excludes(ctx)
        groups: dict[frozenset[int], list[str]] = {}
        for pattern in patterns:
            groups.setdefault(frozenset(excludes.named_by(pattern)), []).append(pattern)
        seen: set[str] = set()
        walkers: list[Walker] = []
        limit = min(args.max_results, ctx.config.tools.listing.max_entries)
        fit = Fit(limit, ctx.output_limit)
        stopped = False
        for lifted, group in sorted(groups.items(), key=lambda item: sorted(item[0])):
            matcher = wcglob.compile(group, flags=flags)
            walker = Walker(
                ctx.sandbox, include_hidden=args.include_hidden, excludes=excludes.without(lifted)
            )
            walkers.append(walker)
            # Only matches are stat-ed; cancelling is checked per directory,
            # so a pattern that matches nothing still stops.
            walk = walker.walk("", wanted=matcher.match, check=ctx.check_cancelled)
            for entry in walk:
                if entry.rel not in seen:
                    if not fit.add(entry):
                        stopped = True
                        break
                    seen.add(entry.rel)
            if stopped:
                break
        result: dict[str, Any] = {}
        notes = fit.finish(result, "matches", "use a narrower pattern or a deeper directory in it")
        if len(walkers) == 1:  # with several walks, one's skips are another's matches
            notes.extend(say_excluded(result, walkers))
        if notes:
            result["note"] = ". ".join(notes)
        return result


def default_excludes(ctx: ToolContext) -> Excludes:
    return Excludes.of(tuple(ctx.config.tools.listing.default_excludes))


def say_excluded(result: dict[str, Any], walkers: list[Walker]) -> list[str]:
    """Count what the default excludes left out, and say how to see it."""
    count = sum(w.excluded for w in walkers)
    if not count:
        return []
    examples = [e for w in walkers for e in w.excluded_examples][:5]
    result["excluded"] = count
    return [
        f"{count} entries skipped by default (vendored directories, binary files by "
        f"extension), such as {', '.join(examples)}; name one to see it: list_files with "
        "directory='node_modules', or a glob that spells it out ('node_modules/**', '**/*.png')"
    ]


def _strip_dot_slash(pattern: str) -> str:
    while pattern.startswith("./"):
        pattern = pattern[2:]
    return pattern
