"""``apply_patch`` and ``file_patch``: changes written as patches.

``apply_patch`` takes Codex's ``*** Begin Patch`` envelope (add, update,
delete and move files) or a unified diff of any number of files;
``file_patch`` takes a unified diff of one file (headers optional).  Both
are all or nothing: every hunk of every file is placed in memory first
(:mod:`._patchapply`, the tolerant matching of ``edit``), every new text
is checked (the ``.el`` reader check), and only then is anything
written; a write that fails puts back every file already changed.

The stale-file rule holds for every file a patch changes: it must have
been read and not changed since.  Deleted files, like ``fs_delete``'s,
need no read: the review shows what they hold and the call refuses to run
if that changed after the approval.  A deleting patch is high risk and
never covered by the accept-edits mode.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from .. import errors
from ..errors import ToolFailure
from ..output import shown_line
from ..protocol import RiskLevel
from ..safety.paths import SafePath
from . import _edit, _patchapply, _patchparse, _regions
from ._fileops import Step, Tree, given_is_link, read_tree, refuse_link, run
from ._patchparse import FileOp, Patch
from .fs import delete_review
from .registry import Tool, ToolContext

_PASS_NOTES = {
    "trailing": "ignoring trailing whitespace",
    "indent": "ignoring indentation (the new lines were re-indented to match)",
    "unicode": "reading typographic quotes, dashes and spaces as ASCII",
}


class ApplyPatchArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    patch: str = Field(
        min_length=1,
        description="A '*** Begin Patch' envelope (Add File / Update File with '@@' hunks / "
        "Delete File / Move to) or a unified diff ('--- a/p', '+++ b/p', '@@' hunks)",
    )
    dry_run: bool = Field(default=False, description="Only show the diffs; change nothing")


class FilePatchArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    path: str = Field(min_length=1, description="The file to patch (project-relative)")
    unified_diff: str = Field(
        min_length=1, description="Unified diff hunks for this file ('---'/'+++' lines optional)"
    )


@dataclass
class _FilePlan:
    op: FileOp
    sp: SafePath
    loaded: _edit.Loaded | None = None  # updates and adds
    new_text: str | None = None
    dst: SafePath | None = None  # a move's destination
    data: bytes | None = None  # a delete's content
    mode: int | None = None
    applied: list[_patchapply.Applied] = field(default_factory=list)

    @property
    def action(self) -> str:
        if self.op.kind == "add":
            return "added"
        if self.op.kind == "delete":
            return "deleted"
        return "moved" if self.dst is not None else "updated"


@dataclass
class _Plan:
    patch: Patch
    files: list[_FilePlan]

    @property
    def removes(self) -> bool:
        return any(f.op.kind == "delete" or f.dst is not None for f in self.files)


def _limits(ctx: ToolContext, text: str) -> None:
    limit = ctx.config.tools.apply_patch.max_patch_bytes
    size = len(text.encode("utf-8", "surrogatepass"))
    if size > limit:
        raise errors.limits_exceeded(
            f"The patch is {size} bytes, over the {limit}-byte limit "
            "([tools.apply_patch] max_patch_bytes); nothing was changed",
            ["Split the change into several smaller patches"],
            size=size,
            limit=limit,
        )


def _parse(ctx: ToolContext | None, text: str) -> Patch:
    if ctx is not None:
        _limits(ctx, text)
    patch = _patchparse.parse(text)
    if ctx is not None:
        cfg = ctx.config.tools.apply_patch
        hunks = sum(len(op.hunks) for op in patch.ops)
        if len(patch.ops) > cfg.max_files or hunks > cfg.max_hunks:
            raise errors.limits_exceeded(
                f"The patch touches {len(patch.ops)} file(s) with {hunks} hunk(s); at most "
                f"{cfg.max_files} files and {cfg.max_hunks} hunks per call "
                "([tools.apply_patch]); nothing was changed",
                ["Split the change into several smaller patches"],
            )
    return patch


def _plan(ctx: ToolContext, patch: Patch, *, preview: bool) -> _Plan:
    seen: dict[str, str] = {}
    files = []
    for op in patch.ops:
        item = _plan_op(ctx, op, preview)
        for sp in (item.sp, item.dst):
            if sp is None:
                continue
            if sp.canonical in seen:
                raise errors.bad_args(
                    f"The patch names {sp.display} twice (patch lines {seen[sp.canonical]} and "
                    f"{op.patch_line}); nothing was changed",
                    recovery=["Put every change to one file in one section of the patch"],
                    path=sp.display,
                )
            seen[sp.canonical] = str(op.patch_line)
        files.append(item)
    return _Plan(patch, files)


def _plan_op(ctx: ToolContext, op: FileOp, preview: bool) -> _FilePlan:
    if op.kind == "add":
        loaded = _edit.load(ctx, op.path, must_exist=False)
        if loaded.exists:
            raise errors.file_error(
                f"The patch adds {loaded.sp.display}, which already exists; nothing was changed",
                loaded.sp.display,
                recovery=[
                    f"Read {loaded.sp.display} and change it with '*** Update File:' hunks",
                    "Or delete it first if it should be replaced",
                ],
            )
        new_text = op.content or ""
        _edit.validate(ctx, loaded.sp, new_text)
        return _FilePlan(op, loaded.sp, loaded=loaded, new_text=new_text)
    if given_is_link(ctx, op.path):
        raise refuse_link(op.path, "patch")
    if op.kind == "delete":
        sp = ctx.sandbox.resolve(op.path, ctx.working_dir, for_write=True)
        if not sp.exists:
            raise errors.file_error(
                f"The patch deletes {sp.display}, which does not exist; nothing was changed",
                sp.display,
                recovery=["Check the path; list_files or glob show what exists"],
            )
        tree = read_tree(ctx, sp, recursive=False)
        _, data, mode = tree.files[0]
        return _FilePlan(op, sp, data=data, mode=mode)
    loaded = _edit.load(ctx, op.path, must_exist=True, enforce_read=not preview)
    display = loaded.sp.display
    new_text, applied = _patchapply.apply(display, loaded.text, loaded.newline, op.hunks)
    _edit.validate(ctx, loaded.sp, new_text, loaded.text)
    item = _FilePlan(op, loaded.sp, loaded=loaded, new_text=new_text, applied=applied)
    if op.move_to is not None:
        if given_is_link(ctx, op.move_to):
            raise refuse_link(op.move_to, "move onto")
        dst = ctx.sandbox.resolve(op.move_to, ctx.working_dir, for_write=True)
        if dst.canonical != loaded.sp.canonical:
            if dst.exists:
                raise errors.file_error(
                    f"The patch moves {display} to {dst.display}, which already exists; "
                    "nothing was changed",
                    dst.display,
                    recovery=["Choose another destination, or delete that file first"],
                )
            _edit.validate(ctx, dst, new_text, loaded.text)
            item.dst = dst
            item.mode = read_tree(ctx, loaded.sp, recursive=False).files[0][2]
    return item


def _encoded(loaded: _edit.Loaded, text: str) -> bytes:
    return (("\ufeff" + text) if loaded.bom else text).encode("utf-8")


def _notes(item: _FilePlan) -> list[str]:
    notes = []
    for a in item.applied:
        bits = []
        if a.matched in _PASS_NOTES:
            bits.append(f"matched {_PASS_NOTES[a.matched]}")
        if a.offset:
            bits.append(
                f"{abs(a.offset)} line(s) {'below' if a.offset > 0 else 'above'} "
                "where the patch said"
            )
        if bits:
            notes.append(f"hunk {a.hunk} applied at line {a.old_start}: " + "; ".join(bits))
    return notes


def _review(plan: _Plan) -> str:
    out = []
    for item in plan.files:
        if item.op.kind == "delete":
            tree = Tree(
                item.sp,
                False,
                [(item.sp, item.data, item.mode or 0o644)],
                [],
                len(item.data or b""),
            )
            out.append(delete_review(tree, True))
            continue
        loaded = item.loaded
        assert loaded is not None and item.new_text is not None
        if item.dst is None:
            out.append(
                _edit.review(
                    loaded.sp.display, loaded.text, item.new_text, loaded.exists, _notes(item)
                )
            )
            continue
        body = _edit.review(item.dst.display, loaded.text, item.new_text, True, _notes(item))
        src, dst = shown_line(loaded.sp.display), shown_line(item.dst.display)
        header = f"--- a/{src}\n+++ b/{dst}\n"
        if body:
            out.append(header + body.split("\n", 2)[2])
        else:
            out.append(header)
        out.append(f"note: moved from {src} to {dst}\n")
    return "".join(out)


def _steps(plan: _Plan) -> list[Step]:
    writes, removals = [], []
    for item in plan.files:
        if item.op.kind == "delete":
            removals.append(Step(item.sp, item.data, None))
            continue
        loaded = item.loaded
        assert loaded is not None and item.new_text is not None
        new = _encoded(loaded, item.new_text)
        if item.dst is not None:
            writes.append(Step(item.dst, None, new, item.mode))
            removals.append(Step(loaded.sp, loaded.data, None))
        elif not loaded.exists or new != loaded.data:
            writes.append(Step(loaded.sp, loaded.data, new))
    return writes + removals


def _stage_for_review(ctx: ToolContext, plan: _Plan) -> None:
    """Offer the content for edit-before-approve (only when no file goes away)."""
    for item in plan.files:
        if item.loaded is not None and item.new_text is not None and item.dst is None:
            if not plan.removes:
                _edit.stage_preview(ctx, item.loaded, item.new_text)
            if item.loaded.exists:
                _regions.record_changes(
                    ctx,
                    item.loaded.sp.canonical,
                    _regions.text_hunks(item.loaded.text, item.new_text),
                )


def _execute(ctx: ToolContext, plan: _Plan, dry_run: bool) -> tuple[str, list[dict[str, Any]], int]:
    preview = _review(plan)
    if not dry_run:
        _edit.check_approved(ctx, preview, ", ".join(f.sp.display for f in plan.files))
    backups: dict[str, str | None] = {}
    if not dry_run:
        for done in run(ctx, _steps(plan)):
            backups[done.step.sp.canonical] = done.backup
        for item in plan.files:
            loaded = item.loaded
            if loaded is not None and loaded.exists and item.new_text is not None and not item.dst:
                _regions.record_changes(
                    ctx, loaded.sp.canonical, _regions.text_hunks(loaded.text, item.new_text)
                )
    files = []
    applied = 0
    for item in plan.files:
        entry: dict[str, Any] = {"path": (item.dst or item.sp).display, "action": item.action}
        if item.dst is not None:
            entry["from"] = item.sp.display
        if item.applied:
            entry["hunks"] = [a.wire() for a in item.applied]
            applied += len(item.applied)
        entry["backup_path"] = backups.get(item.sp.canonical)
        files.append(entry)
    return preview, files, applied


class ApplyPatch(Tool[ApplyPatchArgs]):
    name = "apply_patch"
    description = (
        "Apply a patch to one or more files, all or nothing. Either Codex's envelope:\n"
        "*** Begin Patch\n*** Update File: src/app.py\n@@ def main():\n context line\n"
        "-removed line\n+added line\n*** Add File: docs/new.md\n+new line\n"
        "*** Delete File: old.txt\n*** End Patch\n"
        "('*** Move to: new/path' after an Update File line renames it; '@@ text' anchors "
        "a hunk after a line reading text), or a unified diff ('--- a/p', '+++ b/p', "
        "'@@ -l,n +l,n @@'). Hunks are found by their context lines even if line numbers, "
        "trailing whitespace, indentation or typographic quotes differ; a hunk that does not "
        "apply is refused with the closest lines. Files changed must have been read first "
        "and not changed since; deleted files are backed up."
    )
    Args = ApplyPatchArgs
    side_effecting = True
    timeout_kind = "file"

    def mutates(self, args: ApplyPatchArgs) -> bool:
        return not args.dry_run

    def _ops(self, args: ApplyPatchArgs) -> list[FileOp] | None:
        try:
            return _patchparse.parse(args.patch).ops
        except ToolFailure:
            return None

    def risk(self, args: ApplyPatchArgs) -> RiskLevel:
        if not self.mutates(args):
            return RiskLevel.LOW
        ops = self._ops(args) or []
        if any(op.kind == "delete" or op.move_to for op in ops):
            return RiskLevel.HIGH
        return RiskLevel.MEDIUM

    def removes_files(self, args: ApplyPatchArgs) -> bool:
        """A patch that deletes or moves files is never covered by accept-edits."""
        return any(op.kind == "delete" or op.move_to for op in self._ops(args) or [])

    def summary(self, args: ApplyPatchArgs) -> str:
        ops = self._ops(args)
        dry = " [dry run]" if args.dry_run else ""
        if ops is None:
            return f"Apply patch ({len(args.patch)} characters, unreadable){dry}"
        paths = list(dict.fromkeys(p for op in ops for p in op.paths))
        shown = ", ".join(paths[:4]) + (f" and {len(paths) - 4} more" if len(paths) > 4 else "")
        return f"Apply patch to {len(paths)} file(s): {shown}{dry}"

    def paths(self, args: ApplyPatchArgs) -> list[str]:
        # Parse errors surface here, at planning, before anything else is looked at.
        return [p for op in _parse(None, args.patch).ops for p in op.paths]

    def preview(self, args: ApplyPatchArgs, ctx: ToolContext) -> str | None:
        plan = _plan(ctx, _parse(ctx, args.patch), preview=True)
        if not args.dry_run:
            _stage_for_review(ctx, plan)
        return _review(plan)

    def execute(self, args: ApplyPatchArgs, ctx: ToolContext) -> Any:
        plan = _plan(ctx, _parse(ctx, args.patch), preview=args.dry_run)
        preview, files, applied = _execute(ctx, plan, args.dry_run)
        words = {"added": "created", "updated": "modified"}
        lines = [f"{words.get(f['action'], f['action'])}: {f['path']}" for f in files]
        return {
            "applied": not args.dry_run,
            "format": plan.patch.format,
            "files": files,
            "hunks_applied": applied,
            "summary": "\n".join(lines) or "No changes applied.",
            "dry_run": args.dry_run,
            "preview": preview,
        }


class FilePatch(Tool[FilePatchArgs]):
    name = "file_patch"
    description = (
        "Apply a unified diff to one file: '@@ -l,n +l,n @@' hunks with ' ' context, '-' "
        "removed and '+' added lines ('---'/'+++' header lines optional). Hunks are found by "
        "their context even if line numbers or whitespace differ; all hunks apply or none. "
        "The file must have been read first and not changed since."
    )
    Args = FilePatchArgs
    side_effecting = True
    timeout_kind = "file"

    def summary(self, args: FilePatchArgs) -> str:
        hunks = sum(1 for line in args.unified_diff.split("\n") if line.startswith("@@"))
        return f"Patch {args.path} ({hunks} hunk(s))"

    def paths(self, args: FilePatchArgs) -> list[str]:
        return [args.path]

    def _plan(self, args: FilePatchArgs, ctx: ToolContext, preview: bool) -> _Plan:
        _limits(ctx, args.unified_diff)
        text = args.unified_diff
        if not any(line.startswith("--- ") for line in text.split("\n")):
            text = f"--- a/{args.path}\n+++ b/{args.path}\n" + text
        patch = _patchparse.parse(text)
        if patch.format != "unified" or len(patch.ops) != 1:
            raise errors.bad_args(
                f"file_patch takes a unified diff of one file; this one has {len(patch.ops)} "
                "file section(s)",
                recovery=["Use apply_patch for several files, or send one file's hunks"],
            )
        (op,) = patch.ops
        if op.kind != "update" or op.move_to is not None:
            raise errors.bad_args(
                "file_patch changes the content of one existing file; this diff "
                + {"add": "adds", "delete": "deletes"}.get(op.kind, "renames")
                + " a file",
                recovery=["Use apply_patch (or fs_move / fs_delete / write_file) for that"],
            )
        op.path = args.path  # the argument names the file; the headers only label it
        return _plan(ctx, Patch("unified", [op]), preview=preview)

    def preview(self, args: FilePatchArgs, ctx: ToolContext) -> str | None:
        plan = self._plan(args, ctx, preview=True)
        _stage_for_review(ctx, plan)
        return _review(plan)

    def execute(self, args: FilePatchArgs, ctx: ToolContext) -> Any:
        plan = self._plan(args, ctx, preview=False)
        preview, files, applied = _execute(ctx, plan, False)
        (entry,) = files
        return {
            "patched": True,
            "path": entry["path"],
            "hunks_applied": applied,
            "hunks": entry.get("hunks", []),
            "backup_path": entry["backup_path"],
            "preview": preview,
        }
