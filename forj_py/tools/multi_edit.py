"""``multi_edit``: several line-range edits over one or more files.

With ``stop_on_error`` (the default) it is all or nothing across every file
it touches: every edit is staged and validated in memory first; then each
file is backed up and written atomically; if a write fails, every file
already written is restored to its original bytes, so the project is never
left half-edited.  Without it, files whose edits fail are skipped and the
rest are applied, each file still all or nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from ..errors import ToolFailure
from ..output import visible_controls
from . import _edit, _regions
from .edit_region import describe, notes
from .registry import Tool, ToolContext


class EditItem(BaseModel):
    model_config = ConfigDict(extra="forbid")

    path: str = Field(min_length=1, description="File path relative to the project root")
    start_line: int = Field(ge=1, description="First line to replace, 1-based")
    end_line: int = Field(ge=0, description="Last line to replace, inclusive")
    new_content: str = Field(description="Text that takes the place of those lines")
    expected: str | None = Field(
        default=None,
        description="The lines' current text (send it): it finds the lines even if the "
        "numbers are off",
    )


class MultiEditArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    edits: list[EditItem] = Field(min_length=1, max_length=1000)
    stop_on_error: bool = Field(
        default=True,
        description="All or nothing across every file (default); false applies what it can",
    )
    dry_run: bool = Field(default=False, description="Only show the diffs; change nothing")


@dataclass
class _File:
    loaded: _edit.Loaded | None
    items: list[tuple[int, EditItem]] = field(default_factory=list)
    new_text: str | None = None
    placed: list[_regions.Placed] = field(default_factory=list)
    hunks: list[_regions.Hunk] = field(default_factory=list)
    error: str | None = None
    backup_path: str | None = None


class MultiEdit(Tool[MultiEditArgs]):
    name = "multi_edit"
    # edit_region's rules (REGION_RULES) are named, not repeated: both tools
    # are in the core set, and the model reads its schemas on every request.
    description = (
        "Apply several line-range edits, to one file or many, as one change: by default "
        "all of them or none. All edits of one file are numbered in that file as you read "
        "it, before any of them applies (they apply bottom-up). Each edit follows "
        "edit_region's rules: send 'expected', write new_content out in full. "
        "Every file must have been read first and not changed since."
    )
    Args = MultiEditArgs
    side_effecting = True
    timeout_kind = "file"

    def mutates(self, args: MultiEditArgs) -> bool:
        return not args.dry_run

    def summary(self, args: MultiEditArgs) -> str:
        paths = list(dict.fromkeys(e.path for e in args.edits))
        shown = ", ".join(paths[:4]) + (f" and {len(paths) - 4} more" if len(paths) > 4 else "")
        dry = " [dry run]" if args.dry_run else ""
        return f"Apply {len(args.edits)} edit(s) to {len(paths)} file(s): {shown}{dry}"

    def paths(self, args: MultiEditArgs) -> list[str]:
        return [e.path for e in args.edits]

    def _stage(
        self, args: MultiEditArgs, ctx: ToolContext, preview: bool = False
    ) -> dict[str, _File]:
        files: dict[str, _File] = {}
        for index, item in enumerate(args.edits):
            sp = ctx.sandbox.resolve(item.path, ctx.working_dir, for_write=True)
            files.setdefault(sp.canonical, _File(None)).items.append((index, item))
        for entry in files.values():
            path = entry.items[0][1].path
            try:
                entry.loaded = _edit.load(
                    ctx, path, must_exist=True, enforce_read=not (args.dry_run or preview)
                )
                regions = [
                    _regions.Region(i.start_line, i.end_line, i.new_content, i.expected)
                    for _, i in entry.items
                ]
                entry.placed = _regions.place(ctx, entry.loaded, regions)
                entry.new_text, entry.hunks = _regions.apply(entry.loaded, entry.placed)
                _edit.validate(ctx, entry.loaded.sp, entry.new_text, entry.loaded.text)
            except ToolFailure as failure:
                if args.stop_on_error:
                    raise _in_batch(failure, path) from None
                entry.error = failure.error.message
        return files

    def preview(self, args: MultiEditArgs, ctx: ToolContext) -> str | None:
        files = self._stage(args, ctx, preview=True)
        if not args.dry_run:
            for entry in files.values():
                if entry.loaded is not None and entry.new_text is not None:
                    _edit.stage_preview(ctx, entry.loaded, entry.new_text)
                    _regions.record_changes(ctx, entry.loaded.sp.canonical, entry.hunks)
        return _diffs(files)

    def execute(self, args: MultiEditArgs, ctx: ToolContext) -> Any:
        files = self._stage(args, ctx)
        preview = _diffs(files)
        _check_approved_per_file(ctx, files)
        if not args.dry_run:
            if args.stop_on_error:
                _commit_all(ctx, [f for f in files.values() if f.error is None])
            else:
                for entry in files.values():
                    if entry.error is None:
                        try:
                            _commit_all(ctx, [entry])
                        except ToolFailure as failure:
                            entry.error = failure.error.message
        details: list[dict[str, Any]] = []
        applied = skipped = 0
        for entry in files.values():
            changed = (
                entry.error is None
                and entry.loaded is not None
                and entry.new_text != entry.loaded.text
            )
            if changed and not args.dry_run and entry.loaded is not None:
                _regions.record_changes(ctx, entry.loaded.sp.canonical, entry.hunks)
            for k, (index, item) in enumerate(entry.items):
                detail: dict[str, Any] = {
                    "index": index,
                    "path": entry.loaded.sp.display if entry.loaded else item.path,
                    "start_line": item.start_line,
                    "end_line": item.end_line,
                    **(describe(entry.placed[k]) if k < len(entry.placed) else {}),
                    "backup_path": entry.backup_path,
                    # Whether the content differs, dry run or not: a dry run
                    # whose preview shows a change must not say it has none.
                    "changed": changed,
                }
                if entry.error is not None:
                    detail["error"] = entry.error
                    skipped += 1
                else:
                    applied += 1
                details.append(detail)
        details.sort(key=lambda d: d["index"])
        return {
            "applied": 0 if args.dry_run else applied,
            "skipped": skipped,
            "dry_run": args.dry_run,
            "details": details,
            "preview": preview,
        }


def _in_batch(failure: ToolFailure, path: str) -> ToolFailure:
    failure.error.message = f"{failure.error.message} (in the edits to {path}; no file was changed)"
    return failure


def _diffs(files: dict[str, _File]) -> str:
    parts = []
    for entry in files.values():
        if entry.loaded is not None and entry.new_text is not None and entry.error is None:
            parts.append(_review(entry))
    return "".join(parts)


def _review(entry: _File) -> str:
    assert entry.loaded is not None and entry.new_text is not None
    loaded = entry.loaded
    return _edit.review(loaded.sp.display, loaded.text, entry.new_text, True, notes(entry.placed))


def _check_approved_per_file(ctx: ToolContext, files: dict[str, _File]) -> None:
    """Every file about to change must change exactly as its approved diff says.

    Files skipped for errors (stop_on_error false) may drop out: applying
    less than was approved is allowed, anything else is not.
    """
    if ctx.approved_preview is None:
        return
    approved = set(_edit.split_file_diffs(ctx.approved_preview))
    for entry in files.values():
        if entry.error is not None or entry.loaded is None or entry.new_text is None:
            continue
        diff = _review(entry)
        if diff and visible_controls(diff) not in approved:
            _edit.check_approved(ctx, diff, entry.loaded.sp.display)  # raises: it differs


def _commit_all(ctx: ToolContext, entries: list[_File]) -> None:
    """Write every staged file, all or nothing (see :func:`_edit.commit_all`)."""
    changes = []
    for entry in entries:
        assert entry.loaded is not None and entry.new_text is not None
        changes.append((entry.loaded, entry.new_text))
    for entry, backup_path in zip(entries, _edit.commit_all(ctx, changes), strict=True):
        entry.backup_path = backup_path
