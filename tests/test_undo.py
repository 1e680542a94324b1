"""Checkpoints, undo and rewind through the real service, on real files and backups."""

from __future__ import annotations

import os
import threading
import uuid
from pathlib import Path
from typing import Any

import pytest
from conftest import MakeWorker, Sleep, call

from forj_py.errors import ProtocolError
from forj_py.safety.files import sha256
from forj_py.service import Worker
from forj_py.store.journal import FileChange

ORIGINAL_MAIN = "".join(f"line {i}\n" for i in range(1, 101))


def apply(worker: Worker, calls: list[dict[str, Any]], turn: str | None = None) -> str:
    """Read what the calls edit, then plan and execute them approved; return the batch id."""
    # The stale-file rule: existing files are read before they are changed.
    reads = [
        call(f"read-{i}", "read_file", path=c["args"]["path"])
        for i, c in enumerate(calls)
        if "path" in c["args"] and os.path.exists(os.path.join(worker.root, c["args"]["path"]))
    ]
    if reads:
        worker.execute({"batch_id": worker.plan({"calls": reads})["batch_id"]}, lambda e: None)
    body: dict[str, Any] = {"calls": calls}
    if turn is not None:
        body["turn"] = turn
    plan = worker.plan(body)
    reply = worker.execute(
        {"batch_id": plan["batch_id"], "approved": [c["id"] for c in calls]}, lambda e: None
    )
    assert all(r["ok"] for r in reply["results"]), reply["results"]
    return str(plan["batch_id"])


def edit_and_create(worker: Worker, turn: str | None = None) -> str:
    return apply(
        worker,
        [
            call("e", "edit", path="README.md", old_string="# demo", new_string="# forj"),
            call("c", "write_file", path="docs/new.txt", content="brand new\n"),
        ],
        turn,
    )


def test_checkpoints_list_each_changing_batch_with_its_files(
    make_worker: MakeWorker, project: Path
) -> None:
    worker = make_worker()
    apply(worker, [call("r", "read_file", path="README.md")])  # changes nothing: not listed
    batch = edit_and_create(worker, turn="t1")
    (checkpoint,) = worker.checkpoints({})["checkpoints"]
    assert checkpoint["batch_id"] == batch
    assert checkpoint["turn"] == "t1"
    assert checkpoint["kind"] == "tools"
    assert checkpoint["undone_by"] is None
    assert checkpoint["files"] == [
        {"path": "README.md", "change": "modified", "backup": True},
        {"path": "docs/new.txt", "change": "created", "backup": True},
    ]
    assert worker.checkpoints({"turn": "other"})["checkpoints"] == []


def test_undo_dry_run_shows_the_diff_then_undo_restores_edited_and_deletes_created(
    make_worker: MakeWorker, project: Path
) -> None:
    worker = make_worker()
    batch = edit_and_create(worker)
    assert (project / "README.md").read_text() == "# forj\n"

    dry = worker.undo({"batch_id": batch, "dry_run": True})
    assert dry["applied"] is False and dry["dry_run"] is True
    readme, created = dry["files"]
    assert readme["action"] == "restore" and readme["status"] == "ok"
    assert readme["diff"] == ("--- a/README.md\n+++ b/README.md\n@@ -1 +1 @@\n-# forj\n+# demo\n")
    assert created["action"] == "delete"
    assert created["diff"] == ("--- a/docs/new.txt\n+++ /dev/null\n@@ -1 +0,0 @@\n-brand new\n")
    # A dry run changes nothing.
    assert (project / "README.md").read_text() == "# forj\n"
    assert (project / "docs/new.txt").exists()

    done = worker.undo({"batch_id": batch})
    assert done["applied"] is True
    assert (project / "README.md").read_text() == "# demo\n"
    assert not (project / "docs/new.txt").exists()
    # The deleted file has its own backup: undo loses nothing.
    deleted = next(f for f in done["files"] if f["path"] == "docs/new.txt")
    assert Path(deleted["backup_path"]).read_text() == "brand new\n"
    assert project not in Path(deleted["backup_path"]).parents

    # The undo is a checkpoint of its own, and the batch says who undid it.
    undo_cp, batch_cp = worker.checkpoints({})["checkpoints"]
    assert undo_cp["kind"] == "undo" and undo_cp["batch_id"] == done["undo_batch"]
    assert batch_cp["undone_by"] == done["undo_batch"]
    assert {f["path"]: f["change"] for f in undo_cp["files"]} == {
        "README.md": "modified",
        "docs/new.txt": "deleted",
    }
    with pytest.raises(ProtocolError, match="already undone"):
        worker.undo({"batch_id": batch})

    # Undo the undo: the batch's changes are back, and it can be undone again.
    worker.undo({"batch_id": done["undo_batch"]})
    assert (project / "README.md").read_text() == "# forj\n"
    assert (project / "docs/new.txt").read_text() == "brand new\n"
    assert worker.checkpoints({})["checkpoints"][-1]["undone_by"] is None
    worker.undo({"batch_id": batch})
    assert (project / "README.md").read_text() == "# demo\n"


