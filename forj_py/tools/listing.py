"""``list_files`` and ``glob``: what is in the project.

Both walk with :class:`forj_py.system.walk.Walker` (ignore files, hidden files,
denied patterns, no escape through symlinks) breadth-first, stop at the
configured entry cap or at what the output limit can carry and say which
(:class:`Fit`), and return entries ``{path, size, mtime, type}`` with paths
relative to the project root, sorted by path.
"""

from __future__ import annotations

import operator
import os
import re
from collections.abc import Callable
from typing import Any, cast

from pydantic import BaseModel, ConfigDict, Field

from .. import errors
from ..output import dumps
from ..protocol import DenialReason, ErrorKind, ErrorType
from ..system.walk import Entry, Excludes, Walker
from .registry import Tool, ToolContext

# wcmatch compiles globs to backtracking ``re`` expressions.  Stars within
# a name stay cheap (it makes them non-backtracking), but each "**" can
# retry every directory level: against a 60-level path, two take about
# 5 ms, three 0.1 s, five 18 s.  Patterns come from the model, so the
# count is bounded.
MAX_GLOBSTARS = 2


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
        ".gitignore/.ignore; never .git (use the git tools). Entries are "
        "{path, size, mtime, type}."
    )
    Args = ListFilesArgs
    timeout_kind = "file"

    def summary(self, args: ListFilesArgs) -> str:
        return f"List {args.directory} [depth {args.max_depth}]"

    def paths(self, args: ListFilesArgs) -> list[str]:
        return [args.directory]

    def execute(self, args: ListFilesArgs, ctx: ToolContext) -> Any:
        if names_git_dir(args.directory):
            raise git_dir_refused("list_files", f"directory {args.directory!r}")
        sp = ctx.sandbox.resolve(args.directory, ctx.working_dir)
        if names_git_dir(sp.display):  # a link to it, or a working directory inside it
            raise git_dir_refused(
                "list_files", f"directory {args.directory!r} (it is {sp.display!r})"
            )
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
        walk = walker.walk_batches(
            start,
            max_depth=args.max_depth,
            follow_symlinks=args.follow_symlinks,
            check=ctx.check_cancelled,
        )
        for batch in walk:
            if not fit.add_all(batch):
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


def _json_len(text: str) -> int:
    """Bytes of ``text`` as a JSON string, quotes excluded."""
    if _plain(text):
        return len(text)
    return len(dumps(text).encode("utf-8")) - 2


def _plain(text: str) -> bool:
    """Whether ``text`` is its own JSON string body: printable ASCII, no quote or backslash."""
    return text.isascii() and text.isprintable() and '"' not in text and "\\" not in text


_path_of = operator.itemgetter(0)
_kind_of = operator.itemgetter(1)
_size_of = operator.itemgetter(2)
_mtime_of = operator.itemgetter(3)


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

    def add_all(self, batch: list[Entry]) -> bool:
        """:meth:`add` each of ``batch`` in order; False once a limit is reached.

        A batch that fits as a whole is measured at once, in C: the sum of
        its parts' lengths is what :meth:`add` would have counted one by one.
        """
        if len(self.entries) + len(batch) <= self.cap:
            paths = "".join(map(_path_of, batch))
            if _plain(paths):
                size = (
                    len(batch) * _ENTRY_FRAME
                    + len(paths)
                    + sum(map(len, map(str, map(_size_of, batch))))
                    + sum(map(len, map(str, map(_mtime_of, batch))))
                    + sum(map(len, map(_kind_of, batch)))
                )
                if self.used + size <= self.budget:
                    self.used += size
                    self.entries.extend(batch)
                    return True
        return all(map(self.add, batch))

    def finish(self, result: dict[str, Any], what: str, advice: str) -> list[str]:
        """Put the entries (sorted by path) into ``result``; the notes to give."""
        kept = self.entries
        result["files"] = [
            {"path": rel, "size": size, "mtime": mtime, "type": kind}
            for rel, kind, size, mtime, _ in sorted(kept, key=_path_of)
        ]
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
        "patterns ('src/**/*.py', '*.md', 'test_*.{py,el}'), honouring .gitignore/.ignore; "
        "never inside .git."
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
            if any(names_git_dir(p) for p in _expand_braces(pattern) or [pattern]):
                raise git_dir_refused("glob", f"pattern {pattern!r}")
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
            wcglob.compile(patterns, flags=flags)
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
            walker = Walker(
                ctx.sandbox, include_hidden=args.include_hidden, excludes=excludes.without(lifted)
            )
            walkers.append(walker)
            # Only matches are stat-ed; cancelling is checked per directory,
            # so a pattern that matches nothing still stops.
            wanted, tails = _matcher(group, flags)
            walk = walker.walk_batches("", wanted=wanted, suffixes=tails, check=ctx.check_cancelled)
            for batch in walk:
                if len(groups) == 1:  # one walk never meets a path twice
                    stopped = not fit.add_all(batch)
                else:
                    for entry in batch:
                        if entry.rel not in seen:
                            if not fit.add(entry):
                                stopped = True
                                break
                            seen.add(entry.rel)
                if stopped:
                    break
            if stopped:
                break
        result: dict[str, Any] = {}
        notes = fit.finish(result, "matches", "use a narrower pattern or a deeper directory in it")
        if len(walkers) == 1:  # with several walks, one's skips are another's matches
            notes.extend(say_excluded(result, walkers))
        if notes:
            result["note"] = ". ".join(notes)
        return result


