"""Keeping the AST index in step with the files: which files, and which to parse again.

Files are found by walking the project as ``glob`` does (ignore files,
hidden names, the default excludes, and the sandbox's denied patterns:
a denied file is never listed, so never read or parsed) and each is
resolved through the sandbox before it is read.  A file is parsed again
only when its size or modification time changed *and* its content hash
did; everything else is answered from the index.
"""

from __future__ import annotations

import os
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from .. import errors
from ..errors import ToolFailure
from ..protocol import ErrorCode
from ..safety.files import read_bytes, sha256
from ..store.ast_index import AstIndex, AstIndexError, FileRow, NodeRow, index_at
from ..store.journal import default_state_dir
from ..system.walk import Walker
from . import _ast_lang as L
from .listing import MAX_GLOBSTARS, default_excludes
from .registry import ToolContext

# Stop this long before the call's time limit, with a result saying so.
MARGIN_SECONDS = 2.0


def open_index(ctx: ToolContext) -> AstIndex:
    try:
        return index_at(ctx.state_dir or default_state_dir())
    except AstIndexError as exc:
        raise errors.file_error(
            str(exc),
            "ast.sqlite3",
            recovery=["Tell the user: the state directory must be writable"],
        ) from None


def check_patterns(patterns: list[str]) -> list[str]:
    """Globs relative to the project root, without ``..``: nothing outside is named."""
    out = []
    for pattern in patterns:
        while pattern.startswith("./"):
            pattern = pattern[2:]
        if pattern.startswith("/") or ".." in pattern.split("/") or "\0" in pattern:
            raise errors.bad_args(
                f"Pattern {pattern!r} must be relative to the project root, without '..'",
                recovery=["Write globs such as 'src/**/*.py' relative to the project root"],
            )
        if pattern.count("**") > MAX_GLOBSTARS:
            raise errors.bad_args(
                f"Pattern {pattern!r} has more than {MAX_GLOBSTARS} '**'",
                recovery=["Use at most two '**' per pattern ('src/**/*.rs')"],
            )
        out.append(pattern)
    return out


def matcher(patterns: list[str]) -> Any:
    from wcmatch import glob as wcglob

    try:
        return wcglob.compile(
            check_patterns(patterns), flags=wcglob.GLOBSTAR | wcglob.BRACE | wcglob.DOTGLOB
        )
    except ToolFailure:
        raise
    except Exception as exc:  # wcmatch's own pattern errors
        raise errors.bad_args(f"Invalid glob pattern: {exc}") from None


def find_files(
    ctx: ToolContext, patterns: list[str], language: str | None
) -> tuple[list[str], Walker]:
    """Project files matching ``patterns`` in a language the tools read, sorted."""
    match = matcher(patterns)
    walker = Walker(ctx.sandbox, excludes=default_excludes(ctx))
    found = []
    for entry in walker.walk("", wanted=match.match, check=ctx.check_cancelled):
        if entry.kind != "file":
            continue
        lang = L.language_of(entry.rel)
        if lang is None or (language is not None and lang != language):
            continue
        found.append(entry.rel)
    return sorted(found), walker


@dataclass
class Report:
    parsed: list[str] = field(default_factory=list)
    unchanged: int = 0
    removed: list[str] = field(default_factory=list)
    skipped: list[dict[str, str]] = field(default_factory=list)
    errors: list[dict[str, Any]] = field(default_factory=list)
    languages: Counter[str] = field(default_factory=Counter)
    stopped: str | None = None


def deadline_of(ctx: ToolContext) -> float | None:
    if ctx.time_limit is None:
        return None
    return time.monotonic() + max(ctx.time_limit - MARGIN_SECONDS, ctx.time_limit / 2)


def sync(
    ctx: ToolContext,
    index: AstIndex,
    paths: list[str],
    *,
    incremental: bool = True,
    deadline: float | None = None,
) -> Report:
    """Bring the index up to date for ``paths`` (project-relative files)."""
    root = ctx.sandbox.project_root
    limit = ctx.config.tools.ast.max_file_bytes
    known = index.files(root)
    report = Report()
    gone: list[str] = []
    pending = _Pending(index, root)
    try:
        _sync(ctx, paths, known, limit, incremental, deadline, report, gone, pending)
    finally:
        # What was parsed before a failure or a cancel is kept.
        pending.flush()
    if gone:
        _forget(index, root, gone)
        report.removed.extend(gone)
    return report


class _Pending:
    """Index writes gathered and committed in batches: one transaction per batch."""

    BATCH = 256

    def __init__(self, index: AstIndex, root: str) -> None:
        self.index = index
        self.root = root
        self.parses: list[tuple[FileRow, list[NodeRow]]] = []
        self.touches: list[tuple[str, int, int]] = []

    def parsed(self, row: FileRow, parsed: L.Parsed) -> None:
        self.parses.append((row, _nodes(row, parsed)))
        if len(self.parses) >= self.BATCH:
            self.flush()

    def touched(self, path: str, size: int, mtime_ns: int) -> None:
        self.touches.append((path, size, mtime_ns))
        if len(self.touches) >= self.BATCH:
            self.flush()

    def flush(self) -> None:
        try:
            if self.parses:
                self.index.replace(self.root, self.parses)
            if self.touches:
                self.index.touch(self.root, self.touches)
        except AstIndexError as exc:
            raise errors.file_error(
                str(exc),
                "ast.sqlite3",
                recovery=["Tell the user: the state directory must be writable"],
            ) from None
        finally:
            self.parses, self.touches = [], []


