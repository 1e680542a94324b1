"""``edit_region``: replace a range of lines.

Line numbers are those of the file as the model last read it; see
:mod:`._regions` for how they are mapped through earlier calls of the
batch, relocated with ``expected``, and checked without it.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from . import _edit, _regions
from .registry import Tool, ToolContext

REGION_RULES = (
    "Line numbers are those of the file as you last read it, even after earlier calls "
    "in the same message changed it (they are mapped through those changes). Always "
    "send 'expected', the current text of those lines: if it is not at the given lines "
    "but occurs exactly once elsewhere (trailing whitespace, indentation and typographic "
    "punctuation aside), the edit is applied there and the result says relocated_from; "
    "without it, new content whose edges repeat the lines just outside the range is "
    "refused as misplaced. Write the new content out in full: a placeholder such as "
    "'# ... existing code ...' is refused."
)


class EditRegionArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    path: str = Field(min_length=1, description="File path relative to the project root")
    start_line: int = Field(ge=1, description="First line to replace, 1-based")
    end_line: int = Field(
        ge=0,
        description="Last line to replace, inclusive; start_line - 1 inserts before start_line",
    )
    new_content: str = Field(description="Text that takes the place of those lines")
    expected: str | None = Field(
        default=None,
        description="The lines' current text (send it): it finds the lines even if the "
        "numbers are off, and if it occurs nowhere nothing changes and the error shows "
        "the closest lines",
    )
    dry_run: bool = Field(default=False, description="Only show the diff; change nothing")


def notes(placed: list[_regions.Placed]) -> list[str]:
    """What the review and the result say about how each range was found."""
    out = []
    for item in placed:
        r = item.region
        if item.relocated_from is not None:
            out.append(
                f"lines {r.start_line}-{r.end_line} did not hold 'expected'; it was found "
                f"at lines {item.start}-{item.end}, and the edit applies there"
            )
        elif item.mapped:
            out.append(
                f"lines {r.start_line}-{r.end_line} are lines {item.start}-{item.end} after "
                "the earlier changes of this batch"
            )
        if item.matched not in (None, "exact"):
            out.append(
                f"'expected' matched lines {item.start}-{item.end} ignoring "
                + {
                    "trailing": "trailing whitespace",
                    "indent": "indentation; new_content was re-indented to match",
                    "unicode": "whitespace and typographic punctuation",
                }[item.matched or "exact"]
            )
    kept = sum(item.credentials for item in placed)
    if kept:
        out.append(f"keeps {kept} redacted credential(s): the original is written back")
    return out


def describe(item: _regions.Placed) -> dict[str, Any]:
    """The result fields of one placed range."""
    out: dict[str, Any] = {}
    if item.matched is not None:
        out["matched"] = item.matched
    if item.relocated_from is not None:
        out["relocated_from"] = list(item.relocated_from)
    if item.relocated_from is not None or item.mapped:
        out["applied_at"] = [item.start, item.end]
    if item.credentials:
        out["credentials_kept"] = item.credentials
    return out


class EditRegion(Tool[EditRegionArgs]):
    name = "edit_region"
    description = (
        "Replace lines start_line..end_line (1-based, inclusive) of a file with new_content. "
        + REGION_RULES
        + " The file must have been read first and not changed since."
    )
    Args = EditRegionArgs
    side_effecting = True
    timeout_kind = "file"

    def mutates(self, args: EditRegionArgs) -> bool:
        return not args.dry_run

    def summary(self, args: EditRegionArgs) -> str:
        return f"Edit {args.path} lines {args.start_line}-{args.end_line}" + (
            " [dry run]" if args.dry_run else ""
        )

    def paths(self, args: EditRegionArgs) -> list[str]:
        return [args.path]

    def _plan(
        self, args: EditRegionArgs, ctx: ToolContext, preview: bool = False
    ) -> tuple[_edit.Loaded, str, list[_regions.Placed], list[_regions.Hunk]]:
        enforce = not (args.dry_run or preview)
        loaded = _edit.load(ctx, args.path, must_exist=True, enforce_read=enforce)
        region = _regions.Region(args.start_line, args.end_line, args.new_content, args.expected)
        placed = _regions.place(ctx, loaded, [region])
        new_text, hunks = _regions.apply(loaded, placed)
        _edit.validate(ctx, loaded.sp, new_text, loaded.text if loaded.exists else None)
        return loaded, new_text, placed, hunks

    def preview(self, args: EditRegionArgs, ctx: ToolContext) -> str | None:
        loaded, new_text, placed, hunks = self._plan(args, ctx, preview=True)
        if not args.dry_run:
            _edit.stage_preview(ctx, loaded, new_text)
            _regions.record_changes(ctx, loaded.sp.canonical, hunks)
        return _edit.review(loaded.sp.display, loaded.text, new_text, True, notes(placed))

    def execute(self, args: EditRegionArgs, ctx: ToolContext) -> Any:
        loaded, new_text, placed, hunks = self._plan(args, ctx)
        preview = _edit.review(loaded.sp.display, loaded.text, new_text, True, notes(placed))
        _edit.check_approved(ctx, preview, loaded.sp.display)
        changed = new_text != loaded.text
        backup_path = None
        if changed and not args.dry_run:
            backup_path = _edit.commit(ctx, loaded, new_text)
            _regions.record_changes(ctx, loaded.sp.canonical, hunks)
        return {
            "path": loaded.sp.display,
            "start_line": args.start_line,
            "end_line": args.end_line,
            **describe(placed[0]),
            "backup_path": backup_path,
            "dry_run": args.dry_run,
            "changed": changed,
            "preview": preview,
        }
