"""Changing several files as one step: writes, creations and removals, all or none.

What moves, copies, deletes and multi-file patches share.  A change is a
list of :class:`Step` (a file, what it holds now, what it will hold; None
for absent), staged in memory first.  :func:`run` then applies them in
order: each file's old content goes to the backup store, the new content
is written atomically (or the file is unlinked, by descriptor, after
checking it is still the file that was read), and the change is
journaled at once, so undo can put back a deleted file like an edited
one.  If a step fails, the steps already done are undone in reverse
(files written get their old bytes back, files created are removed,
files removed come back), so the project is never left half-changed.

A move is a creation at the destination and a removal at the source:
undo then puts the source back and removes the destination.

Trees are read by :func:`read_tree`: every file inside is validated by
the sandbox on its own (so a directory holding a denied file cannot be
moved or deleted wholesale), and links and special files are refused
rather than followed.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import stat
from dataclasses import dataclass
from typing import Any

from .. import errors
from ..errors import ToolFailure
from ..safety.files import atomic_write, ensure_parents, read_bytes, sha256
from ..safety.paths import SafePath, os_failure
from ..store.journal import FileChange
from ._edit import MAX_EDIT_BYTES
from .registry import ToolContext

# A tree with more files than this is left to the user.
MAX_TREE_FILES = 10_000
# Trees are held in memory while they change; larger ones are left to the user.
MAX_TREE_BYTES = MAX_EDIT_BYTES


@dataclass
class Step:
    """One file of a change: ``old`` what it holds (None: absent), ``new`` what it will."""

    sp: SafePath
    old: bytes | None
    new: bytes | None
    mode: int | None = None  # permission bits for the new file (copies, moves)
    backup: bool = True  # False: the old content is not kept (a delete beyond the limits)


@dataclass
class Done:
    step: Step
    backup: str | None


@dataclass
class Tree:
    """A file or a directory as it is now: its files (with content) and directories."""

    root: SafePath
    is_dir: bool
    files: list[tuple[SafePath, bytes | None, int]]  # (file, content or None if unread, mode)
    dirs: list[SafePath]  # directories inside, parents first (the root not included)
    total_bytes: int

    def fingerprint(self) -> str:
        """One hash over every file's path and content: what a review saw."""
        digest = hashlib.sha256()
        for sp, data, _ in self.files:
            digest.update(sp.display.encode("utf-8", "surrogateescape") + b"\0")
            digest.update((sha256(data) if data is not None else "unread").encode() + b"\0")
        return digest.hexdigest()[:16]


def read_tree(ctx: ToolContext, sp: SafePath, *, recursive: bool, read: bool = True) -> Tree:
    """What ``sp`` holds: one regular file, or (``recursive``) a directory's whole tree."""
    st = _lstat(sp)
    if stat.S_ISREG(st.st_mode):
        data = read_bytes(ctx.sandbox, sp, MAX_EDIT_BYTES) if read else None
        return Tree(sp, False, [(sp, data, stat.S_IMODE(st.st_mode))], [], st.st_size)
    if not stat.S_ISDIR(st.st_mode):
        raise _not_regular(sp)
    if not recursive:
        raise errors.bad_args(
            f"{sp.display} is a directory; set recursive to true to act on it and everything "
            "inside it",
            recovery=[
                "Set recursive: true if the whole directory is meant",
                "Or name the files inside it one by one",
            ],
            path=sp.display,
        )
    if sp.rel == ".":
        raise errors.bad_args(
            "The project root itself cannot be moved, copied or deleted",
            recovery=["Name a file or directory inside the project"],
        )
    files: list[tuple[SafePath, bytes | None, int]] = []
    dirs: list[SafePath] = []
    total = 0
    for top, dirnames, filenames in os.walk(sp.canonical, followlinks=False):
        dirnames.sort()
        rel_top = os.path.relpath(top, ctx.sandbox.project_root)
        for name in dirnames:
            child = ctx.sandbox.resolve(os.path.join(rel_top, name), for_write=True)
            if stat.S_ISLNK(_lstat(child, os.path.join(top, name)).st_mode):
                raise _link_inside(sp, os.path.join(rel_top, name))
            dirs.append(child)
        for name in sorted(filenames):
            ctx.check_cancelled()
            path = os.path.join(top, name)
            child_st = os.lstat(path)
            shown = os.path.join(rel_top, name)
            if stat.S_ISLNK(child_st.st_mode):
                raise _link_inside(sp, shown)
            child = ctx.sandbox.resolve(shown, for_write=True)
            if not stat.S_ISREG(child_st.st_mode):
                raise _not_regular(child)
            if len(files) >= MAX_TREE_FILES:
                raise errors.bad_args(
                    f"{sp.display} holds more than {MAX_TREE_FILES} files; forj changes "
                    "smaller trees only",
                    recovery=["Work on its subdirectories one at a time, or ask the user"],
                    path=sp.display,
                )
            total += child_st.st_size
            data = None
            if read and total <= MAX_TREE_BYTES:
                data = read_bytes(ctx.sandbox, child, MAX_EDIT_BYTES)
            files.append((child, data, stat.S_IMODE(child_st.st_mode)))
    return Tree(sp, True, files, dirs, total)


