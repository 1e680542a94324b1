"""``edit``: replace an exact string (the form most models know best)."""

from __future__ import annotations

import difflib
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from .. import errors
from ..registry import Tool, ToolContext
from . import _edit

MAX_LISTED_MATCHES = 20


class EditArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    path: str = Field(min_length=1, description="File path relative to the project root")
    old_string: str = Field(
        min_length=1, description="Exact text to replace, including whitespace and indentation"
    )
    new_string: str = Field(description="The text to put in its place")
    replace_all: bool = Field(
        default=False, description="Replace every occurrence instead of exactly one"
    )


class Edit(Tool[EditArgs]):
    name = "edit"
    description = (
        "Replace old_string with new_string in a file. old_string must match the file "
        "exactly and occur exactly once (or set replace_all). The file must have been read "
        "first and not changed since."
    )
    Args = EditArgs
    side_effecting = True
    timeout_kind = "file"

    def summary(self, args: EditArgs) -> str:
        first = args.old_string.strip().splitlines()[0] if args.old_string.strip() else ""
        scope = "every " if args.replace_all else ""
        return f"Edit {args.path}: replace {scope}{first!r}"

    def paths(self, args: EditArgs) -> list[str]:
        return [args.path]

    def _plan(
        self, args: EditArgs, ctx: ToolContext, preview: bool = False
    ) -> tuple[_edit.Loaded, str, int]:
        loaded = _edit.load(ctx, args.path, must_exist=True, enforce_read=not preview)
        text = loaded.text
        old = _edit.with_newlines(args.old_string, loaded.newline)
        new = _edit.with_newlines(args.new_string, loaded.newline)
        count = text.count(old)
        if count == 0:
            raise errors.bad_args(
                f"old_string was not found in {loaded.sp.display}; nothing was changed\n"
                + _closest(text, old),
                recovery=[
                    "Copy old_string exactly from the file, whitespace and indentation included",
                    "Read the file again if it may have changed",
                ],
                path=loaded.sp.display,
            )
        if count > 1 and not args.replace_all:
            lines = _match_lines(text, old)
            shown = ", ".join(map(str, lines[:MAX_LISTED_MATCHES]))
            more = f" and {count - MAX_LISTED_MATCHES} more" if count > MAX_LISTED_MATCHES else ""
            raise errors.bad_args(
                f"old_string occurs {count} times in {loaded.sp.display} (at lines {shown}"
                f"{more}); nothing was changed",
                recovery=[
                    "Add surrounding lines to old_string so it matches exactly once",
                    "Or set replace_all to true to change every occurrence",
                ],
                path=loaded.sp.display,
                lines=lines[:100],
            )
        new_text = text.replace(old, new)
        _edit.validate(loaded.sp, new_text, loaded.text if loaded.exists else None)
        return loaded, new_text, count

    def preview(self, args: EditArgs, ctx: ToolContext) -> str | None:
        loaded, new_text, _ = self._plan(args, ctx, preview=True)
        _edit.stage_preview(ctx, loaded, new_text)
        return _edit.unified_diff(loaded.sp.display, loaded.text, new_text)

    def execute(self, args: EditArgs, ctx: ToolContext) -> Any:
        loaded, new_text, count = self._plan(args, ctx)
        preview = _edit.unified_diff(loaded.sp.display, loaded.text, new_text)
        _edit.check_approved(ctx, preview, loaded.sp.display)
        backup_path = _edit.commit(ctx, loaded, new_text) if new_text != loaded.text else None
        return {
            "path": loaded.sp.display,
            "replacements": count,
            "backup_path": backup_path,
            "preview": preview,
        }


def _match_lines(text: str, needle: str, limit: int = 100) -> list[int]:
    """Line numbers of the first ``limit`` occurrences, counting newlines once."""
    lines: list[int] = []
    line, pos = 1, 0
    start = text.find(needle)
    while start >= 0 and len(lines) < limit:
        line += text.count("\n", pos, start)
        pos = start
        lines.append(line)
        start = text.find(needle, start + 1)
    return lines


CLOSEST_CANDIDATES = 8


def _closest(text: str, needle: str) -> str:
    """The lines of the file most like ``needle``, numbered, for the model to compare.

    Cheap first: every line is compared with the needle's first line, and
    only the few best starts get a full comparison of the whole window.
    """
    lines = text.split("\n")
    want = needle.strip("\n").split("\n") or [needle]
    width = len(want)
    if not text:
        return "The file is empty."
    first = want[0].strip()
    scored: list[tuple[float, int]] = []
    matcher = difflib.SequenceMatcher(autojunk=False)
    matcher.set_seq2(first)
    for i, line in enumerate(lines[: max(len(lines) - width + 1, 1)]):
        matcher.set_seq1(line.strip())
        scored.append((matcher.quick_ratio(), i))
    scored.sort(reverse=True)
    target = "\n".join(want)
    best_ratio, best_at = 0.0, 0
    matcher.set_seq2(target)
    for _, i in scored[:CLOSEST_CANDIDATES]:
        matcher.set_seq1("\n".join(lines[i : i + width]))
        ratio = matcher.ratio()
        if ratio > best_ratio:
            best_ratio, best_at = ratio, i
    if best_ratio < 0.3:
        return "No part of the file resembles old_string."
    shown = lines[best_at : best_at + width]
    body = "\n".join(f"{best_at + 1 + k:6}\t{line}" for k, line in enumerate(shown))
    return f"The closest lines ({best_ratio:.0%} alike) are:\n{body}"
