"""``edit_region``: replace a range of lines (seed 001 section 4.5)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from ..registry import Tool, ToolContext
from . import _edit


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
        description="The lines' current text; if it differs, nothing changes and the "
        "error shows the difference",
    )
    dry_run: bool = Field(default=False, description="Only show the diff; change nothing")


class EditRegion(Tool[EditRegionArgs]):
    name = "edit_region"
    description = (
        "Replace lines start_line..end_line (1-based, inclusive) of a file with new_content. "
        "The file must have been read first and not changed since. Give 'expected' (the "
        "current text of those lines) to make sure the right lines change."
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
    ) -> tuple[_edit.Loaded, str]:
        enforce = not (args.dry_run or preview)
        loaded = _edit.load(ctx, args.path, must_exist=True, enforce_read=enforce)
        region = _edit.Region(args.start_line, args.end_line, args.new_content, args.expected)
        new_text = _edit.apply_regions(loaded, [region])
        _edit.validate(loaded.sp, new_text, loaded.text if loaded.exists else None)
        return loaded, new_text

    def preview(self, args: EditRegionArgs, ctx: ToolContext) -> str | None:
        loaded, new_text = self._plan(args, ctx, preview=True)
        if not args.dry_run:
            _edit.stage_preview(ctx, loaded, new_text)
        return _edit.unified_diff(loaded.sp.display, loaded.text, new_text)

    def execute(self, args: EditRegionArgs, ctx: ToolContext) -> Any:
        loaded, new_text = self._plan(args, ctx)
        preview = _edit.unified_diff(loaded.sp.display, loaded.text, new_text)
        _edit.check_approved(ctx, preview, loaded.sp.display)
        changed = new_text != loaded.text
        backup_path = None
        if changed and not args.dry_run:
            backup_path = _edit.commit(ctx, loaded, new_text)
        return {
            "path": loaded.sp.display,
            "start_line": args.start_line,
            "end_line": args.end_line,
            "backup_path": backup_path,
            "dry_run": args.dry_run,
            "changed": changed,
            "preview": preview,
        }
