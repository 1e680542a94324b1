"""What every writing tool shares: the stale-file rule, diffs, the ``.el`` check, commit.

The stale-file rule, for every writing tool (an edit made against text that
has changed since would land in the wrong place): an existing file may only
be changed if the model read it in this session and it has not changed since
(SHA-256 of the whole content). New files are exempt. After a successful
write the worker records the new content's hash, so the model can edit the
same file again without re-reading what it just wrote.
"""

from __future__ import annotations

import dataclasses
import difflib
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .. import errors
from ..errors import ToolFailure
from ..output import NEWLINE_MARK, redact_url_credentials, shown_line, visible_controls
from ..protocol import ErrorKind, ErrorType
from ..safety.files import atomic_write, ensure_parents, read_bytes, sha256
from ..safety.paths import SafePath
from ..store.journal import FileChange
from . import _syntax_gate, _tabs
from ._elcheck import check as check_elisp
from .registry import Staged, ToolContext

DIFF_CONTEXT = 3
# Files larger than this are not edited (the whole file is held in memory,
# and a range read hashes files only up to the same size).
MAX_EDIT_BYTES = 64 << 20


@dataclass
class Loaded:
    """A file as a writing tool found it."""

    sp: SafePath
    data: bytes | None  # None: the file does not exist yet
    text: str  # "" for a new file; without its byte-order mark
    newline: str  # the file's line ending, for new lines written into it
    bom: bool = False  # the file starts with a UTF-8 byte-order mark, kept on write

    @property
    def exists(self) -> bool:
        return self.data is not None


def stale(message: str, sp: SafePath, reason: str) -> ToolFailure:
    return ToolFailure(
        ErrorType.STALE_FILE,
        message,
        kind=ErrorKind.STALE_FILE,
        recovery=[
            f"Call read_file on {sp.display} (whole, or the lines you will change) and retry",
            "Base the change on what the file contains now",
        ],
        path=sp.display,
        reason=reason,
    )


def load(ctx: ToolContext, path: str, *, must_exist: bool, enforce_read: bool = True) -> Loaded:
    """Resolve ``path`` and read it, applying the stale-file rule to existing files."""
    sp = ctx.sandbox.resolve(path, ctx.working_dir, for_write=True)
    if not sp.exists:
        if must_exist:
            raise errors.file_error(
                f"File not found: {sp.display}",
                sp.display,
                recovery=[
                    "Check the path; list_files or glob show what exists",
                    "To create a new file, use write_file",
                ],
            )
        return Loaded(sp, None, "", "\n")
    if ctx.overlay is not None and sp.canonical in ctx.overlay:
        # Planning a later call of a batch: start from what the earlier ones write.
        text = ctx.overlay[sp.canonical]
        return _loaded(sp, text.encode("utf-8"), text)
    known = ctx.session.file_reads.get(sp.canonical)
    if enforce_read and known is None:
        raise stale(
            f"{sp.display} was not read in this session; read it before changing it",
            sp,
            "File was not read before editing",
        )
    data = read_bytes(ctx.sandbox, sp, MAX_EDIT_BYTES)
    if enforce_read and known != sha256(data):
        raise stale(
            f"{sp.display} changed since it was last read; read it again before changing it",
            sp,
            "File content changed since last read",
        )
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise errors.file_error(
            f"{sp.display} is not UTF-8 text; forj edits UTF-8 files only",
            sp.display,
            recovery=["Leave this file to the user, or rewrite it whole with write_file"],
        ) from None
    return _loaded(sp, data, text)


def _loaded(sp: SafePath, data: bytes, text: str) -> Loaded:
    """A file's content as the writing tools see it: BOM apart, line ending noted."""
    newline = "\r\n" if "\r\n" in text and text.count("\r\n") > text.count("\n") // 2 else "\n"
    bom = text.startswith("\ufeff")
    return Loaded(sp, data, text[1:] if bom else text, newline, bom)


def with_newlines(text: str, newline: str) -> str:
    """Model-written text uses "\\n"; give it the file's own line ending."""
    if newline == "\n":
        return text
    return text.replace("\r\n", "\n").replace("\n", newline)


