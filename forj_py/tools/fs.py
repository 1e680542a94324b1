"""``fs_move``, ``fs_copy``, ``fs_delete``: files and directories as wholes.

Both ends of every call are inside the sandbox, and every file inside a
directory is checked on its own (a tree holding a denied file is
refused).  Links are never followed: a path that is itself a link, or a
tree holding one, is refused.  Nothing is overwritten unless
``overwrite`` says so, and directories are copied or deleted only with
``recursive``.

Nothing is lost: a delete moves each file's content into the backup
store and journals it, so undo brings it back; a move is a creation at
the destination and a removal at the source, journaled the same way.
A delete larger than the backup store keeps is refused unless ``force``
is set, and then it is always reviewed, as not restorable.

These tools need no earlier read: the review shows what each file holds
(lines or size, and a fingerprint of every file), and the call refuses
to run if the files changed after the user approved it.  A move carries
what the model read of a file to its new path.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from .. import errors
from ..errors import ToolFailure
from ..output import shown_line
from ..protocol import RiskLevel
from ..safety.files import sha256
from ..safety.paths import SafePath
from . import _edit
from ._fileops import (
    MAX_TREE_BYTES,
    SHOW_FILES,
    Step,
    Tree,
    given_is_link,
    make_dirs,
    read_tree,
    refuse_link,
    remove_empty_dirs,
    run,
    size_note,
    text_of,
    wire_done,
)
from .registry import Tool, ToolContext


class FsMoveArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    src: str = Field(min_length=1, description="File or directory to move (project-relative)")
    dst: str = Field(min_length=1, description="Its new path, in full (not a parent directory)")
    overwrite: bool = Field(default=False, description="Replace an existing file at dst")


class FsCopyArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    src: str = Field(min_length=1, description="File or directory to copy (project-relative)")
    dst: str = Field(min_length=1, description="The copy's path, in full (not a parent directory)")
    overwrite: bool = Field(default=False, description="Replace an existing file at dst")
    preserve_mode: bool = Field(default=True, description="Give copies the source's permissions")
    recursive: bool = Field(default=False, description="Required to copy a directory")


class FsDeleteArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    path: str = Field(min_length=1, description="File or directory to delete (project-relative)")
    recursive: bool = Field(default=False, description="Required to delete a directory")
    force: bool = Field(
        default=False,
        description="A missing path is not an error, and a tree too large for the backup "
        "store is deleted without a backup (not restorable; always reviewed)",
    )


def _restorable_limit(ctx: ToolContext) -> int:
    limit = MAX_TREE_BYTES
    if ctx.backups is not None:
        limit = min(limit, ctx.backups.max_total_bytes)
    return min(limit, int(ctx.config.tools.backups.max_total_mb * 1024 * 1024))


def _source(ctx: ToolContext, path: str, verb: str) -> SafePath:
    if given_is_link(ctx, path):
        raise refuse_link(path, verb)
    sp = ctx.sandbox.resolve(path, ctx.working_dir, for_write=True)
    if not sp.exists:
        raise errors.file_error(
            f"Not found: {sp.display}",
            sp.display,
            recovery=["Check the path; list_files or glob show what exists"],
        )
    return sp


@dataclass
class _Transfer:
    """A planned move or copy: each source file and where it goes."""

    tree: Tree
    dst: SafePath
    pairs: list[tuple[SafePath, SafePath, bytes, int]] = field(default_factory=list)
    replaced: bytes | None = None  # what an overwritten destination file held
    dst_dirs: list[SafePath] = field(default_factory=list)

    def fingerprint(self) -> str:
        extra = "" if self.replaced is None else sha256(self.replaced)
        return sha256((self.tree.fingerprint() + extra).encode())[:16]


def _transfer(
    ctx: ToolContext, src: str, dst: str, overwrite: bool, recursive: bool, verb: str
) -> _Transfer:
    src_sp = _source(ctx, src, verb)
    if given_is_link(ctx, dst):
        raise refuse_link(dst, f"{verb} onto")
    dst_sp = ctx.sandbox.resolve(dst, ctx.working_dir, for_write=True)
    if dst_sp.canonical == src_sp.canonical:
        raise errors.bad_args(
            f"src and dst are the same path ({src_sp.display})",
            recovery=["Give dst the new path in full"],
        )
    if dst_sp.canonical.startswith(src_sp.canonical.rstrip("/") + "/"):
        raise errors.bad_args(
            f"dst {dst_sp.display} lies inside src {src_sp.display}",
            recovery=["Choose a destination outside the directory being moved or copied"],
        )
    tree = read_tree(ctx, src_sp, recursive=recursive)
    if tree.total_bytes > MAX_TREE_BYTES:
        raise errors.bad_args(
            f"{src_sp.display} holds {tree.total_bytes} bytes, more than forj {verb}s "
            f"({MAX_TREE_BYTES} bytes)",
            recovery=["Ask the user to do this one", "Or work on smaller parts of it"],
            path=src_sp.display,
        )
    plan = _Transfer(tree, dst_sp)
    if dst_sp.exists:
        if tree.is_dir or os.path.isdir(dst_sp.canonical):
            raise errors.file_error(
                f"{dst_sp.display} already exists and "
                + ("is a directory" if os.path.isdir(dst_sp.canonical) else "is a file")
                + f"; forj does not merge a {verb} into it",
                dst_sp.display,
                recovery=[
                    "Give dst the full new path, including the file or directory name",
                    "Delete or move what is there first if it should go",
                ],
            )
        if not overwrite:
            raise errors.file_error(
                f"{dst_sp.display} already exists; nothing was changed",
                dst_sp.display,
                recovery=[
                    "Set overwrite to true to replace it (its content is backed up)",
                    "Or choose another dst",
                ],
            )
        plan.replaced = read_tree(ctx, dst_sp, recursive=False).files[0][1]
    for sp, data, mode in tree.files:
        assert data is not None
        rel = os.path.relpath(sp.canonical, src_sp.canonical) if tree.is_dir else "."
        target = dst_sp if rel == "." else _inside(ctx, dst_sp, rel)
        plan.pairs.append((sp, target, data, mode))
    for d in tree.dirs:
        plan.dst_dirs.append(_inside(ctx, dst_sp, os.path.relpath(d.canonical, src_sp.canonical)))
    return plan


def _inside(ctx: ToolContext, base: SafePath, rel: str) -> SafePath:
    return ctx.sandbox.resolve(
        os.path.join(base.display, rel)
        if not os.path.isabs(base.display)
        else os.path.join(base.canonical, rel),
        for_write=True,
    )


def _transfer_review(plan: _Transfer, verb: str, restorable: bool) -> str:
    out = []
    for src, dst, data, mode in plan.pairs[:SHOW_FILES]:
        out.append(f"--- a/{shown_line(src.display)}\n+++ b/{shown_line(dst.display)}\n")
        if plan.replaced is not None:
            old_text, new_text = text_of(plan.replaced), text_of(data)
            if old_text is not None and new_text is not None:
                body = _edit.unified_diff(dst.display, old_text, new_text)
                out.append(body.split("\n", 2)[2] if body.count("\n") >= 2 else "")
            out.append(
                f"note: replaces {shown_line(dst.display)} ({size_note(plan.replaced)}); its "
                "content is "
                "backed up\n"
            )
        out.append(f"note: {verb} unchanged ({size_note(data, mode)})\n")
    more = len(plan.pairs) - SHOW_FILES
    if more > 0:
        out.append(f"note: and {more} more file(s)\n")
    total = sum(len(d) for _, _, d, _ in plan.pairs)
    tail = "" if restorable else "; NOT restorable from forj's backups (too large)"
    out.append(
        f"note: {verb} {len(plan.pairs)} file(s), {total} bytes; fingerprint "
        f"{plan.fingerprint()}{tail}\n"
    )
    return "".join(out)


def _carries_read(ctx: ToolContext, sp: SafePath, data: bytes) -> bool:
    with ctx.session.lock:
        return ctx.session.file_reads.get(sp.canonical) == sha256(data)


class FsMove(Tool[FsMoveArgs]):
    name = "fs_move"
    description = (
        "Move or rename a file or a directory inside the project. dst is the new path in "
        "full. An existing dst is replaced only with overwrite (its content is backed up); "
        "an existing directory is never merged into. The source's files are backed up, so "
        "undo can put everything back; what you read of a file stays read at its new path."
    )
    Args = FsMoveArgs
    side_effecting = True
    timeout_kind = "file"

    def risk(self, args: FsMoveArgs) -> RiskLevel:
        return RiskLevel.HIGH if args.overwrite else RiskLevel.MEDIUM

    def removes_files(self, args: FsMoveArgs) -> bool:
        """An overwriting move replaces a file: never covered by accept-edits."""
        return args.overwrite

    def summary(self, args: FsMoveArgs) -> str:
        return f"Move {args.src} to {args.dst}" + (" (overwrite)" if args.overwrite else "")

    def paths(self, args: FsMoveArgs) -> list[str]:
        return [args.src, args.dst]

    def review_notes(self, args: FsMoveArgs, ctx: ToolContext) -> list[str]:
        return _size_notes(ctx, args.src, "moved")

    def _review(self, args: FsMoveArgs, ctx: ToolContext) -> tuple[_Transfer, str, bool]:
        plan = _transfer(ctx, args.src, args.dst, args.overwrite, True, "move")
        restorable = plan.tree.total_bytes <= _restorable_limit(ctx)
        return plan, _transfer_review(plan, "moved", restorable), restorable

    def preview(self, args: FsMoveArgs, ctx: ToolContext) -> str | None:
        return self._review(args, ctx)[1]

    def execute(self, args: FsMoveArgs, ctx: ToolContext) -> Any:
        plan, preview, restorable = self._review(args, ctx)
        _edit.check_approved(ctx, preview, plan.dst.display)
        carried = [_carries_read(ctx, src, data) for src, _, data, _ in plan.pairs]
        steps = [Step(dst, plan.replaced, data, mode) for _, dst, data, mode in plan.pairs] + [
            Step(src, data, None, backup=restorable) for src, _, data, _ in plan.pairs
        ]
        make_dirs(ctx, plan.dst_dirs)
        done = run(ctx, steps)
        for (_, dst, _, _), read in zip(plan.pairs, carried, strict=True):
            if not read:
                with ctx.session.lock:
                    ctx.session.file_reads.pop(dst.canonical, None)
        kept = remove_empty_dirs(ctx, [*plan.tree.dirs, plan.tree.root] if plan.tree.is_dir else [])
        result: dict[str, Any] = {
            "moved": True,
            "src": plan.tree.root.display,
            "dst": plan.dst.display,
            "is_dir": plan.tree.is_dir,
            "files": len(plan.pairs),
            "overwritten": plan.replaced is not None,
            "restorable": restorable,
            "changes": wire_done(done)[:SHOW_FILES],
            "preview": preview,
        }
        if kept:
            result["directories_left"] = kept
        return result


class FsCopy(Tool[FsCopyArgs]):
    name = "fs_copy"
    description = (
        "Copy a file, or a directory with recursive, inside the project. dst is the copy's "
        "path in full. An existing dst file is replaced only with overwrite (its content is "
        "backed up); an existing directory is never merged into. preserve_mode keeps the "
        "permission bits."
    )
    Args = FsCopyArgs
    side_effecting = True
    timeout_kind = "file"

    def risk(self, args: FsCopyArgs) -> RiskLevel:
        return RiskLevel.HIGH if args.overwrite else RiskLevel.MEDIUM

    def removes_files(self, args: FsCopyArgs) -> bool:
        """An overwriting copy replaces a file the model has not read: always reviewed."""
        return args.overwrite

    def summary(self, args: FsCopyArgs) -> str:
        flags = [
            f for f, on in (("recursive", args.recursive), ("overwrite", args.overwrite)) if on
        ]
        return f"Copy {args.src} to {args.dst}" + (f" ({', '.join(flags)})" if flags else "")

    def paths(self, args: FsCopyArgs) -> list[str]:
        return [args.src, args.dst]

    def _review(self, args: FsCopyArgs, ctx: ToolContext) -> tuple[_Transfer, str]:
        plan = _transfer(ctx, args.src, args.dst, args.overwrite, args.recursive, "copy")
        return plan, _transfer_review(plan, "copied", True)

    def preview(self, args: FsCopyArgs, ctx: ToolContext) -> str | None:
        return self._review(args, ctx)[1]

    def execute(self, args: FsCopyArgs, ctx: ToolContext) -> Any:
        plan, preview = self._review(args, ctx)
        _edit.check_approved(ctx, preview, plan.dst.display)
        carried = [_carries_read(ctx, src, data) for src, _, data, _ in plan.pairs]
        steps = [
            Step(dst, plan.replaced, data, mode if args.preserve_mode else None)
            for _, dst, data, mode in plan.pairs
        ]
        make_dirs(ctx, plan.dst_dirs)
        done = run(ctx, steps)
        for (_, dst, _, _), read in zip(plan.pairs, carried, strict=True):
            if not read:
                with ctx.session.lock:
                    ctx.session.file_reads.pop(dst.canonical, None)
        return {
            "copied": True,
            "src": plan.tree.root.display,
            "dst": plan.dst.display,
            "is_dir": plan.tree.is_dir,
            "files": len(plan.pairs),
            "overwritten": plan.replaced is not None,
            "changes": wire_done(done)[:SHOW_FILES],
            "preview": preview,
        }


class FsDelete(Tool[FsDeleteArgs]):
    name = "fs_delete"
    description = (
        "Delete a file, or a directory with recursive. Each file's content goes to forj's "
        "backup store first, so undo can bring it back. A tree larger than the backup store "
        "keeps is refused unless force is set (then it is not restorable, and the user "
        "always reviews it); force also makes a missing path no error."
    )
    Args = FsDeleteArgs
    side_effecting = True
    timeout_kind = "file"

    def risk(self, args: FsDeleteArgs) -> RiskLevel:
        return RiskLevel.HIGH

    def removes_files(self, args: FsDeleteArgs) -> bool:
        """Deletes are never covered by accept-edits."""
        return True

    def summary(self, args: FsDeleteArgs) -> str:
        flags = [f for f, on in (("recursive", args.recursive), ("force", args.force)) if on]
        return f"Delete {args.path}" + (f" ({', '.join(flags)})" if flags else "")

    def paths(self, args: FsDeleteArgs) -> list[str]:
        return [args.path]

    def review_notes(self, args: FsDeleteArgs, ctx: ToolContext) -> list[str]:
        return _size_notes(ctx, args.path, "deleted")

    def _plan(self, args: FsDeleteArgs, ctx: ToolContext) -> tuple[Tree | None, bool, str]:
        if args.force:
            probe = ctx.sandbox.resolve(args.path, ctx.working_dir, for_write=True)
            if not probe.exists and not given_is_link(ctx, args.path):
                return (
                    None,
                    True,
                    f"note: {shown_line(probe.display)} does not exist; nothing to delete\n",
                )
        sp = _source(ctx, args.path, "delete")
        sized = read_tree(ctx, sp, recursive=args.recursive, read=False)
        restorable = sized.total_bytes <= _restorable_limit(ctx)
        if not restorable and not args.force:
            raise errors.bad_args(
                f"{sp.display} holds {sized.total_bytes} bytes, more than the backup store "
                f"keeps ({_restorable_limit(ctx)} bytes): deleting it could not be undone; "
                "nothing was deleted",
                recovery=[
                    "Ask the user whether it may go for good; if so, call again with force: true "
                    "(the user reviews it as not restorable)",
                    "Or delete smaller parts of it",
                ],
                path=sp.display,
                bytes=sized.total_bytes,
            )
        tree = read_tree(ctx, sp, recursive=args.recursive, read=restorable)
        return tree, restorable, delete_review(tree, restorable)

    def preview(self, args: FsDeleteArgs, ctx: ToolContext) -> str | None:
        return self._plan(args, ctx)[2]

    def execute(self, args: FsDeleteArgs, ctx: ToolContext) -> Any:
        tree, restorable, preview = self._plan(args, ctx)
        if tree is None:
            return {"deleted": False, "path": args.path, "missing": True, "preview": preview}
        _edit.check_approved(ctx, preview, tree.root.display)
        steps = [Step(sp, data, None, backup=restorable) for sp, data, _ in tree.files]
        done = run(ctx, steps)
        kept = remove_empty_dirs(ctx, [*tree.dirs, tree.root] if tree.is_dir else [])
        result: dict[str, Any] = {
            "deleted": True,
            "path": tree.root.display,
            "is_dir": tree.is_dir,
            "files": len(tree.files),
            "restorable": restorable,
            "changes": wire_done(done)[:SHOW_FILES],
            "preview": preview,
        }
        if kept:
            result["directories_left"] = kept
        return result


def delete_review(tree: Tree, restorable: bool) -> str:
    out = []
    for sp, data, mode in tree.files[:SHOW_FILES]:
        text = text_of(data)
        if text:
            diff = _edit.unified_diff(sp.display, text, "", existed=True)
            out.append(diff.replace(f"+++ b/{shown_line(sp.display)}\n", "+++ /dev/null\n", 1))
        else:
            out.append(f"--- a/{shown_line(sp.display)}\n+++ /dev/null\n")
        out.append(f"note: deleted ({size_note(data, mode)})\n")
    more = len(tree.files) - SHOW_FILES
    if more > 0:
        out.append(f"note: and {more} more file(s)\n")
    where = "kept in forj's backups, undo restores" if restorable else "NOT restorable"
    out.append(
        f"note: deletes {len(tree.files)} file(s)"
        + (f" and {len(tree.dirs) + 1} director(ies)" if tree.is_dir else "")
        + f", {tree.total_bytes} bytes ({where}); fingerprint {tree.fingerprint()}\n"
    )
    return "".join(out)


def _size_notes(ctx: ToolContext, path: str, verb: str) -> list[str]:
    """A forced-review sentence when the tree is too large for the backup store."""
    try:
        sp = ctx.sandbox.resolve(path, ctx.working_dir, for_write=True)
        if not sp.exists:
            return []
        tree = read_tree(ctx, sp, recursive=True, read=False)
    except ToolFailure:
        return []  # the call itself will say what is wrong
    limit = _restorable_limit(ctx)
    if tree.total_bytes <= limit:
        return []
    return [
        f"Not restorable: {sp.display} holds {tree.total_bytes} bytes, more than forj's backup "
        f"store keeps ({limit} bytes); once {verb}, undo cannot bring it back"
    ]
