"""``write_file``: create, overwrite or append to a file."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from .. import errors
from . import _edit, _guards, _regions
from .registry import Tool, ToolContext


class WriteFileArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    path: str = Field(min_length=1, description="File path relative to the project root")
    content: str = Field(description="The full new content (or the text to append)")
    no_backup: bool = Field(default=False, description="Skip the backup of the old content")
    append: bool = Field(default=False, description="Append content instead of replacing")
    create_if_missing: bool = Field(
        default=True, description="Create the file (and its directories) if it does not exist"
    )
    dry_run: bool = Field(default=False, description="Only show the diff; change nothing")


class WriteFile(Tool[WriteFileArgs]):
    name = "write_file"
    description = (
        "Create a file, replace its whole content, or append to it. An existing file must "
        "have been read first (read_file) and not changed since. Prefer edit or edit_region "
        "for changes to part of a file. Write the content out in full: a placeholder such "
        "as '# ... existing code ...' or '// rest unchanged' in place of real lines is "
        "refused, and so is content escaped twice (literal '\\n' instead of line breaks)."
    )
    Args = WriteFileArgs
    side_effecting = True
    timeout_kind = "file"

    def mutates(self, args: WriteFileArgs) -> bool:
        return not args.dry_run

    def summary(self, args: WriteFileArgs) -> str:
        verb = "Append to" if args.append else "Write"
        size = len(args.content.encode("utf-8"))
        return f"{verb} {args.path} ({size} bytes){' [dry run]' if args.dry_run else ''}"

    def paths(self, args: WriteFileArgs) -> list[str]:
        return [args.path]

    def _plan(
        self, args: WriteFileArgs, ctx: ToolContext, preview: bool = False
    ) -> tuple[_edit.Loaded, str, int]:
        enforce = not (args.dry_run or preview)
        loaded = _edit.load(ctx, args.path, must_exist=False, enforce_read=enforce)
        if not loaded.exists and not args.create_if_missing:
            raise errors.file_error(
                f"File not found: {loaded.sp.display} (create_if_missing is false)",
                loaded.sp.display,
                recovery=["Check the path, or set create_if_missing to true to create it"],
            )
        display = loaded.sp.display
        content, kept = _guards.restore_credentials(loaded.text, args.content, "content", display)
        content = _edit.with_newlines(content, loaded.newline)
        if loaded.bom and content.startswith("\ufeff"):
            content = content[1:]  # the file keeps its mark: one, not two
        replaced = loaded.text if loaded.exists and not args.append else ""
        _guards.check_pasted(content, replaced, loaded.text, 1, 0, "content", display, display)
        _guards.check_double_escape(content, replaced, "content", display)
        if loaded.exists and not args.append:
            _guards.check_placeholders(content, loaded.text, 1, "content", display)
        new_text = loaded.text + content if args.append else content
        _edit.validate(ctx, loaded.sp, new_text, loaded.text if loaded.exists else None)
        return loaded, new_text, kept

    def preview(self, args: WriteFileArgs, ctx: ToolContext) -> str | None:
        loaded, new_text, kept = self._plan(args, ctx, preview=True)
        if not args.dry_run:
            _edit.stage_preview(ctx, loaded, new_text)
            _regions.record_changes(
                ctx, loaded.sp.canonical, _regions.text_hunks(loaded.text, new_text)
            )
        return _review(loaded, new_text, kept)

    def execute(self, args: WriteFileArgs, ctx: ToolContext) -> Any:
        loaded, new_text, kept = self._plan(args, ctx)
        preview = _review(loaded, new_text, kept)
        _edit.check_approved(ctx, preview, loaded.sp.display)
        backup_path = None
        if not args.dry_run:
            backup_path = _edit.commit(ctx, loaded, new_text, backup=not args.no_backup)
            _regions.record_changes(
                ctx, loaded.sp.canonical, _regions.text_hunks(loaded.text, new_text)
            )
        written = len(new_text.encode("utf-8")) - (
            len(loaded.text.encode("utf-8")) if args.append else 0
        )
        result: dict[str, Any] = {
            "path": loaded.sp.display,
            "backup_path": backup_path,
            "bytes_written": 0 if args.dry_run else written,
            "created": not loaded.exists,
            "dry_run": args.dry_run,
            "preview": preview,
        }
        if kept:
            result["credentials_kept"] = kept
        return result


def _review(loaded: _edit.Loaded, new_text: str, kept: int) -> str:
    notes = [f"keeps {kept} redacted credential(s): the original is written back"] if kept else []
    return _edit.review(loaded.sp.display, loaded.text, new_text, loaded.exists, notes)