def _lstat(sp: SafePath, path: str | None = None) -> os.stat_result:
    try:
        return os.lstat(path or sp.canonical)
    except OSError as exc:
        raise os_failure(sp, exc) from None


def _not_regular(sp: SafePath) -> ToolFailure:
    return errors.file_error(
        f"{sp.display} is not a regular file or directory (a device, socket or pipe)",
        sp.display,
        recovery=["Leave it alone; ask the user if it must go"],
    )


def _link_inside(sp: SafePath, shown: str) -> ToolFailure:
    return errors.file_error(
        f"{sp.display} holds a symbolic link ({shown}); forj does not move, copy or delete "
        "trees with links in them, so no link is ever followed or lost",
        sp.display,
        recovery=[
            "Act on the regular files and directories one by one",
            "Ask the user to handle the links",
        ],
        link=shown,
    )


def given_is_link(ctx: ToolContext, path: str) -> bool:
    """Whether the name the model gave is itself a symbolic link (its last component)."""
    joined = os.path.join(ctx.working_dir, path)
    try:
        return stat.S_ISLNK(os.lstat(joined).st_mode)
    except OSError:
        return False


def refuse_link(path: str, verb: str) -> ToolFailure:
    return errors.bad_args(
        f"{path} is a symbolic link; forj does not {verb} links (it would act on the file "
        "the link points to)",
        recovery=["Name the file the link points to, or ask the user to handle the link"],
        path=path,
    )


# --- applying ------------------------------------------------------------------------


def run(ctx: ToolContext, steps: list[Step]) -> list[Done]:
    """Apply ``steps`` in order, all or nothing; journal each as it lands."""
    done: list[Done] = []
    try:
        for step in steps:
            ctx.check_cancelled()
            done.append(_apply(ctx, step))
    except ToolFailure as failure:
        restored, lost = _roll_back(ctx, done)
        failure.error.message += (
            f"; the {len(restored)} file(s) already changed were put back, nothing was changed"
            if not lost
            else f"; could not put back {', '.join(lost)} (their backups are in the journal)"
        )
        failure.error.details["restored"] = restored
        raise
    except BaseException:
        _roll_back(ctx, done)
        raise
    return done


def _apply(ctx: ToolContext, step: Step) -> Done:
    sp = step.sp
    backup = None
    if step.old is not None and step.backup and ctx.backups is not None:
        backup = ctx.backups.save(sp, step.old)
    if step.new is None:
        unlink(ctx, sp)
        with ctx.session.lock:
            ctx.session.file_reads.pop(sp.canonical, None)
    else:
        if step.old is None:
            ensure_parents(ctx.sandbox, sp)
        atomic_write(ctx.sandbox, sp, step.new, cancel=ctx.cancel)
        if step.mode is not None:
            set_mode(ctx, sp, step.mode)
        ctx.session.record_read(sp.canonical, sha256(step.new))
    if ctx.changes is not None:
        ctx.changes.wrote(
            FileChange(
                path=sp.display,
                canonical=sp.canonical,
                existed=step.old is not None or not step.backup,
                backup=backup,
                hash_before=None if step.old is None else sha256(step.old),
                hash_after=None if step.new is None else sha256(step.new),
            )
        )
    return Done(step, backup)


