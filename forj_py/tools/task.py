"""``task``: work items with a lifecycle, subtasks and acceptance criteria.

Statuses move along a small graph, checked on every change and recorded in
the task's history::

    open ⇄ in_progress, open → blocked, in_progress → blocked
    blocked → open | in_progress      (unblock before completing)
    open | in_progress → completed
    completed → open                  (reopen; nothing else leaves completed)
"""

from __future__ import annotations

import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from .. import errors
from ..protocol import RiskLevel
from ..store.tasks import Items
from . import _plans
from ._plans import Link
from .registry import Tool, ToolContext

TaskAction = Literal[
    "create",
    "update",
    "set_status",
    "complete",
    "reopen",
    "add_subtask",
    "update_subtask",
    "add_note",
    "list",
    "delete",
    "export",
]
Status = Literal["open", "in_progress", "blocked", "completed"]
Priority = Literal["low", "medium", "high", "critical"]

DEFAULT_EXPORT = "docs/roadmap.md"
# A task's keys, in the order it is stored and shown: what it is first, then its
# state and its history.
KEYS = (
    "id",
    "title",
    "description",
    "acceptance",
    "subtasks",
    "status",
    "labels",
    "priority",
    "links",
    "created_at",
    "updated_at",
    "history",
)
MAX_SUBTASKS = 100
MAX_ACCEPTANCE = 30
MAX_HISTORY = 200

TRANSITIONS: dict[str, tuple[str, ...]] = {
    "open": ("in_progress", "blocked", "completed"),
    "in_progress": ("open", "blocked", "completed"),
    "blocked": ("open", "in_progress"),
    "completed": ("open",),
}

_EDITABLE = ("title", "description", "acceptance", "links", "labels", "priority")
_ALLOWED: dict[str, set[str]] = {
    "create": set(_EDITABLE),
    "update": {"id", *_EDITABLE},
    "set_status": {"id", "status", "note"},
    "complete": {"id", "note"},
    "reopen": {"id", "note"},
    "add_subtask": {"id", "subtask"},
    "update_subtask": {"id", "subtask"},
    "add_note": {"id", "note"},
    "list": {"filter"},
    "delete": {"id"},
    "export": {"export_path"},
}
_REQUIRED: dict[str, tuple[str, ...]] = {
    "create": ("title",),
    "update": ("id",),
    "set_status": ("id", "status"),
    "complete": ("id",),
    "reopen": ("id",),
    "add_subtask": ("id", "subtask"),
    "update_subtask": ("id", "subtask"),
    "add_note": ("id", "note"),
    "delete": ("id",),
}