def _matcher(
    patterns: list[str], flags: int
) -> tuple[Callable[[str], bool], tuple[str, ...] | None]:
    """Whether a path matches any of ``patterns`` (what wcmatch's matcher says,
    sooner), and what every matching path ends with, when that is known.

    The walk asks about every entry of the project.  wcmatch's expressions
    are matched directly (its matcher adds microseconds of Python per call),
    and only for a path ending with a pattern's literal tail (".py" of
    "**/*.py"): a path that matches must end with it.  The walk is given
    the tails too, to pass over most files before asking.
    """
    from wcmatch import glob as wcglob

    include, exclude = wcglob.translate(patterns, flags=flags)
    if exclude:  # negated patterns: not asked for by these flags; be exact anyway
        return cast("Callable[[str], bool]", wcglob.compile(patterns, flags=flags).match), None
    expressions = [re.compile(p) for p in include]
    compiled = [e.fullmatch for e in expressions]
    tails = _literal_tails(patterns)
    if any(e.flags & re.IGNORECASE for e in expressions):
        tails = None  # a platform whose globs ignore case: no shortcut

    def wanted(rel: str) -> bool:
        if tails is not None and not rel.endswith(tails):
            return False
        return any(match(rel) is not None for match in compiled)

    return wanted, tails


def _literal_tails(patterns: list[str]) -> tuple[str, ...] | None:
    """What each path a pattern matches ends with; None when some may end with anything."""
    tails: list[str] = []
    for text in patterns:
        expanded = _expand_braces(text)
        if expanded is None:
            return None
        for pattern in expanded:
            last = pattern.rpartition("/")[2]
            if any(c in last for c in "{}\\"):
                return None
            tail = re.split(r"[*?\[\]]", last)[-1]
            if not tail:
                return None
            tails.append(tail)
    return tuple(tails) if tails else None


def _expand_braces(text: str) -> list[str] | None:
    import bracex  # what wcmatch expands braces with

    try:
        return list(bracex.expand(text, limit=1000))
    except Exception:  # too many alternatives, or malformed: no shortcut
        return None


def names_git_dir(path: str) -> bool:
    """Whether ``path`` (or a glob) has a ``.git`` component, in any case."""
    return any(part.lower() == ".git" for part in path.replace("\\", "/").split("/"))


def git_dir_refused(tool: str, what: str) -> errors.ToolFailure:
    """The error for a request naming a ``.git``: never listed, globbed or searched."""
    return errors.ToolFailure(
        ErrorType.VALIDATION,
        f"{tool}: {what} names .git, git's own store (objects, refs, config, hooks), "
        "which list_files, glob and search never show, in the project or in a nested "
        "repository",
        kind=ErrorKind.SANDBOX_VIOLATION,
        reason=DenialReason.DENIED_PATTERN_MATCHED.value,
        pattern=".git/",
        recovery=[
            "For the repository's state use the git tools: git_status, git_log, git_diff",
            "read_file still reads one named file in it, e.g. '.git/HEAD'",
            "Leave .git out of the request: list_files directory='.', glob '**/*.py'",
        ],
    )


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
