"""``todo_write`` and ``task``: every action, every error, the store, export through review."""

from __future__ import annotations

import json
import os
import sqlite3
import threading
from pathlib import Path
from typing import Any

import pytest
from conftest import MakeWorker, call, user_config
from conftest import run_approved as _exec

from forj_py.service import Worker
from forj_py.tools.task import TRANSITIONS
from forj_py.transport.client import Client, WorkerProcess


def _one(worker: Worker, name: str, **args: Any) -> dict[str, Any]:
    """Plan and execute one call, approving it if it is reviewed; its result."""
    (r,) = _exec(worker, call("c", name, **args))
    return r


def _ok(worker: Worker, name: str, **args: Any) -> Any:
    r = _one(worker, name, **args)
    assert r["ok"], r
    return r["result"]


def _error(worker: Worker, name: str, **args: Any) -> dict[str, Any]:
    r = _one(worker, name, **args)
    assert not r["ok"], r
    error: dict[str, Any] = r["error"]
    return error


def _tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}


# --- todo_write: every action ---------------------------------------------------


def test_todo_write_every_action_and_the_result_shapes(
    make_worker: MakeWorker, project: Path
) -> None:
    worker = make_worker()
    before = _tree(project)
    first = _ok(
        worker,
        "todo_write",
        action="create",
        title="  Write   the parser  ",
        note="Start with\nthe lexer",
        location={"path": "src/main.py", "line": 10, "end_line": 12},
        labels=["parser", " parser ", "urgent"],
    )["task"]
    assert list(first) == [
        "id",
        "title",
        "note",
        "status",
        "location",
        "labels",
        "created_at",
        "updated_at",
    ]
    assert first["id"] == "todo-1"
    assert first["title"] == "Write the parser"
    assert first["note"] == "Start with\nthe lexer"
    assert first["status"] == "open"
    assert first["location"] == {"path": "src/main.py", "line": 10, "end_line": 12}
    assert first["labels"] == ["parser", "urgent"]
    assert isinstance(first["created_at"], int) and first["created_at"] == first["updated_at"]

    second = _ok(worker, "todo_write", action="create", title="Docs")["task"]
    assert second["id"] == "todo-2"
    assert set(second) == {"id", "title", "status", "created_at", "updated_at"}

    updated = _ok(
        worker, "todo_write", action="update", id="todo-1", title="Parser", note="", labels=[]
    )["task"]
    assert updated["title"] == "Parser"
    assert "note" not in updated and "labels" not in updated
    assert updated["location"]["path"] == "src/main.py"

    moved = _ok(
        worker,
        "todo_write",
        action="update",
        id="todo-2",
        location={"path": "README.md", "line": 1},
        labels=["docs"],
    )["task"]
    assert moved["location"] == {"path": "README.md", "line": 1}
    assert moved["labels"] == ["docs"]

    done = _ok(worker, "todo_write", action="complete", id="todo-1")["task"]
    assert done["status"] == "completed"
    again = _ok(worker, "todo_write", action="reopen", id="todo-1")["task"]
    assert again["status"] == "open"
    _ok(worker, "todo_write", action="complete", id="todo-1")

    listed = _ok(worker, "todo_write", action="list")
    assert listed == {
        "tasks": [
            {
                "id": "todo-1",
                "title": "Parser",
                "status": "completed",
                "location": {"path": "src/main.py", "line": 10, "end_line": 12},
            },
            {
                "id": "todo-2",
                "title": "Docs",
                "status": "open",
                "location": {"path": "README.md", "line": 1},
                "labels": ["docs"],
            },
        ],
        "revision": 7,
    }

    assert _ok(worker, "todo_write", action="delete", id="todo-2") == {
        "deleted": True,
        "id": "todo-2",
        "revision": 8,
    }
    assert [t["id"] for t in _ok(worker, "todo_write", action="list")["tasks"]] == ["todo-1"]
    # Ids are never reused: a model remembering todo-2 must not hit a new item.
    assert _ok(worker, "todo_write", action="create", title="Next")["task"]["id"] == "todo-3"
    # Nothing but export writes in the project.
    assert _tree(project) == before


def test_plan_text_loses_terminal_controls_and_bidi_overrides(make_worker: MakeWorker) -> None:
    """What the store keeps is what every result, the panel and an export show."""
    worker = make_worker()
    todo = _ok(
        worker,
        "todo_write",
        action="create",
        title="Fine\u202e txt.exe\x1b[31m",
        note="a\x07b\nc",
        labels=["x\u2066y"],
    )["task"]
    assert (todo["title"], todo["note"], todo["labels"]) == ("Fine txt.exe", "ab\nc", ["xy"])
    task = _ok(
        worker,
        "task",
        action="create",
        title="\x1b]0;owned\x07T",
        description="d\u202d",
        acceptance=["\u202ea"],
    )["task"]
    assert (task["title"], task["description"], task["acceptance"]) == ("T", "d", ["a"])
    task = _ok(worker, "task", action="add_subtask", id="task-1", subtask={"title": "s\u202e"})
    assert task["task"]["subtasks"][0]["title"] == "s"
    error = _error(worker, "todo_write", action="create", title="\u202e\u202d")
    assert error["message"].endswith("title is blank")