def _sync(
    ctx: ToolContext,
    paths: list[str],
    known: dict[str, FileRow],
    limit: int,
    incremental: bool,
    deadline: float | None,
    report: Report,
    gone: list[str],
    pending: _Pending,
) -> None:
    for rel in paths:
        ctx.check_cancelled()
        if deadline is not None and time.monotonic() > deadline:
            report.stopped = (
                f"stopped at the time limit after {len(report.parsed)} parsed file(s); "
                f"{len(paths) - paths.index(rel)} not looked at yet: call ast_generate again "
                "(incremental: it goes on where this one stopped)"
            )
            break
        language = L.language_of(rel)
        if language is None:
            continue
        try:
            sp = ctx.sandbox.resolve(rel)
            if not sp.exists:
                if rel in known:
                    gone.append(rel)
                continue
            st = os.stat(sp.canonical)
        except ToolFailure as failure:
            # Denied now (the rules changed) or unreadable: what was known goes.
            if rel in known:
                gone.append(rel)
            report.skipped.append({"file": rel, "reason": failure.error.message})
            continue
        except OSError as exc:
            report.skipped.append({"file": rel, "reason": exc.strerror or str(exc)})
            continue
        report.languages[language] += 1
        row = known.get(rel)
        if st.st_size > limit:
            if row is not None:
                gone.append(rel)
            report.skipped.append(
                {
                    "file": rel,
                    "reason": f"{st.st_size} bytes, over [tools.ast] max_file_bytes ({limit})",
                }
            )
            continue
        fresh = row is not None and row.language == language
        if (
            incremental
            and fresh
            and row is not None
            and (row.size, row.mtime_ns)
            == (
                st.st_size,
                st.st_mtime_ns,
            )
        ):
            report.unchanged += 1
            _note_errors(report, row)
            continue
        try:
            data = read_bytes(ctx.sandbox, sp, limit)
        except ToolFailure as failure:
            report.skipped.append({"file": rel, "reason": failure.error.message})
            continue
        digest = sha256(data)
        if incremental and fresh and row is not None and row.sha256 == digest:
            pending.touched(rel, st.st_size, st.st_mtime_ns)
            report.unchanged += 1
            _note_errors(report, row)
            continue
        try:
            parsed = L.parse(rel, language, data, L.Watch(ctx.cancel, deadline))
        except L.OutOfTime:
            if row is not None:
                gone.append(rel)  # what was known of it is out of date
            report.skipped.append(
                {
                    "file": rel,
                    "reason": "the time limit came while its syntax tree was searched; not indexed",
                }
            )
            report.stopped = (
                f"stopped at the time limit while parsing {rel}, after "
                f"{len(report.parsed)} parsed file(s); "
                f"{len(paths) - paths.index(rel) - 1} not looked at yet: call ast_generate "
                "again (incremental: it goes on where this one stopped)"
            )
            break
        new_row = FileRow(
            rel,
            language,
            st.st_size,
            st.st_mtime_ns,
            digest,
            parsed.error_count,
            [p.json() for p in parsed.problems],
        )
        pending.parsed(new_row, parsed)
        report.parsed.append(rel)
        _note_errors(report, new_row)


def _nodes(row: FileRow, parsed: L.Parsed) -> list[NodeRow]:
    return [
        NodeRow(
            d.id,
            row.path,
            d.kind,
            d.name,
            d.qualname,
            d.start_byte,
            d.end_byte,
            d.start_line,
            d.end_line,
            d.exported,
            d.documented,
        )
        for d in parsed.definitions
    ]


def _forget(index: AstIndex, root: str, paths: list[str]) -> None:
    try:
        index.forget(root, paths)
    except AstIndexError as exc:
        raise errors.file_error(
            str(exc), paths[0], recovery=["Tell the user: the state directory must be writable"]
        ) from None


def _note_errors(report: Report, row: FileRow) -> None:
    if row.errors:
        report.errors.append({"file": row.path, "count": row.errors, "problems": row.problems[:5]})


def refresh_known(ctx: ToolContext, index: AstIndex) -> Report:
    """Re-check every file the index knows for this project (queries answer the present).

    Files gone or now denied are dropped; changed ones are parsed again.
    """
    known = sorted(index.files(ctx.sandbox.project_root))
    if not known:
        raise L.ast_failure(
            ErrorCode.AST_PARSE,
            "Nothing of this project is indexed yet",
            recovery=[
                "Call ast_generate first, e.g. with paths ['**/*.py'] or ['src/**']",
            ],
            reason="no index",
        )
    return sync(ctx, index, known, deadline=deadline_of(ctx))


def wire_report(report: Report, result: dict[str, Any]) -> list[str]:
    """Fill ``result`` from ``report``; return the notes it calls for."""
    notes = []
    if report.removed:
        result["removed"] = report.removed
    if report.skipped:
        result["skipped"] = report.skipped
    if report.stopped:
        result["stopped"] = True
        notes.append(report.stopped)
    return notes
