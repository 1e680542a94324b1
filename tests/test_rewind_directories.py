"""A rewind that removes the files forj created in a new directory removes that directory."""

from __future__ import annotations

from pathlib import Path

from conftest import MakeWorker, call

from forj_py.service import Worker


def _write(worker: Worker, turn: str, path: str) -> None:
    calls = [call("w" + path, "write_file", path=path, content="x\n")]
    plan = worker.plan({"calls": calls, "turn": turn})
    reply = worker.execute({"batch_id": plan["batch_id"], "approved": ["w" + path]}, lambda e: None)
    assert reply["results"][0]["ok"], reply


def test_rewind_removing_a_files_last_sibling_removes_the_directory_it_created(
    make_worker: MakeWorker, project: Path
) -> None:
    worker = make_worker()
    _write(worker, "t1", "pkg/sub/one.py")
    _write(worker, "t1", "pkg/sub/two.py")
    worker.rewind({"turn": "t1"})
    assert not (project / "pkg").exists()


def test_rewind_keeps_a_directory_that_still_holds_the_users_files(
    make_worker: MakeWorker, project: Path
) -> None:
    (project / "pkg").mkdir()
    (project / "pkg" / "mine.txt").write_text("mine\n")
    worker = make_worker()
    _write(worker, "t1", "pkg/sub/one.py")
    worker.rewind({"turn": "t1"})
    assert not (project / "pkg" / "sub").exists()
    assert (project / "pkg" / "mine.txt").read_text() == "mine\n"