def test_todo_write_list_filters_by_status_label_and_path(make_worker: MakeWorker) -> None:
    worker = make_worker()
    _ok(worker, "todo_write", action="create", title="A", labels=["x"])
    _ok(
        worker,
        "todo_write",
        action="create",
        title="B",
        location={"path": "src/main.py", "line": 1},
    )
    _ok(worker, "todo_write", action="create", title="C", location={"path": "README.md", "line": 1})
    _ok(worker, "todo_write", action="complete", id="todo-3")

    def titles(**flt: str) -> list[str]:
        result = _ok(worker, "todo_write", action="list", filter=flt)
        assert result["filter"] == flt and result["total"] == 3
        return [t["title"] for t in result["tasks"]]

    assert titles(status="open") == ["A", "B"]
    assert titles(status="completed") == ["C"]
    assert titles(label="x") == ["A"]
    assert titles(path="src") == ["B"]
    assert titles(path="src/main.py") == ["B"]
    assert titles(path="sr") == []
    assert titles(path=".") == ["B", "C"]
    assert titles(status="open", path="README.md") == []


# --- todo_write: errors --------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "says"),
    [
        ({"action": "create"}, "action 'create' needs title"),
        ({"action": "create", "title": "   "}, "title is blank"),
        ({"action": "update", "title": "x"}, "action 'update' needs id"),
        ({"action": "update", "id": "todo-1"}, "needs at least one of title, note"),
        ({"action": "complete"}, "action 'complete' needs id"),
        ({"action": "reopen"}, "action 'reopen' needs id"),
        ({"action": "delete"}, "action 'delete' needs id"),
        ({"action": "list", "title": "x"}, "action 'list' does not take title; it takes filter"),
        ({"action": "complete", "id": "todo-1", "note": "x"}, "does not take note"),
        ({"action": "export", "filter": {}}, "does not take filter"),
        ({"action": "archive"}, "action"),
        ({"action": "list", "filter": {"status": "done"}}, "status"),
        ({"action": "create", "title": "x", "location": {"path": "a"}}, "line"),
        (
            {"action": "create", "title": "x", "location": {"path": "a", "line": 5, "end_line": 2}},
            "end_line 2 is before line 5",
        ),
        ({"action": "create", "title": "x", "labels": ["y" * 61]}, "longer than 60"),
        ({"action": "create", "title": "x", "colour": "red"}, "colour"),
    ],
)
def test_todo_write_bad_arguments_are_validation_errors(
    make_worker: MakeWorker, args: dict[str, Any], says: str
) -> None:
    error = _error(make_worker(), "todo_write", **args)
    assert error["type"] == "validation-error"
    assert says in error["message"], error


def test_todo_write_unknown_id_lists_the_existing_ids(make_worker: MakeWorker) -> None:
    worker = make_worker()
    for title in ("a", "b"):
        _ok(worker, "todo_write", action="create", title=title)
    for action in ("complete", "reopen", "delete"):
        error = _error(worker, "todo_write", action=action, id="todo-9")
        assert error["type"] == "validation-error"
        assert error["message"] == "No todo with id 'todo-9'"
        assert error["recovery"][0] == "Existing ids: todo-1, todo-2"
        assert error["details"]["existing_ids"] == ["todo-1", "todo-2"]
    error = _error(worker, "todo_write", action="update", id="todo-9", title="x")
    assert "todo-1, todo-2" in error["recovery"][0]
    # The task store of this project is still empty.
    error = _error(worker, "task", action="complete", id="task-1")
    assert error["recovery"][0] == "There are no tasks yet; create one first"


def test_todo_write_completing_twice_says_the_state(make_worker: MakeWorker) -> None:
    worker = make_worker()
    _ok(worker, "todo_write", action="create", title="a")
    error = _error(worker, "todo_write", action="reopen", id="todo-1")
    assert error["message"] == "Todo todo-1 is already open"
    _ok(worker, "todo_write", action="complete", id="todo-1")
    error = _error(worker, "todo_write", action="complete", id="todo-1")
    assert error["message"] == "Todo todo-1 is already completed"
    assert "Tasks panel" in error["recovery"][0]