def test_undo_refuses_a_file_changed_since_unless_forced(
    make_worker: MakeWorker, project: Path
) -> None:
    worker = make_worker()
    batch = edit_and_create(worker)
    (project / "README.md").write_text("# forj\nthe user's own line\n")

    refused = worker.undo({"batch_id": batch})
    assert refused["applied"] is False
    assert refused["refused"] == ["README.md"]
    assert "changed after forj wrote it" in refused["message"]
    status = {f["path"]: f["status"] for f in refused["files"]}
    assert status == {"README.md": "changed", "docs/new.txt": "ok"}
    # The diff shows what forcing would lose.
    readme = refused["files"][0]
    assert "-the user's own line\n" in readme["diff"]
    # All or nothing: the created file is still there too.
    assert (project / "docs/new.txt").exists()
    assert (project / "README.md").read_text() == "# forj\nthe user's own line\n"

    with pytest.raises(ProtocolError, match="does not touch"):
        worker.undo({"batch_id": batch, "force": ["src/main.py"]})
    forced = worker.undo({"batch_id": batch, "force": ["README.md"]})
    assert forced["applied"] is True
    assert (project / "README.md").read_text() == "# demo\n"
    # The user's version was backed up before it was overwritten.
    readme_done = next(f for f in forced["files"] if f["path"] == "README.md")
    assert "the user's own line" in Path(readme_done["backup_path"]).read_text()


def test_undo_by_turn_and_rewind_to_before_a_turn(make_worker: MakeWorker, project: Path) -> None:
    worker = make_worker()
    apply(
        worker,
        [call("a", "edit", path="README.md", old_string="# demo", new_string="# one")],
        turn="t1",
    )
    apply(
        worker,
        [call("b", "edit", path="README.md", old_string="# one", new_string="# two")],
        turn="t2",
    )
    apply(worker, [call("c", "write_file", path="b.txt", content="b\n")], turn="t2")
    apply(
        worker,
        [call("d", "edit", path="src/main.py", old_string="line 7\n", new_string="seven\n")],
        turn="t3",
    )

    # Undo one turn: its two batches, newest last, back to before it.
    dry = worker.undo({"turn": "t3", "dry_run": True})
    assert [f["path"] for f in dry["files"]] == ["src/main.py"]
    worker.undo({"turn": "t3"})
    assert (project / "src/main.py").read_text() == ORIGINAL_MAIN

    dry = worker.rewind({"turn": "t2", "dry_run": True})
    assert dry["turn"] == "t2"
    assert {f["path"]: f["action"] for f in dry["files"]} == {
        "README.md": "restore",
        "b.txt": "delete",
        # t3 was undone already: nothing left to do for it.
        "src/main.py": "none",
    }
    rewound = worker.rewind({"turn": "t2"})
    assert rewound["applied"] is True
    assert (project / "README.md").read_text() == "# one\n"
    assert not (project / "b.txt").exists()
    assert (project / "src/main.py").read_text() == ORIGINAL_MAIN
    # Every batch from t2 on is marked undone; t1's is not.
    marks = {c["turn"]: c["undone_by"] for c in worker.checkpoints({})["checkpoints"]}
    assert marks["t1"] is None and marks["t2"] == rewound["undo_batch"]
    # t3 was undone before, and that undo is now rewound too: t3 stays undone.
    assert marks["t3"] == rewound["undo_batch"]
    # And rewinding further goes back to the start.
    worker.rewind({"turn": "t1"})
    assert (project / "README.md").read_text() == "# demo\n"
    with pytest.raises(ProtocolError, match="no turn"):
        worker.rewind({"turn": "never"})
    with pytest.raises(ProtocolError, match="exactly one"):
        worker.undo({"turn": "t1", "batch_id": "x"})


