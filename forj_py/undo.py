"""Undo and rewind: put files back as they were before forj's own writes.

The journal holds, for every file a batch changed, the backup of its old
content (or the fact that it did not exist) and the hash of what forj
wrote.  Undoing a set of batches works per file: the file goes back to
what it held before the *first* of their changes to it, provided it still
holds what the *last* of them wrote.  A file changed since by anyone else
is refused unless the caller forces it by name; a file with no usable
backup is refused outright.  One refusal refuses the whole undo: nothing
is half put back.

An undo is a batch of its own (kind ``undo``) whose writes are journaled
like any other, with backups of what it overwrote, so an undo can itself
be undone.  Every write goes through the sandbox and is atomic; a failure
part way puts back the files already changed.

Rewinding to before a turn undoes, per file, every change forj made from
that turn's first batch on (undone or not: the journal's order is the
truth), which is the same rule applied to a longer list.

Only changes made by forj's file tools are covered: commands have no
backups.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import threading
import uuid
from dataclasses import dataclass, field
from typing import Any

from . import errors
from .errors import ProtocolError, ToolFailure
from .output import visible_controls
from .reads import Conversations
from .safety.files import atomic_write, ensure_parents, read_bytes, sha256
from .safety.paths import SafePath, Sandbox
from .store.backups import Backups
from .store.journal import FileChange, Journal
from .tools._edit import MAX_EDIT_BYTES, unified_diff

# The diff of one file in a dry run; larger ones are summarized.
MAX_DIFF_BYTES = 1 << 20


@dataclass
class FilePlan:
    """What undo will do to one file, and whether it may."""

    path: str
    canonical: str
    action: str  # restore | delete | recreate | none
    status: str  # ok | changed | no-backup | refused
    target: bytes | None  # the content to put back; None: the file must go
    current: bytes | None  # what it holds now; None: absent
    sp: SafePath | None = None
    reason: str = ""
    forced: bool = False

    def wire(self, with_diff: bool) -> dict[str, Any]:
        out: dict[str, Any] = {"path": self.path, "action": self.action, "status": self.status}
        if self.reason:
            out["reason"] = self.reason
        if self.forced:
            out["forced"] = True
        if with_diff and self.action != "none":
            out["diff"] = _diff(self.path, self.current, self.target)
        return out


@dataclass
class Undo:
    """Plans and applies undos for one project; one at a time."""

    sandbox: Sandbox
    journal: Journal
    backups: Backups
    records: Conversations
    root: str
    worker: str
    lock: threading.Lock = field(default_factory=threading.Lock)

    # --- choosing the batches ------------------------------------------------------

    def select_batch(self, batch_id: str) -> list[str]:
        meta = self.journal.batch_meta(batch_id)
        if meta is None or meta["root"] != self.root:
            raise ProtocolError(
                "unknown-batch",
                f"no batch {batch_id!r} in this project's journal",
                ["List the checkpoints and use one of their batch ids"],
            )
        if meta["undone_by"]:
            raise ProtocolError(
                "bad-request",
                f"batch {batch_id} was already undone (by {meta['undone_by']})",
                [f"To bring its changes back, undo {meta['undone_by']}"],
            )
        if not self.journal.file_changes([batch_id]):
            raise ProtocolError(
                "bad-request",
                f"batch {batch_id} changed no files with forj's file tools; nothing to undo",
                ["Changes made by commands have no backups; undo them by hand or with git"],
            )
        return [batch_id]

    def select_turn(self, turn: str) -> list[str]:
        batches = [
            b["batch_id"]
            for b in self.journal.changing_batches(self.root, turn=turn)
            if not b["undone_by"]
        ]
        if not batches:
            raise ProtocolError(
                "bad-request",
                f"turn {turn!r} has no file changes left to undo in this project",
                ["List the checkpoints to see which turns changed files"],
            )
        return batches

    def select_rewind(self, turn: str) -> list[str]:
        """Every changing batch from the turn's first on, undone or not."""
        since = self.journal.first_of_turn(self.root, turn)
        if since is None:
            raise ProtocolError(
                "bad-request",
                f"no turn {turn!r} in this project's journal",
                ["Use a turn id that plan or execute requests carried"],
            )
        batches = self.journal.changing_batches(self.root, since=since)
        if not batches:
            raise ProtocolError(
                "bad-request",
                f"nothing changed files from turn {turn!r} on; nothing to rewind",
                ["Changes made by commands have no backups; undo them by hand or with git"],
            )
        return [b["batch_id"] for b in batches]

    # --- planning ------------------------------------------------------------------

    def plan(self, batch_ids: list[str], force: list[str]) -> list[FilePlan]:
        """Per file, in the order the batches first changed them."""
        first: dict[str, FileChange] = {}
        last: dict[str, FileChange] = {}
        for change in self.journal.file_changes(batch_ids):
            first.setdefault(change.canonical, change)
            last[change.canonical] = change
        forced = set(force)
        plans = [self._plan_file(first[c], last[c], forced) for c in first]
        unknown = forced - {p.path for p in plans}
        if unknown:
            raise ProtocolError(
                "bad-request",
                f"force names files this undo does not touch: {', '.join(sorted(unknown))}",
                ["Name files exactly as the dry run's 'path' shows them"],
            )
        return plans

    def _plan_file(self, first: FileChange, last: FileChange, forced: set[str]) -> FilePlan:
        plan = FilePlan(first.path, first.canonical, "none", "ok", None, None)
        if first.existed:
            plan.target = self._backup_content(first, plan)
        try:
            sp = self.sandbox.resolve(first.path, for_write=True)
            if sp.canonical != first.canonical:
                raise _refused(f"{first.path} now leads to {sp.display}, not the file forj wrote")
            plan.sp = sp
            plan.current = read_bytes(self.sandbox, sp, MAX_EDIT_BYTES) if sp.exists else None
        except ToolFailure as failure:
            plan.status, plan.reason = "refused", failure.error.message
            return plan
        if plan.status != "ok":
            # No usable backup: say what undo would have had to do.
            plan.action = "restore" if plan.current is not None else "recreate"
            return plan
        if plan.current == plan.target:
            return plan  # already as it was: nothing to do, nothing to refuse
        plan.action = (
            "delete" if plan.target is None else "recreate" if plan.current is None else "restore"
        )
        now = None if plan.current is None else sha256(plan.current)
        if now != last.hash_after:
            if first.path in forced:
                plan.forced = True
            else:
                plan.status = "changed"
                plan.reason = (
                    f"{first.path} was "
                    + ("deleted" if now is None else "changed")
                    + " after forj wrote it; undo would lose that change"
                )
        return plan

    def _backup_content(self, change: FileChange, plan: FilePlan) -> bytes | None:
        if change.backup is None:
            plan.status = "no-backup"
            plan.reason = f"no backup of {change.path} was kept (the write asked for none)"
            return None
        try:
            with open(change.backup, "rb") as fh:
                data = fh.read()
        except OSError as exc:
            plan.status = "no-backup"
            plan.reason = (
                f"the backup of {change.path} is gone ({exc.strerror}); backups are pruned "
                "by age and size"
            )
            return None
        if change.hash_before is not None and sha256(data) != change.hash_before:
            plan.status = "no-backup"
            plan.reason = f"the backup of {change.path} no longer matches what forj replaced"
            return None
        return data

    # --- applying ------------------------------------------------------------------

    def run(self, batch_ids: list[str], force: list[str], dry_run: bool) -> dict[str, Any]:
        """Undo ``batch_ids``' changes, or with ``dry_run`` show what that would do."""
        with self.lock:
            plans = self.plan(batch_ids, force)
            blocked = [p for p in plans if p.status != "ok"]
            reply: dict[str, Any] = {"dry_run": dry_run, "batches": batch_ids}
            if dry_run or blocked:
                reply["files"] = [p.wire(with_diff=True) for p in plans]
                reply["applied"] = False
                if blocked:
                    reply["refused"] = [p.path for p in blocked]
                    reply["message"] = (
                        "Nothing was changed: "
                        + "; ".join(p.reason for p in blocked)
                        + ". Files changed since forj wrote them can be named in 'force'; "
                        "files without a backup cannot be put back."
                    )
                return reply
            undo_id = uuid.uuid4().hex
            self.journal.record_batch(
                undo_id, self.root, "enabled", [], worker=self.worker, kind="undo"
            )
            done = self._apply(undo_id, [p for p in plans if p.action != "none"])
            self.journal.record_undo(undo_id, batch_ids)
            self.journal.record_state(undo_id, "done")
            self.journal.record_delivered(undo_id)
            reply.update(applied=True, undo_batch=undo_id, files=done)
            return reply

    def _apply(self, undo_id: str, plans: list[FilePlan]) -> list[dict[str, Any]]:
        applied: list[tuple[FilePlan, int]] = []
        out = []
        try:
            for plan in plans:
                row, backup = self._apply_one(undo_id, plan)
                applied.append((plan, row))
                out.append({"path": plan.path, "action": plan.action, "backup_path": backup})
        except (ToolFailure, OSError) as exc:
            lost = self._roll_back(applied)
            message = exc.error.message if isinstance(exc, ToolFailure) else str(exc)
            raise ProtocolError(
                "undo-failed",
                f"undo stopped: {message}; "
                + (
                    f"the {len(applied)} file(s) already put back were restored as they were"
                    if not lost
                    else f"could not restore {', '.join(lost)} (its backup is in the journal)"
                ),
                ["Fix the cause (permissions, disk space) and undo again"],
            ) from None
        return out

    def _apply_one(self, undo_id: str, plan: FilePlan) -> tuple[int, str | None]:
        sp = plan.sp
        assert sp is not None
        backup = None
        if plan.current is not None:
            backup = self.backups.save(sp, plan.current)
        if plan.target is None:
            _unlink(self.sandbox, sp)
            _prune_empty_parents(self.sandbox.project_root, plan.path)
        else:
            if plan.current is None:
                ensure_parents(self.sandbox, sp)
            atomic_write(self.sandbox, dataclasses.replace(sp, ident=None), plan.target)
        # What any chat read of this file is no longer what it holds.
        self.records.drop_read(plan.canonical)
        row = self.journal.record_file_change(
            undo_id,
            -1,
            "undo",
            FileChange(
                path=plan.path,
                canonical=plan.canonical,
                existed=plan.current is not None,
                backup=backup,
                hash_before=None if plan.current is None else sha256(plan.current),
                hash_after=None if plan.target is None else sha256(plan.target),
            ),
        )
        return row, backup

    def _roll_back(self, applied: list[tuple[FilePlan, int]]) -> list[str]:
        lost = []
        for plan, row in reversed(applied):
            assert plan.sp is not None
            sp = dataclasses.replace(plan.sp, ident=None)
            try:
                if plan.current is None:
                    _unlink(self.sandbox, sp)
                else:
                    ensure_parents(self.sandbox, sp)
                    atomic_write(self.sandbox, sp, plan.current)
                self.journal.forget_file_change(row)
            except (ToolFailure, OSError):
                lost.append(plan.path)
        return lost