def test_todo_write_locations_must_exist_inside_the_project(
    make_worker: MakeWorker, project: Path, tmp_path: Path
) -> None:
    worker = make_worker()
    (tmp_path / "outside.txt").write_text("x\n")
    (project / ".env").write_text("SECRET=1\n")
    os.symlink(tmp_path / "outside.txt", project / "link.txt")

    def refused(path: str, line: int = 1) -> dict[str, Any]:
        return _error(
            worker,
            "todo_write",
            action="create",
            title="x",
            location={"path": path, "line": line},
        )

    assert "does not exist" in refused("src/nope.py")["message"]
    assert "not a regular file" in refused("src")["message"]
    gone = refused("src/main.py", 101)
    assert gone["message"] == "src/main.py has 100 line(s); line 101 does not exist"
    assert gone["details"]["total_lines"] == 100
    for outside in ("../outside.txt", str(tmp_path / "outside.txt"), "link.txt", ".env"):
        error = refused(outside)
        assert error["type"] == "validation-error"
        assert error["details"]["kind"] == "SandboxViolation", error
    assert _ok(worker, "todo_write", action="list") == {"tasks": [], "revision": 0}
    # The last line exists; a range ending past it does not.
    _ok(
        worker,
        "todo_write",
        action="create",
        title="x",
        location={"path": "src/main.py", "line": 100},
    )
    error = _error(
        worker,
        "todo_write",
        action="update",
        id="todo-1",
        location={"path": "src/main.py", "line": 99, "end_line": 101},
    )
    assert "line 101 does not exist" in error["message"]


# --- task: every action ----------------------------------------------------------------


def test_task_every_action_and_the_result_shapes(make_worker: MakeWorker, project: Path) -> None:
    worker = make_worker()
    before = _tree(project)
    created = _ok(
        worker,
        "task",
        action="create",
        title="Rewrite the parser",
        description="It is slow.\n\nMake it linear.",
        acceptance=["parses 1 MB in 100 ms", "  ", "no regressions"],
        links=[{"path": "src/main.py", "line": 5, "end_line": 9}, {"path": "README.md"}],
        labels=["perf"],
        priority="high",
    )["task"]
    assert list(created) == [
        "id",
        "title",
        "description",
        "acceptance",
        "status",
        "labels",
        "priority",
        "links",
        "created_at",
        "updated_at",
    ]
    assert created["id"] == "task-1"
    assert created["status"] == "open"
    assert created["acceptance"] == ["parses 1 MB in 100 ms", "no regressions"]
    assert created["links"] == [
        {"path": "src/main.py", "line": 5, "end_line": 9},
        {"path": "README.md"},
    ]

    updated = _ok(
        worker, "task", action="update", id="task-1", priority="critical", description=""
    )["task"]
    assert updated["priority"] == "critical" and "description" not in updated
    assert updated["title"] == "Rewrite the parser"

    t = _ok(worker, "task", action="set_status", id="task-1", status="in_progress")["task"]
    assert t["status"] == "in_progress"
    t = _ok(worker, "task", action="add_subtask", id="task-1", subtask={"title": "lexer"})["task"]
    t = _ok(
        worker, "task", action="add_subtask", id="task-1", subtask={"title": "tables", "done": True}
    )["task"]
    assert t["subtasks"] == [
        {"id": "s1", "title": "lexer", "done": False},
        {"id": "s2", "title": "tables", "done": True},
    ]
    t = _ok(
        worker,
        "task",
        action="update_subtask",
        id="task-1",
        subtask={"id": "s1", "done": True, "title": "the lexer"},
    )["task"]
    assert t["subtasks"][0] == {"id": "s1", "title": "the lexer", "done": True}
    t = _ok(worker, "task", action="add_note", id="task-1", note="Profiling shows the regex")[
        "task"
    ]
    t = _ok(worker, "task", action="complete", id="task-1", note="merged")["task"]
    assert t["status"] == "completed"
    t = _ok(worker, "task", action="reopen", id="task-1")["task"]
    assert t["status"] == "open"
    history = [(h["kind"], h.get("from"), h.get("to"), h["text"]) for h in t["history"]]
    assert history == [
        ("status", "open", "in_progress", "open → in_progress"),
        ("note", None, None, "Profiling shows the regex"),
        ("status", "in_progress", "completed", "in_progress → completed: merged"),
        ("status", "completed", "open", "completed → open"),
    ]

    _ok(worker, "task", action="create", title="Second")
    listed = _ok(worker, "task", action="list")["tasks"]
    assert [x["id"] for x in listed] == ["task-1", "task-2"]
    # A list is for choosing: the history stays with the single-task results.
    assert "history" not in listed[0]
    assert listed[0]["subtasks"] == t["subtasks"]

    assert _ok(worker, "task", action="delete", id="task-2") == {
        "deleted": True,
        "id": "task-2",
        "revision": 11,
    }
    assert [x["id"] for x in _ok(worker, "task", action="list")["tasks"]] == ["task-1"]
    assert _tree(project) == before


