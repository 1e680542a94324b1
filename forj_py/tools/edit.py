"""``edit``: replace a string (the form most models know best).

``old_string`` is found by the passes of :mod:`._match`: exact first, then
ignoring trailing whitespace, then indentation, then typographic
punctuation; the passes together must find one place (or ``replace_all``,
which takes every place of the first pass that finds any).  The result and
the review say which pass matched, and the diff shows the final text, so a
tolerated difference hides nothing.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from .. import errors
from . import _edit, _guards, _match, _pointer, _regions
from .registry import Tool, ToolContext

PASS_NOTES = {
    "trailing": "old_string matched ignoring trailing whitespace",
    "indent": "old_string matched ignoring indentation; new_string was re-indented to match",
    "unicode": "old_string matched reading typographic quotes, dashes and spaces as ASCII; "
    "new_string was brought to the file's indentation and punctuation",
}


_WAYS = {
    "exact": "match it exactly",
    "trailing": "match it ignoring trailing whitespace",
    "indent": "match it ignoring indentation",
    "unicode": "match it reading typographic punctuation as ASCII",
}


class EditArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    path: str = Field(min_length=1, description="File path relative to the project root")
    old_string: str = Field(
        min_length=1,
        description="The text to replace, copied from the file with whitespace and "
        "indentation; it must occur exactly once (add neighbouring lines if needed)",
    )
    new_string: str = Field(description="The text to put in its place")
    replace_all: bool = Field(
        default=False, description="Replace every occurrence instead of exactly one"
    )


class _Plan:
    """What an edit will write, and how it found the place."""

    def __init__(self, loaded: _edit.Loaded, new_text: str, found: _match.Found) -> None:
        self.loaded = loaded
        self.new_text = new_text
        self.found = found
        self.hunks: list[_regions.Hunk] = []
        self.credentials = 0

    def notes(self) -> list[str]:
        notes = []
        if self.found.way in PASS_NOTES:
            notes.append(PASS_NOTES[self.found.way])
        if self.credentials:
            notes.append(
                f"keeps {self.credentials} redacted credential(s): the original is written back"
            )
        return notes


class Edit(Tool[EditArgs]):
    name = "edit"
    description = (
        "Replace old_string with new_string in a file. Copy old_string from the file "
        "(whitespace and indentation included) with enough lines that it occurs exactly "
        "once, or set replace_all. A copy that differs only in trailing whitespace, "
        "indentation or typographic quotes/dashes is still found (the result says how); "
        "a changed or missing line is not. Where the copy could mean two places (a twin "
        "elsewhere), it is refused with every place listed. Write new_string out in full "
        "and as the file will hold it: a placeholder such as '# ... existing code ...', "
        "the whole file, a ``` fence, diff markers or line numbers are refused. The file "
        "must have been read first and not changed since."
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

    def _plan(self, args: EditArgs, ctx: ToolContext, preview: bool = False) -> _Plan:
        loaded = _edit.load(ctx, args.path, must_exist=True, enforce_read=not preview)
        text, display = loaded.text, loaded.sp.display
        old_string, _ = _guards.restore_credentials(text, args.old_string, "old_string", display)
        new_string, kept = _guards.restore_credentials(text, args.new_string, "new_string", display)
        old = _edit.with_newlines(old_string, loaded.newline)
        new = _edit.with_newlines(new_string, loaded.newline)
        lines = _match.Lines(text)
        try:
            found = _match.find(
                text,
                old,
                new,
                loaded.newline,
                lines=lines,
                tab_width=lambda: _edit.tab_width(ctx, loaded),
            )
        except _match.IndentUnclear as exc:
            raise _pointer.indent_refusal(exc, "old_string", display) from None
        if found is None:
            raise _missed(display, lines, args.old_string)
        spans = _non_overlapping(found.spans)
        if not args.replace_all and (len(spans) > 1 or found.others):
            # Two candidates, at one pass or across passes: never pick one.
            spans = _non_overlapping(found.places)
            listed, places = _pointer.list_places(lines, spans)
            if found.others:
                how = (
                    f" ({_lines_of(found.spans)} {_WAYS[found.way]}; "
                    f"{_lines_of(list(found.others))} once more whitespace or typographic "
                    "punctuation is tolerated)"
                )
            else:
                how = "" if found.way == "exact" else f" ({PASS_NOTES[found.way]})"
            raise errors.bad_args(
                f"old_string occurs {len(spans)} times in {display}{how}, so the place meant "
                f"cannot be told; nothing was changed:\n{listed}",
                recovery=[
                    "Add neighbouring lines to old_string so it matches exactly one of these",
                    "Or set replace_all to true to change every occurrence",
                ],
                path=display,
                lines=[p["start_line"] for p in places],
                matches=places,
            )
        pieces = []
        hunks = []
        at = 0
        for span in spans:
            replaced = text[span.start : span.end]
            where = f"lines {span.first_line}-{span.last_line} of {display}"
            _guards.check_double_escape(span.replacement, replaced, "new_string", where)
            _guards.check_pasted(
                span.replacement,
                replaced,
                text,
                span.first_line,
                span.last_line,
                "new_string",
                where,
                display,
            )
            _guards.check_placeholders(
                span.replacement, replaced, span.first_line, "new_string", where
            )
            pieces += [text[at : span.start], span.replacement]
            at = span.end
            count = span.last_line - span.first_line + 1
            grown = span.replacement.count("\n") - replaced.count("\n")
            hunks.append((span.first_line, count, count + grown))
        new_text = "".join([*pieces, text[at:]])
        _edit.validate(ctx, loaded.sp, new_text, loaded.text if loaded.exists else None)
        plan = _Plan(loaded, new_text, _match.Found(found.way, spans))
        plan.hunks = hunks
        plan.credentials = kept * len(spans)
        return plan

    def preview(self, args: EditArgs, ctx: ToolContext) -> str | None:
        plan = self._plan(args, ctx, preview=True)
        _edit.stage_preview(ctx, plan.loaded, plan.new_text)
        _regions.record_changes(ctx, plan.loaded.sp.canonical, plan.hunks)
        return _edit.review(
            plan.loaded.sp.display, plan.loaded.text, plan.new_text, True, plan.notes()
        )

    def execute(self, args: EditArgs, ctx: ToolContext) -> Any:
        plan = self._plan(args, ctx)
        loaded, new_text = plan.loaded, plan.new_text
        preview = _edit.review(loaded.sp.display, loaded.text, new_text, True, plan.notes())
        _edit.check_approved(ctx, preview, loaded.sp.display)
        backup_path = _edit.commit(ctx, loaded, new_text) if new_text != loaded.text else None
        _regions.record_changes(ctx, loaded.sp.canonical, plan.hunks)
        result: dict[str, Any] = {
            "path": loaded.sp.display,
            "replacements": len(plan.found.spans),
            "matched": plan.found.way,
            "lines": [[s.first_line, s.last_line] for s in plan.found.spans[:100]],
            "backup_path": backup_path,
            "preview": preview,
        }
        if plan.credentials:
            result["credentials_kept"] = plan.credentials
        return result


def _lines_of(spans: list[_match.Span]) -> str:
    return ", ".join(f"lines {s.first_line}-{s.last_line}" for s in spans[:5])


def _non_overlapping(spans: list[_match.Span]) -> list[_match.Span]:
    """Left to right, each match that starts after the previous one ends."""
    out: list[_match.Span] = []
    for span in spans:
        if not out or span.start >= out[-1].end:
            out.append(span)
    return out


def _missed(display: str, lines: _match.Lines, old_string: str) -> errors.ToolFailure:
    if "\n" not in old_string.rstrip("\r\n") and _guards.literal_newlines(old_string) >= 2:
        return errors.bad_args(
            f"old_string was not found in {display}: it is one line holding literal '\\n' "
            "sequences, as if escaped twice; nothing was changed",
            recovery=[
                'Send old_string and new_string with real line breaks: "\\n" in the JSON '
                'arguments, not "\\\\n"',
            ],
            path=display,
            problem="double-escaped",
        )
    text, details, near = _pointer.locate(lines, old_string)
    return errors.bad_args(
        f"old_string was not found in {display}, not even ignoring whitespace and "
        f"typographic punctuation; nothing was changed. {text}",
        recovery=_pointer.next_steps("old_string", near),
        path=display,
        **details,
    )