def test_undo_without_a_backup_is_refused_and_changes_nothing(
    make_worker: MakeWorker, project: Path
) -> None:
    worker = make_worker()
    no_backup = apply(
        worker,
        [call("w", "write_file", path="README.md", content="# x\n", no_backup=True)],
    )
    refused = worker.undo({"batch_id": no_backup})
    assert refused["applied"] is False
    assert refused["files"][0]["status"] == "no-backup"
    assert (project / "README.md").read_text() == "# x\n"
    # Forcing cannot conjure up a backup.
    assert worker.undo({"batch_id": no_backup, "force": ["README.md"]})["applied"] is False

    pruned = apply(worker, [call("w2", "write_file", path="README.md", content="# y\n")])
    (change,) = worker.journal.file_changes([pruned])
    assert change.backup is not None
    os.unlink(change.backup)  # pruned by age or size
    refused = worker.undo({"batch_id": pruned})
    assert refused["files"][0]["status"] == "no-backup"
    assert "is gone" in refused["message"]


def test_undo_never_follows_a_link_planted_where_forj_wrote(
    make_worker: MakeWorker, project: Path, tmp_path: Path
) -> None:
    worker = make_worker()
    batch = edit_and_create(worker)
    outside = tmp_path / "outside.txt"
    outside.write_text("not the project's\n")
    (project / "docs/new.txt").unlink()
    (project / "docs/new.txt").symlink_to(outside)
    refused = worker.undo({"batch_id": batch, "force": ["docs/new.txt", "README.md"]})
    assert refused["applied"] is False
    assert refused["files"][1]["status"] == "refused"
    assert outside.read_text() == "not the project's\n"
    assert (project / "README.md").read_text() == "# forj\n"


def test_undo_of_a_deletion_restores_the_file(make_worker: MakeWorker, project: Path) -> None:
    """The delete path, recorded at the store level as a deleting tool will record it."""
    worker = make_worker()
    target = project / "src/main.py"
    data = target.read_bytes()
    sp = worker.sandbox.resolve("src/main.py", for_write=True)
    backup = worker.backups.save(sp, data)
    batch_id = uuid.uuid4().hex
    worker.journal.record_batch(batch_id, worker.root, "enabled", [], turn="del")
    target.unlink()
    worker.journal.record_file_change(
        batch_id,
        0,
        "x",
        FileChange(
            path="src/main.py",
            canonical=sp.canonical,
            existed=True,
            backup=backup,
            hash_before=sha256(data),
            hash_after=None,
        ),
    )
    (cp,) = worker.checkpoints({})["checkpoints"]
    assert cp["files"] == [{"path": "src/main.py", "change": "deleted", "backup": True}]

    # Someone put a different file there since: refused.
    target.write_text("something else\n")
    refused = worker.undo({"batch_id": batch_id})
    assert refused["refused"] == ["src/main.py"]
    assert "changed after forj wrote it" in refused["message"]
    target.unlink()

    dry = worker.undo({"batch_id": batch_id, "dry_run": True})
    (f,) = dry["files"]
    assert f["action"] == "recreate"
    assert f["diff"].startswith("--- /dev/null\n+++ b/src/main.py\n")
    worker.undo({"batch_id": batch_id})
    assert target.read_bytes() == data


def test_undo_of_a_batch_that_changed_nothing_is_a_clear_error(make_worker: MakeWorker) -> None:
    worker = make_worker()
    read_only = apply(worker, [call("r", "read_file", path="README.md")])
    with pytest.raises(ProtocolError, match="changed no files"):
        worker.undo({"batch_id": read_only})
    with pytest.raises(ProtocolError, match="no batch"):
        worker.undo({"batch_id": "nope"})
    with pytest.raises(ProtocolError, match="no file changes"):
        worker.undo({"turn": "nope"})


def test_the_model_must_read_a_file_again_after_undo(
    make_worker: MakeWorker, project: Path
) -> None:
    worker = make_worker()
    batch = edit_and_create(worker)
    worker.undo({"batch_id": batch})
    plan = worker.plan(
        {"calls": [call("e", "edit", path="README.md", old_string="# demo", new_string="# z")]}
    )
    reply = worker.execute({"batch_id": plan["batch_id"], "approved": ["e"]}, lambda e: None)
    assert reply["results"][0]["error"]["type"] == "stale-file"


def test_undo_waits_for_a_running_batch(make_worker: MakeWorker) -> None:
    worker = make_worker(extra_tools=[Sleep()])
    batch = edit_and_create(worker)
    plan = worker.plan({"calls": [call("s", "sleep", seconds=30)]})
    runner = threading.Thread(
        target=worker.execute, args=({"batch_id": plan["batch_id"]}, lambda e: None)
    )
    runner.start()
    try:
        for _ in range(200):
            if worker._batch(plan["batch_id"]).state == "executing":
                break
            threading.Event().wait(0.01)
        with pytest.raises(ProtocolError, match="is running"):
            worker.undo({"batch_id": batch})
    finally:
        worker.cancel({"batch_id": plan["batch_id"]})
        runner.join(10)
    assert worker.undo({"batch_id": batch})["applied"] is True