def test_task_list_filters_by_status_label_and_linked_path(make_worker: MakeWorker) -> None:
    worker = make_worker()
    _ok(worker, "task", action="create", title="A", labels=["ui"])
    _ok(worker, "task", action="create", title="B", links=[{"path": "src/main.py", "line": 3}])
    _ok(worker, "task", action="create", title="C", links=[{"path": "README.md"}])
    _ok(worker, "task", action="set_status", id="task-2", status="blocked")

    def titles(**flt: str) -> list[str]:
        return [t["title"] for t in _ok(worker, "task", action="list", filter=flt)["tasks"]]

    assert titles(status="blocked") == ["B"]
    assert titles(status="open") == ["A", "C"]
    assert titles(label="ui") == ["A"]
    assert titles(path="src") == ["B"]
    assert titles(path="README.md") == ["C"]


def test_task_status_transitions_are_checked_and_recorded(make_worker: MakeWorker) -> None:
    worker = make_worker()
    statuses = ["open", "in_progress", "blocked", "completed"]
    # Reach each status by an allowed path, then try every target from it.
    path_to = {
        "open": [],
        "in_progress": ["in_progress"],
        "blocked": ["blocked"],
        "completed": ["completed"],
    }
    for start in statuses:
        for target in statuses:
            task_id = _ok(worker, "task", action="create", title=f"{start}->{target}")["task"]["id"]
            for step in path_to[start]:
                _ok(worker, "task", action="set_status", id=task_id, status=step)
            r = _one(worker, "task", action="set_status", id=task_id, status=target)
            if target == start:
                assert r["error"]["message"] == f"Task {task_id} is already {start}"
            elif target in TRANSITIONS[start]:
                assert r["ok"], r
                last = r["result"]["task"]["history"][-1]
                assert (last["kind"], last["from"], last["to"]) == ("status", start, target)
            else:
                assert r["error"]["type"] == "validation-error"
                assert r["error"]["message"] == (
                    f"Task {task_id} is {start}; it cannot go to {target} directly"
                )
                assert r["error"]["details"]["allowed"] == list(TRANSITIONS[start])
    # The table itself: completed only reopens; blocked is unblocked before completion.
    assert TRANSITIONS["completed"] == ("open",)
    assert "completed" not in TRANSITIONS["blocked"]
    # The actions that name their target follow the same rules.
    task_id = _ok(worker, "task", action="create", title="x")["task"]["id"]
    _ok(worker, "task", action="set_status", id=task_id, status="blocked")
    error = _error(worker, "task", action="complete", id=task_id)
    assert error["recovery"][0] == "Unblock it first (set_status in_progress or open)"
    error = _error(worker, "task", action="reopen", id=task_id)
    assert (
        error["message"]
        == f"Task {task_id} is blocked, not completed; only a completed task is reopened"
    )
    _ok(worker, "task", action="set_status", id=task_id, status="open")
    _ok(worker, "task", action="complete", id=task_id)
    error = _error(worker, "task", action="set_status", id=task_id, status="blocked")
    assert error["recovery"][0] == "Reopen it first (action 'reopen'), then set it blocked"


@pytest.mark.parametrize(
    ("args", "says"),
    [
        ({"action": "create"}, "action 'create' needs title"),
        ({"action": "create", "title": "x", "status": "open"}, "does not take status"),
        ({"action": "create", "title": "x", "id": "task-7"}, "does not take id"),
        ({"action": "update", "id": "task-1"}, "needs at least one of title, description"),
        ({"action": "set_status", "id": "task-1"}, "action 'set_status' needs status"),
        ({"action": "set_status", "id": "task-1", "status": "done"}, "status"),
        ({"action": "add_subtask", "id": "task-1"}, "action 'add_subtask' needs subtask"),
        ({"action": "add_subtask", "id": "task-1", "subtask": {"done": True}}, "subtask.title"),
        (
            {"action": "add_subtask", "id": "task-1", "subtask": {"id": "s1", "title": "x"}},
            "leave subtask.id out",
        ),
        ({"action": "update_subtask", "id": "task-1", "subtask": {"title": "x"}}, "subtask.id"),
        (
            {"action": "update_subtask", "id": "task-1", "subtask": {"id": "s1"}},
            "subtask.title or subtask.done",
        ),
        ({"action": "add_note", "id": "task-1"}, "action 'add_note' needs note"),
        ({"action": "add_note", "id": "task-1", "note": ""}, "note"),
        ({"action": "list", "id": "task-1"}, "does not take id"),
        ({"action": "delete"}, "action 'delete' needs id"),
        ({"action": "create", "title": "x", "priority": "urgent"}, "priority"),
        (
            {"action": "create", "title": "x", "links": [{"path": "a", "end_line": 3}]},
            "end_line needs line",
        ),
    ],
)
def test_task_bad_arguments_are_validation_errors(
    make_worker: MakeWorker, args: dict[str, Any], says: str
) -> None:
    error = _error(make_worker(), "task", **args)
    assert error["type"] == "validation-error"
    assert says in error["message"], error


