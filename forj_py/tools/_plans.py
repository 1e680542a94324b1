"""What ``todo_write`` and ``task`` share: the store, ids, locations, labels, export.

Neither tool writes a project file except on ``export``, which goes through
the writing tools' path: the rendered Markdown is shown for review as a
diff against the file as it is, the user may edit it before approving, and
what runs is checked against what was reviewed.  Export needs no earlier
read of the target: the review records the file's hash instead, and the
write is refused if the file (or the plan) changed after the review.
"""

from __future__ import annotations

import os
import re
import time
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from .. import errors
from ..errors import ToolFailure
from ..output import redact, sanitize, visible_controls
from ..protocol import ErrorKind, ErrorType
from ..safety.files import read_bytes, sha256
from ..store.journal import default_state_dir
from ..store.tasks import Items, Kind, TaskStore, TaskStoreError, store_at
from . import _edit
from .registry import ToolContext

# Bounds that keep one project's plan small enough to list in one result.
MAX_ITEMS = 500
MAX_TITLE = 300
MAX_TEXT = 8000
MAX_LABELS = 20
MAX_LABEL = 60
MAX_LINKS = 20
# Lines are counted to check a location only in files up to this size.
MAX_COUNTED_BYTES = 16 << 20

Label = str


class Location(BaseModel):
    """A place in a project file."""

    model_config = ConfigDict(extra="forbid")

    path: str = Field(min_length=1, description="File path relative to the project root")
    line: int = Field(ge=1, description="1-based line")
    end_line: int | None = Field(default=None, ge=1, description="Last line of a range")

    @model_validator(mode="after")
    def _ordered(self) -> Location:
        if self.end_line is not None and self.end_line < self.line:
            raise ValueError(f"end_line {self.end_line} is before line {self.line}")
        return self


class Link(BaseModel):
    """A file (optionally a line or range) a task relates to."""

    model_config = ConfigDict(extra="forbid")

    path: str = Field(min_length=1, description="File path relative to the project root")
    line: int | None = Field(default=None, ge=1, description="1-based line")
    end_line: int | None = Field(default=None, ge=1, description="Last line of a range")

    @model_validator(mode="after")
    def _ordered(self) -> Link:
        if self.end_line is not None and self.line is None:
            raise ValueError("end_line needs line")
        if self.end_line is not None and self.line is not None and self.end_line < self.line:
            raise ValueError(f"end_line {self.end_line} is before line {self.line}")
        return self


def ordered(item: dict[str, Any], keys: tuple[str, ...]) -> dict[str, Any]:
    """``item`` with its keys in the order of the seed's shape (stable output)."""
    first = {k: item[k] for k in keys if k in item}
    return {**first, **{k: v for k, v in item.items() if k not in first}}


def now() -> int:
    return int(time.time())


def store(ctx: ToolContext) -> TaskStore:
    # The worker's own state directory (``--state-dir``), else the default.
    try:
        return store_at(ctx.state_dir or default_state_dir())
    except TaskStoreError as exc:
        raise _unavailable(exc) from None


def _unavailable(exc: TaskStoreError) -> ToolFailure:
    return ToolFailure(
        ErrorType.INTERNAL,
        f"The plan could not be read or saved: {exc}; nothing was changed",
        kind=ErrorKind.EXECUTION_FAILED,
        recovery=[
            "Tell the user the task store in forj's state directory is unavailable",
            "Do not retry until the user says it is fixed",
        ],
    )


def change(ctx: ToolContext, kind: Kind, fn: Any) -> Any:
    try:
        return store(ctx).change(kind, ctx.sandbox.project_root, fn)
    except TaskStoreError as exc:
        raise _unavailable(exc) from None


def read(ctx: ToolContext, kind: Kind, fn: Any) -> Any:
    try:
        return store(ctx).read(kind, ctx.sandbox.project_root, fn)
    except TaskStoreError as exc:
        raise _unavailable(exc) from None


