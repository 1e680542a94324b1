"""A writing call that cannot run is refused when planned, never after the user approved it."""

from __future__ import annotations

from pathlib import Path

from conftest import MakeWorker, call

_EDIT = call("e", "edit", path="a.txt", old_string="old", new_string="new")


def test_edit_of_a_file_never_read_is_refused_before_the_review(
    make_worker: MakeWorker, project: Path
) -> None:
    (project / "a.txt").write_text("old\n")
    worker = make_worker()
    plan = worker.plan({"calls": [_EDIT]})
    item = plan["items"][0]
    assert item["disposition"] == "resolved"
    assert item["result"]["error"]["type"] == "stale-file"
    assert "was not read" in item["result"]["error"]["message"]


def test_edit_of_a_file_changed_since_it_was_read_is_refused_before_the_review(
    make_worker: MakeWorker, project: Path
) -> None:
    (project / "a.txt").write_text("old\n")
    worker = make_worker()
    plan = worker.plan({"calls": [call("r", "read_file", path="a.txt")]})
    worker.execute({"batch_id": plan["batch_id"]}, lambda event: None)
    (project / "a.txt").write_text("old, changed by someone else\n")
    plan = worker.plan({"calls": [_EDIT]})
    item = plan["items"][0]
    assert item["disposition"] == "resolved"
    assert "changed since it was last read" in item["result"]["error"]["message"]


def test_edit_after_a_read_of_the_same_file_in_its_batch_is_still_reviewed(
    make_worker: MakeWorker, project: Path
) -> None:
    (project / "a.txt").write_text("old\n")
    worker = make_worker()
    plan = worker.plan(
        {
            "calls": [
                call("r", "read_file", path="./a.txt"),
                call("e", "edit", path="a.txt", old_string="old", new_string="new"),
            ]
        }
    )
    assert [i["disposition"] for i in plan["items"]] == ["execute", "confirm"]