def test_task_unknown_ids_and_subtasks_list_what_exists(make_worker: MakeWorker) -> None:
    worker = make_worker()
    _ok(worker, "task", action="create", title="a")
    _ok(worker, "todo_write", action="create", title="t")
    for args in (
        {"action": "update", "id": "task-5", "title": "x"},
        {"action": "set_status", "id": "task-5", "status": "open"},
        {"action": "add_note", "id": "task-5", "note": "x"},
        {"action": "delete", "id": "task-5"},
        # The two stores are apart: a todo id means nothing to task.
        {"action": "complete", "id": "todo-1"},
    ):
        error = _error(worker, "task", **args)
        assert error["recovery"][0] == "Existing ids: task-1", args
    error = _error(
        worker, "task", action="update_subtask", id="task-1", subtask={"id": "s3", "done": True}
    )
    assert error["message"] == "Task task-1 has no subtask 's3'"
    assert error["recovery"][0] == "It has no subtasks; add_subtask first"
    _ok(worker, "task", action="add_subtask", id="task-1", subtask={"title": "one"})
    error = _error(
        worker, "task", action="update_subtask", id="task-1", subtask={"id": "s3", "done": True}
    )
    assert error["recovery"][0] == "Its subtasks: s1"
    assert _error(worker, "todo_write", action="complete", id="task-1")["recovery"][0] == (
        "Existing ids: todo-1"
    )


def test_task_links_must_exist_inside_the_project(make_worker: MakeWorker, tmp_path: Path) -> None:
    worker = make_worker()
    error = _error(worker, "task", action="create", title="x", links=[{"path": "nope.md"}])
    assert error["message"] == "nope.md does not exist; a location must name an existing file"
    error = _error(worker, "task", action="create", title="x", links=[{"path": "../x"}])
    assert error["details"]["kind"] == "SandboxViolation"
    error = _error(
        worker, "task", action="create", title="x", links=[{"path": "README.md", "line": 2}]
    )
    assert "README.md has 1 line(s)" in error["message"]
    assert _ok(worker, "task", action="list") == {"tasks": [], "revision": 0}


# --- export ---------------------------------------------------------------------------


SECRET = "sk-proj-abcdefghijklmnopqrstuvwx"


def _plan_one(worker: Worker, name: str, **args: Any) -> tuple[str, dict[str, Any]]:
    plan = worker.plan({"calls": [call("x", name, **args)]})
    (item,) = plan["items"]
    return plan["batch_id"], item


def _execute(worker: Worker, batch_id: str, **body: Any) -> dict[str, Any]:
    reply = worker.execute({"batch_id": batch_id, **body}, lambda event: None)
    (result,) = reply["results"]
    r: dict[str, Any] = result
    return r


def test_todo_write_export_is_reviewed_as_a_diff_and_redacts_secrets(
    make_worker: MakeWorker, project: Path
) -> None:
    # Even where every other call runs unasked, an export is reviewed.
    user_config('[tools.approval]\nmode = "auto"\n')
    worker = make_worker()
    _ok(worker, "todo_write", action="create", title="Rotate the key", note=f"old one: {SECRET}")
    _ok(
        worker,
        "todo_write",
        action="create",
        title="Ship",
        location={"path": "README.md", "line": 1},
    )
    _ok(worker, "todo_write", action="complete", id="todo-2")
    (project / "docs").mkdir()
    (project / "docs" / "TODO.md").write_text("# TODO\n\nold text\n")
    batch_id, item = _plan_one(worker, "todo_write", action="export")
    assert item["disposition"] == "confirm"
    assert item["summary"] == "Export the todo list to docs/TODO.md"
    assert item["warnings"] == [
        "Writes 2 todo(s) to docs/TODO.md as Markdown; credentials in the text are redacted"
    ]
    preview = item["preview"]
    assert preview.startswith("--- a/docs/TODO.md\n+++ b/docs/TODO.md\n")
    assert "-old text\n" in preview
    assert "+- [ ] Rotate the key (todo-1)\n" in preview
    assert SECRET not in preview and "[REDACTED]" in preview
    assert "note: reviewed against docs/TODO.md with SHA-256 " in preview

    denied = _execute(worker, batch_id, denied={"x": "not now"})
    assert denied["error"]["type"] == "permission-error"
    assert (project / "docs" / "TODO.md").read_text() == "# TODO\n\nold text\n"

    # No read of the file is needed: the review took its hash.
    batch_id, _ = _plan_one(worker, "todo_write", action="export")
    r = _execute(worker, batch_id, approved=["x"])
    assert r["ok"], r
    assert r["result"]["path"] == "docs/TODO.md" and r["result"]["count"] == 2
    assert Path(r["result"]["backup_path"]).read_text() == "# TODO\n\nold text\n"
    written = (project / "docs" / "TODO.md").read_text()
    assert SECRET not in written
    assert written == (
        "# TODO\n\n"
        "## Open (1)\n\n"
        "- [ ] Rotate the key (todo-1)\n"
        "  old one: [REDACTED]\n\n"
        "## Completed (1)\n\n"
        "- [x] Ship (todo-2) — `README.md:1`\n"
    )
    # The store keeps the note as written; only the file is redacted.
    (todo,) = [t for t in _ok(worker, "todo_write", action="list")["tasks"] if t["id"] == "todo-1"]
    assert todo["title"] == "Rotate the key"
    # Exporting again changes nothing.
    batch_id, item = _plan_one(worker, "todo_write", action="export")
    assert item["preview"] == ""
    r = _execute(worker, batch_id, approved=["x"])
    assert r["result"] == {"path": "docs/TODO.md", "count": 2, "unchanged": True}