# --- arguments ---------------------------------------------------------------------


def clean(value: Any) -> Any:
    """Text as the plan keeps it: without terminal controls or bidi overrides.

    Results lose them anyway (every result is sanitized); removing them on
    the way in keeps the store, the results, the panel and an export alike.
    """
    if isinstance(value, str):
        return sanitize(value)
    if isinstance(value, list):
        return [clean(v) for v in value]
    return value


def refuse_extra(action: str, given: dict[str, Any], allowed: set[str]) -> None:
    """Arguments that mean nothing for ``action`` are a mistake worth naming."""
    extra = sorted(name for name, value in given.items() if value is not None and name != "action")
    extra = [name for name in extra if name not in allowed]
    if extra:
        takes = ", ".join(sorted(allowed)) or "nothing else"
        raise ValueError(f"action {action!r} does not take {', '.join(extra)}; it takes {takes}")


def need(action: str, given: dict[str, Any], *names: str) -> None:
    missing = [name for name in names if given.get(name) is None]
    if missing:
        raise ValueError(f"action {action!r} needs {' and '.join(missing)}")


def clean_labels(labels: list[str]) -> list[str]:
    """Labels trimmed, without blanks or repeats, in the order given."""
    out: list[str] = []
    for label in labels:
        label = " ".join(label.split())
        if label and label not in out:
            out.append(label)
    return out


def unknown_id(what: str, item_id: str, existing: list[str], tool: str) -> ToolFailure:
    shown = ", ".join(existing[:50]) + (" …" if len(existing) > 50 else "")
    return errors.bad_args(
        f"No {what} with id {item_id!r}",
        recovery=[
            f"Existing ids: {shown}" if existing else f"There are no {what}s yet; create one first",
            f"Call {tool} with action 'list' to see the current {what}s",
        ],
        id=item_id,
        existing_ids=existing[:200],
    )


def too_many(what: str, tool: str) -> ToolFailure:
    return errors.bad_args(
        f"The project already has {MAX_ITEMS} {what}s, the most forj keeps",
        recovery=[f"Delete {what}s that are done (action 'delete'), then create this one"],
        limit=MAX_ITEMS,
    )


def lookup(items: Items, what: str, item_id: str, tool: str) -> dict[str, Any]:
    item = items.get(item_id)
    if item is None:
        raise unknown_id(what, item_id, items.ids(), tool)
    return item


# --- locations ---------------------------------------------------------------------


def check_place(ctx: ToolContext, path: str, line: int | None, end_line: int | None) -> str:
    """The display path of an existing project file where ``line`` exists.

    A location the user could not navigate to is refused when it is given,
    not discovered later from the Tasks panel.
    """
    sp = ctx.sandbox.resolve(path, ctx.working_dir)
    if not sp.exists:
        raise errors.bad_args(
            f"{sp.display} does not exist; a location must name an existing file",
            recovery=["Check the path with list_files or glob", "Leave the location out"],
            path=sp.display,
        )
    if not os.path.isfile(sp.canonical):
        raise errors.bad_args(
            f"{sp.display} is not a regular file; a location must name a file",
            recovery=["Name a file inside that directory, or leave the location out"],
            path=sp.display,
        )
    last = end_line or line
    if last is not None and os.path.getsize(sp.canonical) <= MAX_COUNTED_BYTES:
        data = read_bytes(ctx.sandbox, sp, MAX_COUNTED_BYTES)
        lines = data.count(b"\n") + (1 if data and not data.endswith(b"\n") else 0)
        if last > max(lines, 1):
            raise errors.bad_args(
                f"{sp.display} has {lines} line(s); line {last} does not exist",
                recovery=[f"Use a line between 1 and {max(lines, 1)}", "Read the file first"],
                path=sp.display,
                total_lines=lines,
            )
    return sp.display