def _refused(message: str) -> ToolFailure:
    return errors.file_error(message, "", recovery=["Look at the file and decide by hand"])


def _unlink(sandbox: Sandbox, sp: SafePath) -> None:
    """Delete ``sp``, reached by descriptor without following links."""
    with sandbox.open_parent(sp) as (dir_fd, name):
        assert name is not None
        with contextlib.suppress(FileNotFoundError):
            os.unlink(name, dir_fd=dir_fd)


def _prune_empty_parents(root: str, path: str) -> None:
    """Remove the directories above ``path`` its removal left empty, up to ``root``.

    The file did not exist before the changes undone (it is deleted, not
    restored), so a directory that held nothing else was made for it:
    undoing the change takes it away too.  A directory that still holds
    anything, or is a link, stays.
    """
    parent = os.path.dirname(path)
    while parent and parent not in (".", os.sep):
        full = os.path.join(root, parent)
        if os.path.islink(full):
            return
        try:
            os.rmdir(full)  # only ever succeeds on an empty directory
        except OSError:
            return
        parent = os.path.dirname(parent)


def _diff(display: str, old: bytes | None, new: bytes | None) -> str:
    """The change undo makes to one file, as a unified diff (controls shown)."""
    try:
        old_text = "" if old is None else old.decode("utf-8")
        new_text = "" if new is None else new.decode("utf-8")
    except UnicodeDecodeError:
        return (
            f"Binary files a/{display} and b/{display} differ "
            f"({0 if old is None else len(old)} -> {0 if new is None else len(new)} bytes)\n"
        )
    diff = unified_diff(display, old_text, new_text, existed=old is not None)
    if new is None:
        diff = diff.replace(f"+++ b/{display}\n", "+++ /dev/null\n", 1)
    if len(diff.encode("utf-8")) > MAX_DIFF_BYTES:
        return f"(the diff of {display} is {len(diff)} characters; too large to show)\n"
    return visible_controls(diff)