def test_task_export_creates_the_file_and_renders_every_field(
    make_worker: MakeWorker, project: Path
) -> None:
    worker = make_worker()
    _ok(
        worker,
        "task",
        action="create",
        title="Parser",
        description="Make it fast.\npassword = hunter22",
        acceptance=["1 MB in 100 ms"],
        links=[{"path": "src/main.py", "line": 3, "end_line": 4}],
        labels=["perf"],
        priority="low",
    )
    _ok(worker, "task", action="create", title="Urgent one", priority="critical")
    _ok(worker, "task", action="add_subtask", id="task-1", subtask={"title": "lexer", "done": True})
    _ok(worker, "task", action="add_subtask", id="task-1", subtask={"title": "tables"})
    _ok(
        worker, "task", action="add_note", id="task-1", note="token: ghp_abcdefghijklmnopqrstuvwxyz"
    )
    _ok(worker, "task", action="create", title="Done one")
    _ok(worker, "task", action="complete", id="task-3")
    batch_id, item = _plan_one(worker, "task", action="export", export_path="plan/roadmap.md")
    assert item["preview"].startswith("--- /dev/null\n+++ b/plan/roadmap.md\n")
    r = _execute(worker, batch_id, approved=["x"])
    assert r["ok"], r
    assert r["result"] == {
        "path": "plan/roadmap.md",
        "count": 3,
        "backup_path": None,
        "created": True,
    }
    text = (project / "plan" / "roadmap.md").read_text()
    assert text.startswith("# Tasks\n\n## Open (2)\n\n")
    assert "hunter22" not in text and "ghp_" not in text
    body = text.split("## Open (2)\n\n", 1)[1]
    # Most urgent first within a status.
    assert body.index("### task-2: Urgent one") < body.index("### task-1: Parser")
    assert "- Priority: low\n- Labels: perf\n- Links: `src/main.py:3-4`\n" in body
    assert "Make it fast.\npassword = [REDACTED]\n" in body
    assert "Acceptance criteria:\n\n- 1 MB in 100 ms\n" in body
    assert "Subtasks (1/2):\n\n- [x] lexer (s1)\n- [ ] tables (s2)\n" in body
    assert "Notes:\n\n- 20" in body and ": token: [REDACTED]\n" in body
    assert "## Completed (1)\n\n### task-3: Done one\n" in text


def test_export_refuses_a_file_or_plan_changed_after_review(
    make_worker: MakeWorker, project: Path
) -> None:
    worker = make_worker()
    _ok(worker, "todo_write", action="create", title="a")
    (project / "TODO.md").write_text("mine\n")
    batch_id, _ = _plan_one(worker, "todo_write", action="export", export_path="TODO.md")
    (project / "TODO.md").write_text("changed by the user\n")
    r = _execute(worker, batch_id, approved=["x"])
    assert r["error"]["type"] == "stale-file"
    assert r["error"]["message"] == (
        "TODO.md changed after the user reviewed the export; nothing was written"
    )
    assert (project / "TODO.md").read_text() == "changed by the user\n"

    batch_id, _ = _plan_one(worker, "todo_write", action="export", export_path="TODO.md")
    _ok(worker, "todo_write", action="create", title="added by another chat")
    r = _execute(worker, batch_id, approved=["x"])
    assert r["error"]["type"] == "stale-file"
    assert r["error"]["details"]["reason"] == "Plan changed between review and execution"
    assert (project / "TODO.md").read_text() == "changed by the user\n"