def _roll_back(ctx: ToolContext, done: list[Done]) -> tuple[list[str], list[str]]:
    restored, lost = [], []
    for item in reversed(done):
        step = item.step
        sp = dataclasses.replace(step.sp, ident=None)
        if step.old is None and step.new is None:
            lost.append(sp.display)  # deleted without a backup: nothing to put back
            continue
        try:
            if step.old is None:
                unlink(ctx, sp)
            else:
                ensure_parents(ctx.sandbox, sp)
                atomic_write(ctx.sandbox, sp, step.old)
                ctx.session.record_read(sp.canonical, sha256(step.old))
            if ctx.changes is not None:
                ctx.changes.put_back(sp.canonical)
            restored.append(sp.display)
        except (ToolFailure, OSError):
            lost.append(sp.display)
    return restored, lost


def unlink(ctx: ToolContext, sp: SafePath) -> None:
    """Remove the file ``sp``, reached by descriptor; it must still be the file validated."""
    with ctx.sandbox.open_parent(sp) as (dir_fd, name):
        if name is None:
            raise errors.bad_args("The project root cannot be deleted")
        try:
            st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
            if sp.ident is not None and (st.st_dev, st.st_ino) != sp.ident:
                raise errors.file_error(
                    f"{sp.display} was replaced while the call ran; it was not deleted",
                    sp.display,
                    recovery=["Look at the file again, then repeat the call"],
                )
            if stat.S_ISDIR(st.st_mode):
                raise errors.file_error(
                    f"{sp.display} became a directory while the call ran; nothing was deleted",
                    sp.display,
                    recovery=["Look at the path again, then repeat the call"],
                )
            os.unlink(name, dir_fd=dir_fd)
        except OSError as exc:
            raise os_failure(sp, exc) from None


def set_mode(ctx: ToolContext, sp: SafePath, mode: int) -> None:
    """Give the file just written ``mode``'s permission bits (no set-id bits)."""
    fd = ctx.sandbox.open(dataclasses.replace(sp, ident=None), os.O_RDONLY)
    try:
        os.fchmod(fd, mode & 0o777)
    except OSError as exc:
        raise os_failure(sp, exc) from None
    finally:
        os.close(fd)


def make_dirs(ctx: ToolContext, dirs: list[SafePath]) -> None:
    """Create directories (parents first), by descriptor."""
    for sp in dirs:
        if os.path.isdir(sp.canonical):
            continue
        ensure_parents(ctx.sandbox, sp)
        with ctx.sandbox.open_parent(sp) as (dir_fd, name):
            assert name is not None
            try:
                os.mkdir(name, 0o777, dir_fd=dir_fd)
            except FileExistsError:
                pass
            except OSError as exc:
                raise os_failure(sp, exc) from None


def remove_empty_dirs(ctx: ToolContext, dirs: list[SafePath]) -> list[str]:
    """Remove the directories left empty (deepest first); return those that stay."""
    kept = []
    for sp in sorted(dirs, key=lambda d: d.rel.count("/"), reverse=True):
        try:
            with ctx.sandbox.open_parent(dataclasses.replace(sp, ident=None)) as (dir_fd, name):
                assert name is not None
                os.rmdir(name, dir_fd=dir_fd)
        except (OSError, ToolFailure):
            kept.append(sp.display)
    return kept


# --- reviews ---------------------------------------------------------------------------

# A removed or copied file's lines are shown up to this size; larger ones by size alone.
SHOW_BYTES = 32 << 10
# Files listed one by one in a review; the rest are counted (the fingerprint covers all).
SHOW_FILES = 100


def text_of(data: bytes | None) -> str | None:
    if data is None or len(data) > SHOW_BYTES or b"\0" in data:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def size_note(data: bytes | None, mode: int | None = None) -> str:
    if data is None:
        return "content not read"
    kind = "binary" if b"\0" in data[:8192] else "text"
    bits = f", mode {mode & 0o777:o}" if mode is not None else ""
    return f"{len(data)} bytes, {kind}{bits}, sha256 {sha256(data)[:16]}"


def wire_done(done: list[Done]) -> list[dict[str, Any]]:
    return [
        {
            "path": d.step.sp.display,
            "action": "deleted"
            if d.step.new is None
            else ("created" if d.step.old is None else "replaced"),
            "backup_path": d.backup,
        }
        for d in done
    ]
