"""``todo_write``: the lightweight list a model keeps while it works."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from .. import errors
from ..protocol import RiskLevel
from ..store.tasks import Items
from . import _plans
from ._plans import Location
from .registry import Tool, ToolContext

TodoAction = Literal["create", "update", "complete", "reopen", "delete", "list", "export"]
TodoStatus = Literal["open", "completed"]

DEFAULT_EXPORT = "docs/TODO.md"
# A todo's keys, in the order it is stored and shown: what it is first, then where
# and when.
KEYS = ("id", "title", "note", "status", "location", "labels", "created_at", "updated_at")

# What each action takes besides "action" (the required ones are checked too).
_ALLOWED: dict[str, set[str]] = {
    "create": {"title", "note", "location", "labels"},
    "update": {"id", "title", "note", "location", "labels"},
    "complete": {"id"},
    "reopen": {"id"},
    "delete": {"id"},
    "list": {"filter"},
    "export": {"export_path"},
}
_REQUIRED: dict[str, tuple[str, ...]] = {
    "create": ("title",),
    "update": ("id",),
    "complete": ("id",),
    "reopen": ("id",),
    "delete": ("id",),
}


class TodoFilter(BaseModel):
    model_config = ConfigDict(extra="forbid")

    status: TodoStatus | None = Field(default=None, description="Only open or only completed")
    label: str | None = Field(default=None, min_length=1, description="Only todos with this label")
    path: str | None = Field(
        default=None, min_length=1, description="Only todos located in this file or directory"
    )


class TodoWriteArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    action: TodoAction = Field(description="What to do")
    title: str | None = Field(
        default=None,
        min_length=1,
        max_length=_plans.MAX_TITLE,
        description="The todo, one line (required for create)",
    )
    note: str | None = Field(
        default=None, max_length=_plans.MAX_TEXT, description="Details; '' removes the note"
    )
    id: str | None = Field(
        default=None,
        min_length=1,
        max_length=64,
        description="The todo's id (required for update, complete, reopen, delete)",
    )
    location: Location | None = Field(
        default=None, description="Where in the code the todo is (an existing file)"
    )
    labels: list[str] | None = Field(
        default=None,
        max_length=_plans.MAX_LABELS,
        description="Labels; on update they replace the old ones ([] removes them)",
    )
    filter: TodoFilter | None = Field(default=None, description="For list: which todos")
    export_path: str | None = Field(
        default=None,
        min_length=1,
        description=f"For export: the Markdown file to write (default {DEFAULT_EXPORT})",
    )

    _clean = field_validator("title", "note", "labels")(_plans.clean)

    @model_validator(mode="after")
    def _per_action(self) -> TodoWriteArgs:
        given = self.model_dump()
        _plans.refuse_extra(self.action, given, _ALLOWED[self.action])
        _plans.need(self.action, given, *_REQUIRED.get(self.action, ()))
        if self.action == "update" and all(
            given[name] is None for name in ("title", "note", "location", "labels")
        ):
            raise ValueError("action 'update' needs at least one of title, note, location, labels")
        if self.title is not None and not self.title.strip():
            raise ValueError("title is blank")
        for label in self.labels or []:
            if len(label) > _plans.MAX_LABEL:
                raise ValueError(f"label {label[:20]!r}… is longer than {_plans.MAX_LABEL}")
        return self


class TodoWrite(Tool[TodoWriteArgs]):
    name = "todo_write"
    description = (
        "Keep a visible todo list while you work; the user may change it too, so 'list' "
        "before relying on it. Actions: create (title, note?, location?, labels?), update "
        "(id + any of title, note, location, labels), complete, reopen, delete (id), list "
        "(filter?: status, label, path), export (export_path?, default docs/TODO.md; the "
        "user reviews the file). A location must name an existing project file and line."
    )
    Args = TodoWriteArgs
    side_effecting = True  # export writes a file; nothing else does (see mutates)
    timeout_kind = "file"

    def mutates(self, args: TodoWriteArgs) -> bool:
        return args.action == "export"

    def risk(self, args: TodoWriteArgs) -> RiskLevel:
        return RiskLevel.MEDIUM if args.action == "export" else RiskLevel.LOW

    def summary(self, args: TodoWriteArgs) -> str:
        a = args.action
        if a == "create":
            return f"Add todo: {_plans.md_inline(args.title or '')}"
        if a == "export":
            return f"Export the todo list to {args.export_path or DEFAULT_EXPORT}"
        if a == "list":
            return "List todos" + (f" ({_describe(args.filter)})" if args.filter else "")
        return f"{a.capitalize()} todo {args.id}"

    def paths(self, args: TodoWriteArgs) -> list[str]:
        if args.action == "export":
            return [args.export_path or DEFAULT_EXPORT]
        if args.location is not None:
            return [args.location.path]
        return []

    def review_notes(self, args: TodoWriteArgs, ctx: ToolContext) -> list[str]:
        # An export is reviewed whatever the approval policy says.
        if args.action != "export":
            return []
        count = _plans.read(ctx, "todo", lambda items: items.count())
        return _plans.export_notes(count, "todo", args.export_path or DEFAULT_EXPORT)

    def preview(self, args: TodoWriteArgs, ctx: ToolContext) -> str | None:
        if args.action != "export":
            return None
        todos = _plans.read(ctx, "todo", lambda items: items.all())
        return _plans.export_preview(ctx, args.export_path or DEFAULT_EXPORT, render(todos))

    def execute(self, args: TodoWriteArgs, ctx: ToolContext) -> Any:
        a = args.action
        if a == "list":
            todos, revision = _plans.read(
                ctx, "todo", lambda items: (items.all(), items.revision())
            )
            return {**_list_result(todos, args.filter), "revision": revision}
        if a == "export":
            todos = _plans.read(ctx, "todo", lambda items: items.all())
            path = args.export_path or DEFAULT_EXPORT
            return _plans.export(ctx, path, render(todos), len(todos))
        # The location is checked before the transaction: it reads a file.
        location = None
        if args.location is not None:
            loc = args.location
            location = _plans.place(ctx, loc.path, loc.line, loc.end_line)
        if a == "delete":
            return _plans.change(ctx, "todo", lambda items: _delete(items, args))
        return _plans.change(
            ctx,
            "todo",
            # The revision is read after the change: the dict is built in order.
            lambda items: {"task": _apply(items, args, location), "revision": items.revision()},
        )


def _lookup(items: Items, item_id: str) -> dict[str, Any]:
    return _plans.lookup(items, "todo", item_id.strip(), "todo_write")


def _apply(items: Items, args: TodoWriteArgs, location: dict[str, Any] | None) -> dict[str, Any]:
    stamp = _plans.now()
    if args.action == "create":
        if items.count() >= _plans.MAX_ITEMS:
            raise _plans.too_many("todo", "todo_write")
        todo: dict[str, Any] = {
            "id": items.new_id("todo-"),
            "title": " ".join((args.title or "").split()),
            "status": "open",
            "created_at": stamp,
            "updated_at": stamp,
        }
        if args.note:
            todo["note"] = args.note
        if location is not None:
            todo["location"] = location
        if args.labels:
            todo["labels"] = _plans.clean_labels(args.labels)
        todo = _plans.ordered(todo, KEYS)
        items.put(todo)
        return todo
    assert args.id is not None
    todo = _lookup(items, args.id)
    if args.action == "update":
        if args.title is not None:
            todo["title"] = " ".join(args.title.split())
        if args.note is not None:
            if args.note:
                todo["note"] = args.note
            else:
                todo.pop("note", None)
        if location is not None:
            todo["location"] = location
        if args.labels is not None:
            labels = _plans.clean_labels(args.labels)
            if labels:
                todo["labels"] = labels
            else:
                todo.pop("labels", None)
    else:
        want = "completed" if args.action == "complete" else "open"
        if todo["status"] == want:
            raise errors.bad_args(
                f"Todo {todo['id']} is already {want}",
                recovery=[
                    "Call todo_write with action 'list' to see the current state; the user "
                    "may have changed it in the Tasks panel",
                ],
                id=todo["id"],
                status=todo["status"],
            )
        todo["status"] = want
    todo["updated_at"] = stamp
    todo = _plans.ordered(todo, KEYS)
    items.put(todo)
    return todo


def _delete(items: Items, args: TodoWriteArgs) -> dict[str, Any]:
    assert args.id is not None
    todo = _lookup(items, args.id)
    items.delete(todo["id"])
    return {"deleted": True, "id": todo["id"], "revision": items.revision()}


def _list_result(todos: list[dict[str, Any]], flt: TodoFilter | None) -> dict[str, Any]:
    shown = []
    for todo in todos:
        if flt is not None:
            if flt.status is not None and todo["status"] != flt.status:
                continue
            if flt.label is not None and flt.label.strip() not in todo.get("labels", []):
                continue
            if flt.path is not None and not (
                "location" in todo and _plans.under(todo["location"]["path"], flt.path)
            ):
                continue
        # Only what a model needs to pick the next step: the notes and dates
        # would spend its context on every listing.
        entry = {k: todo[k] for k in ("id", "title", "status", "location", "labels") if k in todo}
        shown.append(entry)
    result: dict[str, Any] = {"tasks": shown}
    if flt is not None:
        result["filter"] = flt.model_dump(exclude_none=True)
        result["total"] = len(todos)
    return result


def _describe(flt: TodoFilter) -> str:
    return ", ".join(f"{k}={v}" for k, v in flt.model_dump(exclude_none=True).items())


def render(todos: list[dict[str, Any]]) -> str:
    """The todo list as Markdown: open items first, then completed ones."""
    lines = ["# TODO", ""]
    if not todos:
        lines.append("Nothing to do.")
    for status, heading in (("open", "Open"), ("completed", "Completed")):
        group = [t for t in todos if t["status"] == status]
        if not group:
            continue
        lines += [f"## {heading} ({len(group)})", ""]
        for todo in group:
            box = "x" if status == "completed" else " "
            extra = []
            if "location" in todo:
                extra.append(_plans.md_place(todo["location"]))
            if todo.get("labels"):
                extra.append("labels: " + ", ".join(todo["labels"]))
            tail = (" — " + " · ".join(extra)) if extra else ""
            lines.append(f"- [{box}] {_plans.md_inline(todo['title'])} ({todo['id']}){tail}")
            if todo.get("note"):
                lines += _plans.md_block(todo["note"], "  ")
        lines.append("")
    return "\n".join(lines).rstrip("\n") + "\n"