def test_export_paths_are_checked_by_the_sandbox(
    make_worker: MakeWorker, project: Path, tmp_path: Path
) -> None:
    worker = make_worker()
    _ok(worker, "task", action="create", title="a")
    for path in ("../out.md", str(tmp_path / "out.md"), ".git/TODO.md", ".forj/TODO.md"):
        _, item = _plan_one(worker, "task", action="export", export_path=path)
        assert item["disposition"] == "resolved", path
        error = item["result"]["error"]
        assert (
            error["type"] == "validation-error" and error["details"]["kind"] == "SandboxViolation"
        )
    assert not (tmp_path / "out.md").exists()
    _, item = _plan_one(worker, "task", action="export", export_path="src")
    assert item["result"]["error"]["type"] == "file-error"
    assert item["result"]["error"]["message"] == "src is a directory, not a file"


def test_export_edited_in_review_writes_the_users_text(
    make_worker: MakeWorker, project: Path
) -> None:
    worker = make_worker()
    _ok(worker, "todo_write", action="create", title="a")
    batch_id, _ = _plan_one(worker, "todo_write", action="export")
    proposal = worker.proposal({"batch_id": batch_id, "call_id": "x"})
    (file,) = proposal["files"]
    assert file["path"] == "docs/TODO.md" and file["existed"] is False
    assert file["new"].startswith("# TODO\n")
    r = _execute(
        worker,
        batch_id,
        approved=["x"],
        modified={"x": {"docs/TODO.md": "# My own list\n"}},
    )
    assert r["ok"] and r["result"]["user_modified"] is True
    assert (project / "docs" / "TODO.md").read_text() == "# My own list\n"


# --- the store --------------------------------------------------------------------------


def _hello(proc: WorkerProcess, client: Client) -> None:
    client.call("hello", {"token": proc.token, "client": {"name": "pytest"}})


def _wire(
    client: Client, calls: list[dict[str, Any]], approve: bool = True
) -> list[dict[str, Any]]:
    plan = client.call("plan", {"calls": calls})
    ids = [c["id"] for c in calls] if approve else []
    reply = client.call("execute", {"batch_id": plan["batch_id"], "approved": ids})
    results: list[dict[str, Any]] = reply["results"]
    return results


def test_the_plan_survives_a_worker_restart(project: Path) -> None:
    with WorkerProcess(project) as proc, Client(proc.port) as c:
        _hello(proc, c)
        (r,) = _wire(c, [call("1", "todo_write", action="create", title="remember me")])
        assert r["ok"], r
        (r,) = _wire(c, [call("2", "task", action="create", title="and me", priority="high")])
        (r,) = _wire(c, [call("3", "task", action="add_note", id="task-1", note="noted")])
        assert r["ok"], r
    with WorkerProcess(project) as proc, Client(proc.port) as c:
        _hello(proc, c)
        (todos, tasks) = _wire(
            c, [call("1", "todo_write", action="list"), call("2", "task", action="list")]
        )
        assert todos["result"]["tasks"] == [
            {"id": "todo-1", "title": "remember me", "status": "open"}
        ]
        assert [(t["id"], t["priority"]) for t in tasks["result"]["tasks"]] == [("task-1", "high")]
        (r,) = _wire(c, [call("3", "task", action="complete", id="task-1")])
        assert [h["kind"] for h in r["result"]["task"]["history"]] == ["note", "status"]
    db = Path(os.environ["FORJ_STATE_DIR"]) / "tasks.sqlite3"
    assert db.stat().st_mode & 0o777 == 0o600
    assert db.parent == (Path(os.environ["FORJ_STATE_DIR"]) / "journal.sqlite3").parent
    assert project not in db.parents


def test_the_plan_lives_in_the_workers_own_state_dir(project: Path, tmp_path: Path) -> None:
    """A worker started with --state-dir keeps its plans there, beside its journal."""
    own = tmp_path / "own-state"
    with WorkerProcess(project, state_dir=own) as proc, Client(proc.port) as c:
        _hello(proc, c)
        (r,) = _wire(c, [call("1", "todo_write", action="create", title="kept here")])
        assert r["ok"], r
    assert (own / "tasks.sqlite3").is_file()
    assert not (Path(os.environ["FORJ_STATE_DIR"]) / "tasks.sqlite3").exists()
    with WorkerProcess(project, state_dir=own) as proc, Client(proc.port) as c:
        _hello(proc, c)
        (r,) = _wire(c, [call("2", "todo_write", action="list")])
        assert [t["title"] for t in r["result"]["tasks"]] == ["kept here"]