def place(ctx: ToolContext, path: str, line: int | None, end_line: int | None) -> dict[str, Any]:
    out: dict[str, Any] = {"path": check_place(ctx, path, line, end_line)}
    if line is not None:
        out["line"] = line
    if end_line is not None:
        out["end_line"] = end_line
    return out


def under(path: str, wanted: str) -> bool:
    """Whether ``path`` (a display path) is ``wanted`` or inside it."""
    wanted = os.path.normpath(wanted.strip()).removeprefix("./")
    if wanted in ("", "."):
        return True
    return path == wanted or path.startswith(wanted.rstrip("/") + "/")


# --- export ------------------------------------------------------------------------

_HASH_NOTE = "reviewed against {display} with SHA-256 {digest}"
_HASH_NOTE_RE = re.compile(r"^note: reviewed against .* with SHA-256 ([0-9a-f]{16})$", re.M)


def _export_plan(ctx: ToolContext, path: str, text: str) -> tuple[_edit.Loaded, str, str]:
    # A directory or a special file is refused by the read (a file-error).
    loaded = _edit.load(ctx, path, must_exist=False, enforce_read=False)
    new_text = _edit.with_newlines(redact(text), loaded.newline)
    _edit.validate(ctx, loaded.sp, new_text, loaded.text if loaded.exists else None)
    notes = []
    if loaded.exists:
        assert loaded.data is not None
        notes.append(_HASH_NOTE.format(display=loaded.sp.display, digest=sha256(loaded.data)[:16]))
    preview = _edit.review(loaded.sp.display, loaded.text, new_text, loaded.exists, notes)
    return loaded, new_text, preview


def export_preview(ctx: ToolContext, path: str, text: str) -> str:
    loaded, new_text, preview = _export_plan(ctx, path, text)
    _edit.stage_preview(ctx, loaded, new_text)
    return preview


def export_notes(count: int, what: str, path: str) -> list[str]:
    return [f"Writes {count} {what}(s) to {path} as Markdown; credentials in the text are redacted"]


def export(ctx: ToolContext, path: str, text: str, count: int) -> dict[str, Any]:
    """Write the rendered plan if it is still what the user reviewed."""
    loaded, new_text, preview = _export_plan(ctx, path, text)
    display = loaded.sp.display
    approved = ctx.approved_preview
    if approved is not None and visible_controls(preview) != approved:
        m = _HASH_NOTE_RE.search(approved)
        reviewed = m.group(1) if m else None
        current = sha256(loaded.data)[:16] if loaded.data is not None else None
        if reviewed != current:
            raise ToolFailure(
                ErrorType.STALE_FILE,
                f"{display} changed after the user reviewed the export; nothing was written",
                kind=ErrorKind.STALE_FILE,
                recovery=["Call export again so the user reviews the file as it is now"],
                path=display,
                reason="File changed between review and execution",
            )
        raise ToolFailure(
            ErrorType.STALE_FILE,
            "The plan changed after the user reviewed the export (another chat or the "
            "Tasks panel changed it); nothing was written",
            kind=ErrorKind.STALE_FILE,
            recovery=["Call export again so the user reviews the current plan"],
            path=display,
            reason="Plan changed between review and execution",
        )
    result: dict[str, Any] = {"path": display, "count": count}
    if loaded.exists and loaded.text == new_text:
        result["unchanged"] = True
        return result
    result["backup_path"] = _edit.commit(ctx, loaded, new_text)
    result["created"] = not loaded.exists
    return result


def md_inline(text: str) -> str:
    """One line of Markdown text: no line breaks, no accidental heading or list."""
    return " ".join(text.split())


def md_block(text: str, indent: str) -> list[str]:
    """Free text kept as written, indented under its list item."""
    return [f"{indent}{line}".rstrip() for line in text.strip("\n").split("\n")]


def md_place(p: dict[str, Any]) -> str:
    where = p["path"]
    if "line" in p:
        where += f":{p['line']}"
        if "end_line" in p and p["end_line"] != p["line"]:
            where += f"-{p['end_line']}"
    return f"`{where}`"