class SubtaskArg(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: str | None = Field(default=None, min_length=1, description="For update_subtask: which")
    title: str | None = Field(default=None, min_length=1, max_length=_plans.MAX_TITLE)
    done: bool | None = Field(default=None, description="Whether the subtask is done")

    _clean = field_validator("title")(_plans.clean)


class TaskFilter(BaseModel):
    model_config = ConfigDict(extra="forbid")

    status: Status | None = Field(default=None, description="Only tasks in this status")
    label: str | None = Field(default=None, min_length=1, description="Only tasks with this label")
    path: str | None = Field(
        default=None, min_length=1, description="Only tasks linked to this file or directory"
    )


class TaskArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    action: TaskAction = Field(description="What to do")
    title: str | None = Field(default=None, min_length=1, max_length=_plans.MAX_TITLE)
    description: str | None = Field(
        default=None, max_length=_plans.MAX_TEXT, description="'' removes it"
    )
    acceptance: list[str] | None = Field(
        default=None,
        max_length=MAX_ACCEPTANCE,
        description="Acceptance criteria; on update they replace the old ones",
    )
    links: list[Link] | None = Field(
        default=None,
        max_length=_plans.MAX_LINKS,
        description="Existing project files (and lines) the task is about; replace on update",
    )
    labels: list[str] | None = Field(
        default=None, max_length=_plans.MAX_LABELS, description="Labels; replace on update"
    )
    priority: Priority | None = None
    id: str | None = Field(
        default=None, min_length=1, max_length=64, description="The task's id (all but create)"
    )
    status: Status | None = Field(default=None, description="For set_status: the new status")
    subtask: SubtaskArg | None = Field(
        default=None,
        description="add_subtask: {title, done?}; update_subtask: {id, title?, done?}",
    )
    note: str | None = Field(
        default=None,
        min_length=1,
        max_length=_plans.MAX_TEXT,
        description="add_note: the note; set_status/complete/reopen: why (kept in history)",
    )
    filter: TaskFilter | None = Field(default=None, description="For list: which tasks")
    export_path: str | None = Field(
        default=None,
        min_length=1,
        description=f"For export: the Markdown file to write (default {DEFAULT_EXPORT})",
    )

    _clean = field_validator("title", "description", "acceptance", "labels", "note")(_plans.clean)

    @model_validator(mode="after")
    def _per_action(self) -> TaskArgs:
        given = self.model_dump()
        a = self.action
        _plans.refuse_extra(a, given, _ALLOWED[a])
        _plans.need(a, given, *_REQUIRED.get(a, ()))
        if a == "update" and all(given[name] is None for name in _EDITABLE):
            raise ValueError(f"action 'update' needs at least one of {', '.join(_EDITABLE)}")
        if self.title is not None and not self.title.strip():
            raise ValueError("title is blank")
        sub = self.subtask
        if a == "add_subtask" and sub is not None:
            if sub.id is not None:
                raise ValueError("add_subtask assigns the subtask's id; leave subtask.id out")
            if sub.title is None or not sub.title.strip():
                raise ValueError("add_subtask needs subtask.title")
        if a == "update_subtask" and sub is not None:
            if sub.id is None:
                raise ValueError("update_subtask needs subtask.id")
            if sub.title is None and sub.done is None:
                raise ValueError("update_subtask needs subtask.title or subtask.done")
        for label in self.labels or []:
            if len(label) > _plans.MAX_LABEL:
                raise ValueError(f"label {label[:20]!r}… is longer than {_plans.MAX_LABEL}")
        return self


class Task(Tool[TaskArgs]):
    name = "task"
    description = (
        "Track larger work items the user sees in the Tasks panel: title, description, "
        "acceptance criteria, subtasks, priority, labels, links to files, notes. Actions: "
        "create (title + optional fields), update (id + fields to replace), set_status (id, "
        "status: open|in_progress|blocked|completed, note?), complete / reopen (id, note?), "
        "add_subtask (id, subtask {title, done?}), update_subtask (id, subtask {id, title?, "
        "done?}), add_note (id, note), list (filter?: status, label, path), delete (id), "
        "export (export_path?, default docs/roadmap.md; the user reviews the file). A blocked "
        "task must be unblocked before it is completed; a completed one only reopens. Only "
        "export writes a file. Links must name existing project files."
    )
    Args = TaskArgs
    side_effecting = True  # export writes a file; nothing else does (see mutates)
    timeout_kind = "file"

    def mutates(self, args: TaskArgs) -> bool:
        return args.action == "export"

    def risk(self, args: TaskArgs) -> RiskLevel:
        return RiskLevel.MEDIUM if args.action == "export" else RiskLevel.LOW

    def summary(self, args: TaskArgs) -> str:
        a = args.action
        if a == "create":
            return f"Add task: {_plans.md_inline(args.title or '')}"
        if a == "export":
            return f"Export the tasks to {args.export_path or DEFAULT_EXPORT}"
        if a == "list":
            return "List tasks"
        if a == "set_status":
            return f"Set task {args.id} to {args.status}"
        return f"{a.replace('_', ' ').capitalize()}: task {args.id}"

    def paths(self, args: TaskArgs) -> list[str]:
        if args.action == "export":
            return [args.export_path or DEFAULT_EXPORT]
        return [link.path for link in args.links or []]

    def review_notes(self, args: TaskArgs, ctx: ToolContext) -> list[str]:
        # An export is reviewed whatever the approval policy says.
        if args.action != "export":
            return []
        count = _plans.read(ctx, "task", lambda items: items.count())
        return _plans.export_notes(count, "task", args.export_path or DEFAULT_EXPORT)

    def preview(self, args: TaskArgs, ctx: ToolContext) -> str | None:
        if args.action != "export":
            return None
        tasks = _plans.read(ctx, "task", lambda items: items.all())
        return _plans.export_preview(ctx, args.export_path or DEFAULT_EXPORT, render(tasks))

    def execute(self, args: TaskArgs, ctx: ToolContext) -> Any:
        a = args.action
        if a == "list":
            tasks, revision = _plans.read(
                ctx, "task", lambda items: (items.all(), items.revision())
            )
            return {**_list_result(tasks, args.filter), "revision": revision}
        if a == "export":
            tasks = _plans.read(ctx, "task", lambda items: items.all())
            path = args.export_path or DEFAULT_EXPORT
            return _plans.export(ctx, path, render(tasks), len(tasks))
        # Links are checked before the transaction: that reads files.
        links = None
        if args.links is not None:
            links = [_plans.place(ctx, k.path, k.line, k.end_line) for k in args.links]
        if a == "delete":
            return _plans.change(ctx, "task", lambda items: _delete(items, args))
        return _plans.change(
            ctx,
            "task",
            # The revision is read after the change: the dict is built in order.
            lambda items: {"task": _apply(items, args, links), "revision": items.revision()},
        )


def _lookup(items: Items, item_id: str) -> dict[str, Any]:
    return _plans.lookup(items, "task", item_id.strip(), "task")


def _apply(items: Items, args: TaskArgs, links: list[dict[str, Any]] | None) -> dict[str, Any]:
    stamp = _plans.now()
    if args.action == "create":
        if items.count() >= _plans.MAX_ITEMS:
            raise _plans.too_many("task", "task")
        task: dict[str, Any] = {
            "id": items.new_id("task-"),
            "status": "open",
            "created_at": stamp,
        }
        _edit_fields(task, args, links)
    else:
        assert args.id is not None
        task = _lookup(items, args.id)
        if args.action == "update":
            _edit_fields(task, args, links)
        elif args.action in ("set_status", "complete", "reopen"):
            _move(task, args, stamp)
        elif args.action == "add_subtask":
            _add_subtask(task, args)
        elif args.action == "update_subtask":
            _update_subtask(task, args)
        elif args.action == "add_note":
            assert args.note is not None
            _remember(task, {"at": stamp, "kind": "note", "text": args.note})
    task["updated_at"] = stamp
    task = _plans.ordered(task, KEYS)
    items.put(task)
    return task


def _edit_fields(task: dict[str, Any], args: TaskArgs, links: list[dict[str, Any]] | None) -> None:
    if args.title is not None:
        task["title"] = " ".join(args.title.split())
    if args.description is not None:
        _set(task, "description", args.description)
    if args.acceptance is not None:
        _set(task, "acceptance", [c.strip() for c in args.acceptance if c.strip()])
    if links is not None:
        _set(task, "links", links)
    if args.labels is not None:
        _set(task, "labels", _plans.clean_labels(args.labels))
    if args.priority is not None:
        task["priority"] = args.priority


def _set(task: dict[str, Any], key: str, value: Any) -> None:
    """Set an optional field; an empty value removes it (the shape omits what is unset)."""
    if value:
        task[key] = value
    else:
        task.pop(key, None)


def _move(task: dict[str, Any], args: TaskArgs, stamp: int) -> None:
    old = task["status"]
    if args.action == "reopen" and old != "completed":
        raise errors.bad_args(
            f"Task {task['id']} is {old}, not completed; only a completed task is reopened",
            recovery=[f"Use set_status to move it from {old} to " + " or ".join(TRANSITIONS[old])],
            id=task["id"],
            status=old,
        )
    new = {"complete": "completed", "reopen": "open"}.get(args.action) or args.status
    assert new is not None
    if new == old:
        raise errors.bad_args(
            f"Task {task['id']} is already {old}",
            recovery=[
                "Call task with action 'list' to see the current state; the user may have "
                "changed it in the Tasks panel",
            ],
            id=task["id"],
            status=old,
        )
    if new not in TRANSITIONS[old]:
        hint = {
            ("completed", "blocked"): "Reopen it first (action 'reopen'), then set it blocked",
            ("completed", "in_progress"): "Reopen it first (action 'reopen')",
            ("blocked", "completed"): "Unblock it first (set_status in_progress or open)",
        }.get((old, new), f"From {old} it can go to: {', '.join(TRANSITIONS[old])}")
        raise errors.bad_args(
            f"Task {task['id']} is {old}; it cannot go to {new} directly",
            recovery=[hint, f"From {old} it can go to: {', '.join(TRANSITIONS[old])}"],
            id=task["id"],
            status=old,
            allowed=list(TRANSITIONS[old]),
        )
    task["status"] = new
    entry: dict[str, Any] = {"at": stamp, "kind": "status", "from": old, "to": new}
    entry["text"] = f"{old} → {new}" + (f": {args.note}" if args.note else "")
    _remember(task, entry)


def _remember(task: dict[str, Any], entry: dict[str, Any]) -> None:
    history = task.setdefault("history", [])
    history.append(entry)
    del history[:-MAX_HISTORY]


def _add_subtask(task: dict[str, Any], args: TaskArgs) -> None:
    assert args.subtask is not None and args.subtask.title is not None
    subtasks = task.setdefault("subtasks", [])
    if len(subtasks) >= MAX_SUBTASKS:
        raise errors.bad_args(
            f"Task {task['id']} already has {MAX_SUBTASKS} subtasks, the most forj keeps",
            recovery=["Split the work into several tasks"],
            id=task["id"],
        )
    numbers = [int(s["id"][1:]) for s in subtasks if s["id"][1:].isdigit()]
    subtasks.append(
        {
            "id": f"s{max(numbers, default=0) + 1}",
            "title": " ".join(args.subtask.title.split()),
            "done": bool(args.subtask.done),
        }
    )


def _update_subtask(task: dict[str, Any], args: TaskArgs) -> None:
    assert args.subtask is not None and args.subtask.id is not None
    want = args.subtask.id.strip()
    subtasks = task.get("subtasks", [])
    for sub in subtasks:
        if sub["id"] == want:
            if args.subtask.title is not None:
                sub["title"] = " ".join(args.subtask.title.split())
            if args.subtask.done is not None:
                sub["done"] = args.subtask.done
            return
    ids = [s["id"] for s in subtasks]
    raise errors.bad_args(
        f"Task {task['id']} has no subtask {want!r}",
        recovery=[
            f"Its subtasks: {', '.join(ids)}" if ids else "It has no subtasks; add_subtask first",
            "Subtask ids are per task: pass the task's id as id and the subtask's as subtask.id",
        ],
        id=task["id"],
        subtask_ids=ids,
    )


def _delete(items: Items, args: TaskArgs) -> dict[str, Any]:
    assert args.id is not None
    task = _lookup(items, args.id)
    items.delete(task["id"])
    return {"deleted": True, "id": task["id"], "revision": items.revision()}


def _list_result(tasks: list[dict[str, Any]], flt: TaskFilter | None) -> dict[str, Any]:
    shown = []
    for task in tasks:
        if flt is not None:
            if flt.status is not None and task["status"] != flt.status:
                continue
            if flt.label is not None and flt.label.strip() not in task.get("labels", []):
                continue
            if flt.path is not None and not any(
                _plans.under(link["path"], flt.path) for link in task.get("links", [])
            ):
                continue
        # The history stays with the single-task results: a list is for choosing.
        shown.append({k: v for k, v in task.items() if k != "history"})
    result: dict[str, Any] = {"tasks": shown}
    if flt is not None:
        result["filter"] = flt.model_dump(exclude_none=True)
        result["total"] = len(tasks)
    return result


_GROUPS = (
    ("in_progress", "In progress"),
    ("open", "Open"),
    ("blocked", "Blocked"),
    ("completed", "Completed"),
)
_RANK = {"critical": 0, "high": 1, "medium": 2, "low": 3}


def render(tasks: list[dict[str, Any]]) -> str:
    """The tasks as Markdown, by status, most urgent first within each."""
    lines = ["# Tasks", ""]
    if not tasks:
        lines.append("No tasks.")
    for status, heading in _GROUPS:
        group = [t for t in tasks if t["status"] == status]
        if not group:
            continue
        group.sort(key=lambda t: _RANK.get(t.get("priority", ""), 4))  # stable: creation order
        lines += [f"## {heading} ({len(group)})", ""]
        for task in group:
            lines += _render_task(task)
    return "\n".join(lines).rstrip("\n") + "\n"


def _render_task(task: dict[str, Any]) -> list[str]:
    lines = [f"### {task['id']}: {_plans.md_inline(task['title'])}", ""]
    facts = []
    if "priority" in task:
        facts.append(f"- Priority: {task['priority']}")
    if task.get("labels"):
        facts.append("- Labels: " + ", ".join(task["labels"]))
    if task.get("links"):
        facts.append("- Links: " + ", ".join(_plans.md_place(k) for k in task["links"]))
    if facts:
        lines += [*facts, ""]
    if task.get("description"):
        lines += [*_plans.md_block(task["description"], ""), ""]
    if task.get("acceptance"):
        lines += ["Acceptance criteria:", ""]
        lines += [f"- {_plans.md_inline(c)}" for c in task["acceptance"]]
        lines.append("")
    subtasks = task.get("subtasks", [])
    if subtasks:
        done = sum(1 for s in subtasks if s["done"])
        lines += [f"Subtasks ({done}/{len(subtasks)}):", ""]
        lines += [
            f"- [{'x' if s['done'] else ' '}] {_plans.md_inline(s['title'])} ({s['id']})"
            for s in subtasks
        ]
        lines.append("")
    notes = [h for h in task.get("history", []) if h.get("kind") == "note"]
    if notes:
        lines += ["Notes:", ""]
        for note in notes:
            day = datetime.datetime.fromtimestamp(note["at"], datetime.timezone.utc).date()
            body = _plans.md_block(note["text"], "  ")
            lines.append(f"- {day}: {body[0].lstrip()}")
            lines += body[1:]
        lines.append("")
    return lines