def test_every_result_carries_the_plans_revision(make_worker: MakeWorker) -> None:
    """A client that gets a list and a change out of order can tell which is newer."""
    worker = make_worker()
    assert _ok(worker, "todo_write", action="list")["revision"] == 0
    assert _ok(worker, "todo_write", action="create", title="a")["revision"] == 1
    assert _ok(worker, "todo_write", action="create", title="b")["revision"] == 2
    # A refused change changes nothing, not even the revision.
    _error(worker, "todo_write", action="reopen", id="todo-1")
    assert _ok(worker, "todo_write", action="list")["revision"] == 2
    assert _ok(worker, "todo_write", action="delete", id="todo-2")["revision"] == 3
    filtered = _ok(worker, "todo_write", action="list", filter={"status": "completed"})
    assert filtered == {"tasks": [], "filter": {"status": "completed"}, "total": 1, "revision": 3}
    # Each store counts its own changes.
    assert _ok(worker, "task", action="list")["revision"] == 0
    assert _ok(worker, "task", action="create", title="t")["revision"] == 1
    assert _ok(worker, "todo_write", action="list")["revision"] == 3


def test_plans_of_two_projects_are_apart(make_worker: MakeWorker, tmp_path: Path) -> None:
    other = tmp_path / "other"
    other.mkdir()
    a, b = make_worker(), make_worker(other)
    _ok(a, "todo_write", action="create", title="in a")
    assert _ok(b, "todo_write", action="list") == {"tasks": [], "revision": 0}
    assert _ok(b, "todo_write", action="create", title="in b")["task"]["id"] == "todo-1"


def test_two_concurrent_clients_lose_no_update(project: Path) -> None:
    """Two workers on one project (two Emacs sessions) and two connections to one worker
    (two chats), all changing the same plan, and the same task, at once."""
    per_client = 15
    errors: list[Any] = []
    with (
        WorkerProcess(project) as one,
        WorkerProcess(project) as two,
        Client(one.port) as a,
        Client(one.port) as b,
        Client(two.port) as c,
    ):
        for proc, client in ((one, a), (one, b), (two, c)):
            _hello(proc, client)
        (r,) = _wire(a, [call("t", "task", action="create", title="shared")])
        task_id = r["result"]["task"]["id"]
        go = threading.Barrier(3)

        def hammer(client: Client, name: str) -> None:
            try:
                go.wait()
                for i in range(per_client):
                    todo, sub = _wire(
                        client,
                        [
                            call(f"a{i}", "todo_write", action="create", title=f"{name} {i}"),
                            call(
                                f"b{i}",
                                "task",
                                action="add_subtask",
                                id=task_id,
                                subtask={"title": f"{name} {i}"},
                            ),
                        ],
                    )
                    if not (todo["ok"] and sub["ok"]):
                        errors.append((todo, sub))
            except Exception as exc:  # reported below, with the others
                errors.append(exc)

        threads = [
            threading.Thread(target=hammer, args=(client, name))
            for client, name in ((a, "a"), (b, "b"), (c, "c"))
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        assert not errors, errors[:3]
        (todos, tasks) = _wire(
            b, [call("l1", "todo_write", action="list"), call("l2", "task", action="list")]
        )
    titles = sorted(t["title"] for t in todos["result"]["tasks"])
    want = sorted(f"{n} {i}" for n in "abc" for i in range(per_client))
    assert titles == want
    ids = [t["id"] for t in todos["result"]["tasks"]]
    assert len(set(ids)) == len(ids) == 3 * per_client
    (shared,) = tasks["result"]["tasks"]
    assert sorted(s["title"] for s in shared["subtasks"]) == want
    assert len({s["id"] for s in shared["subtasks"]}) == 3 * per_client


def test_a_store_from_a_newer_forj_is_refused_with_a_clear_error(
    make_worker: MakeWorker,
) -> None:
    path = Path(os.environ["FORJ_STATE_DIR"]) / "newer" / "tasks.sqlite3"
    path.parent.mkdir(parents=True)
    db = sqlite3.connect(path)
    db.execute("PRAGMA user_version=99")
    db.close()
    from forj_py.store.tasks import TaskStore, TaskStoreError

    with pytest.raises(TaskStoreError, match="newer forj"):
        TaskStore(path)


def test_tool_definitions_advertise_both_tools(live: tuple[WorkerProcess, Client]) -> None:
    _, client = live
    tools = {t["name"]: t for t in client.call("tool_definitions")["tools"]}
    todo = tools["todo_write"]["parameters"]
    assert todo["required"] == ["action"]
    assert todo["properties"]["action"]["enum"] == [
        "create",
        "update",
        "complete",
        "reopen",
        "delete",
        "list",
        "export",
    ]
    task = tools["task"]["parameters"]
    assert task["properties"]["status"]["enum"] == ["open", "in_progress", "blocked", "completed"]
    assert task["properties"]["priority"]["enum"] == ["low", "medium", "high", "critical"]
    assert json.dumps(task).count("$ref") == 0