def unified_diff(display: str, old: str, new: str, existed: bool = True) -> str:
    """A unified diff with three lines of context.

    The lines both texts share at their start and end are set aside first
    (all but the context): an edit of a few lines in a large file then
    costs a comparison of those few lines, not of the whole file.
    """
    a, b = split_lines(old), split_lines(new)
    head = _common_run(a, b)
    tail = _common_run(a[head:][::-1], b[head:][::-1])
    skip = max(head - DIFF_CONTEXT, 0)
    cut = max(tail - DIFF_CONTEXT, 0)
    lines = difflib.unified_diff(
        a[skip : len(a) - cut],
        b[skip : len(b) - cut],
        # A path is free text too: a name holding a newline must not add lines.
        fromfile=f"a/{shown_line(display)}" if existed else "/dev/null",
        tofile=f"b/{shown_line(display)}",
        n=DIFF_CONTEXT,
    )
    out = []
    for line in lines:
        if skip and line.startswith("@@"):
            line = _HUNK_NUMBERS_RE.sub(lambda m: f"{m[1]}{int(m[2]) + skip}", line)
        out.append(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n")
    return "".join(out)


_HUNK_NUMBERS_RE = re.compile(r"([-+])(\d+)")


def _common_run(a: list[str], b: list[str]) -> int:
    """How many lines ``a`` and ``b`` share from their start."""
    n = min(len(a), len(b))
    if a[:n] == b[:n]:
        return n
    lo, hi = 0, n  # a[:lo] == b[:lo], a[:hi] != b[:hi]: halve, comparing slices in C
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if a[lo:mid] == b[lo:mid]:
            lo = mid
        else:
            hi = mid
    return lo


def review(
    display: str, old: str, new: str, existed: bool = True, notes: list[str] | None = None
) -> str:
    """The diff shown for review and returned to the model, then its notes.

    URL credentials stay hidden: the model reads this text too.  Notes
    (which pass matched, where a range moved, credentials kept) follow the
    diff as lines of their own, so it still reads as a diff.
    """
    diff, _ = redact_url_credentials(unified_diff(display, old, new, existed))
    if not diff:
        return ""  # nothing changes: nothing to note either
    # A note may carry a path: one line each, whatever the path holds.
    return diff + "".join(f"note: {note.replace(chr(10), NEWLINE_MARK)}\n" for note in notes or [])


_HUNK_RE = re.compile(r"^@@ -\d+(?:,(\d+))? \+\d+(?:,(\d+))? @@")


def split_file_diffs(preview: str) -> list[str]:
    """Cut a preview of several files into one piece per file.

    A removed line that reads ``-- x`` shows as ``--- x``, so a file's
    header cannot be told by its prefix alone: the hunk headers' line counts
    say where each hunk ends, and only a ``--- `` line outside every hunk
    starts the next file.
    """
    pieces: list[list[str]] = []
    old_left = new_left = 0
    # Lines end at "\n" only: a diff line may hold form feeds or lone carriage returns.
    for line in re.findall(r"[^\n]*\n|[^\n]+$", preview):
        if old_left > 0 or new_left > 0:
            pieces[-1].append(line)
            if line.startswith("\\"):
                continue  # "\ No newline at end of file" belongs to the line before
            if line.startswith(" "):
                old_left, new_left = old_left - 1, new_left - 1
            elif line.startswith("-"):
                old_left -= 1
            elif line.startswith("+"):
                new_left -= 1
            continue
        if line.startswith("--- ") or not pieces:
            pieces.append([line])
            continue
        pieces[-1].append(line)
        m = _HUNK_RE.match(line)
        if m:
            old_left = int(m.group(1)) if m.group(1) is not None else 1
            new_left = int(m.group(2)) if m.group(2) is not None else 1
    return ["".join(piece) for piece in pieces]


def validate(ctx: ToolContext, sp: SafePath, new_text: str, old_text: str | None = None) -> None:
    """Refuse text that would break the file: unreadable Emacs Lisp, or (with the
    rule ``code.ast.parsed``) source code with more syntax errors than it had.

    A file that was already unreadable may still be edited as long as the
    edit does not make it worse (the same problem, or none).
    """
    _syntax_gate.check_write(ctx.config, sp, new_text, old_text)
    if not sp.display.endswith(".el"):
        return
    problem = check_elisp(new_text)
    if problem is not None and old_text is not None:
        before = check_elisp(old_text)
        if before is not None and before.message == problem.message:
            return
    if problem is not None:
        raise errors.bad_args(
            f"The new content of {sp.display} is not readable Emacs Lisp: {problem.describe()}",
            recovery=[
                "Balance the parentheses/brackets and close every string, then retry",
                "Line and column point at where the reader gives up",
            ],
            path=sp.display,
            line=problem.line,
            column=problem.column,
            problem=problem.message,
        )


def stage_preview(
    ctx: ToolContext, loaded: Loaded, new_text: str, *, read_first: bool = True
) -> None:
    """Record, while planning, what this call will write: for later calls of the
    batch, and for a user who edits the proposal before approving it (or
    approves part of it).  ``read_first``: the tool changes only files the
    model read (a rename reaches files it never read)."""
    if ctx.overlay is not None:
        ctx.overlay[loaded.sp.canonical] = ("\ufeff" if loaded.bom else "") + new_text
    if ctx.staged is not None:
        ctx.staged.append(
            Staged(
                loaded.sp.display,
                loaded.sp.canonical,
                loaded.text,
                new_text,
                loaded.exists,
                read_first,
            )
        )


def check_approved(ctx: ToolContext, preview: str, display: str) -> None:
    """Refuse to apply a change other than the diff the user approved."""
    if ctx.approved_preview is not None and visible_controls(preview) != ctx.approved_preview:
        raise ToolFailure(
            ErrorType.STALE_FILE,
            f"The change to {display} no longer matches the diff the user approved (the file "
            "changed in between); nothing was written",
            kind=ErrorKind.STALE_FILE,
            recovery=["Read the file again and propose the change anew"],
            path=display,
            reason="File changed between approval and execution",
        )


def commit(ctx: ToolContext, loaded: Loaded, new_text: str, *, backup: bool = True) -> str | None:
    """Back up, write atomically, record the new hash; return the backup's path."""
    data = (("\ufeff" + new_text) if loaded.bom else new_text).encode("utf-8")
    backup_path = None
    if loaded.exists and backup and ctx.backups is not None:
        assert loaded.data is not None
        backup_path = ctx.backups.save(loaded.sp, loaded.data)
    if not loaded.exists:
        ensure_parents(ctx.sandbox, loaded.sp)
    ctx.check_cancelled()
    atomic_write(ctx.sandbox, loaded.sp, data, cancel=ctx.cancel)
    after = sha256(data)
    ctx.session.record_read(loaded.sp.canonical, after)
    if ctx.changes is not None:
        ctx.changes.wrote(
            FileChange(
                path=loaded.sp.display,
                canonical=loaded.sp.canonical,
                existed=loaded.exists,
                backup=backup_path,
                hash_before=None if loaded.data is None else sha256(loaded.data),
                hash_after=after,
            )
        )
    return backup_path


def commit_all(ctx: ToolContext, changes: list[tuple[Loaded, str]]) -> list[str | None]:
    """Write several files as one change: if a write fails, put back every file
    already written, so the project is never left half-changed.

    Returns each file's backup path (None for a file left as it was).
    """
    written: list[Loaded] = []
    backups: list[str | None] = []
    try:
        for loaded, new_text in changes:
            if loaded.exists and new_text == loaded.text:
                backups.append(None)
                continue
            backups.append(commit(ctx, loaded, new_text))
            written.append(loaded)
    except ToolFailure as failure:
        restored, lost = _restore(ctx, written)
        failure.error.message += (
            f"; the {len(restored)} file(s) already written were restored, no file was changed"
            if not lost
            else f"; could not restore {', '.join(lost)} (backups are in backup_path)"
        )
        failure.error.details["restored"] = restored
        raise
    except BaseException:
        _restore(ctx, written)
        raise
    return backups


def _restore(ctx: ToolContext, written: list[Loaded]) -> tuple[list[str], list[str]]:
    restored, lost = [], []
    for loaded in reversed(written):
        try:
            if loaded.data is None:
                # It did not exist before: leave it be rather than delete what we
                # cannot be sure is ours; say so.
                lost.append(loaded.sp.display)
                continue
            # Not through commit(): no new backup, and no cancel check, this must land.
            # The file is now our own write (a new inode): no identity to compare.
            sp = dataclasses.replace(loaded.sp, ident=None)
            atomic_write(ctx.sandbox, sp, loaded.data)
            ctx.session.record_read(loaded.sp.canonical, sha256(loaded.data))
            if ctx.changes is not None:
                ctx.changes.put_back(loaded.sp.canonical)
            restored.append(loaded.sp.display)
        except ToolFailure:
            lost.append(loaded.sp.display)
    return restored, lost


def apply_user_text(ctx: ToolContext, staged: list[Staged], texts: dict[str, str]) -> Any:
    """Write what the user made of a proposed change (edit before approve).

    ``staged`` is what planning proposed, file by file; ``texts`` maps some of
    those files' display paths to the text the user wants instead.  Each file
    must still hold what the user saw the proposal start from; then every
    file is checked (``.el`` readability) and written, all or nothing.
    """
    changes: list[tuple[Loaded, str]] = []
    # Display paths are relative to the project root, whatever the call's cwd.
    at_root = dataclasses.replace(ctx, working_dir=ctx.sandbox.project_root)
    for item in staged:
        # The file must hold exactly what the review started from (checked
        # below), and have been read if the tool itself asks that.
        loaded = load(at_root, item.display, must_exist=False, enforce_read=item.read_first)
        # Same text is not enough: the path may now be a link to another file
        # (holding the same text), one the user saw no change for.
        if (
            loaded.sp.canonical != item.canonical
            or loaded.exists != item.existed
            or loaded.text != item.old
        ):
            raise stale(
                f"{item.display} changed after the user reviewed the change; nothing was written",
                loaded.sp,
                "File changed between review and execution",
            )
        new_text = texts.get(item.display, item.new)
        validate(ctx, loaded.sp, new_text, loaded.text if loaded.exists else None)
        changes.append((loaded, new_text))
    ctx.check_cancelled()
    backups = commit_all(ctx, changes)
    files = []
    diffs = []
    for (loaded, new_text), backup_path in zip(changes, backups, strict=True):
        files.append(
            {
                "path": loaded.sp.display,
                "user_modified": loaded.sp.display in texts,
                "created": not loaded.exists,
                "bytes_written": len(new_text.encode("utf-8")),
                "backup_path": backup_path,
            }
        )
        diffs.append(review(loaded.sp.display, loaded.text, new_text, loaded.exists))
    return {
        "user_modified": True,
        "note": (
            "The user changed your proposed edit before approving it. 'preview' is the "
            "change that was actually written; the files now hold that, not your proposal."
        ),
        "files": files,
        "preview": "".join(diffs),
    }


# --- tab width ---------------------------------------------------------------

DEFAULT_TAB_WIDTH = _tabs.DEFAULT_TAB_WIDTH


def tab_width(ctx: ToolContext, loaded: Loaded) -> int:
    """The columns a tab spans in this file (see :func:`._tabs.tab_width` for the order)."""
    editor = ctx.session.editor_tab_widths.get(loaded.sp.canonical)
    return _tabs.tab_width(
        Path(ctx.sandbox.project_root), Path(loaded.sp.canonical), loaded.text, editor
    )


# --- lines -------------------------------------------------------------------


def split_lines(text: str) -> list[str]:
    """Lines as read_file counts them: ended by "\\n" only.

    ``str.splitlines`` would also split at form feeds (common in Emacs
    Lisp), vertical tabs, U+2028 and lone carriage returns, and edits
    would land on the wrong lines.
    """
    lines = text.split("\n")
    out = [line + "\n" for line in lines[:-1]]
    if lines[-1]:
        out.append(lines[-1])
    return out
