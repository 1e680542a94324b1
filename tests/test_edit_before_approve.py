"""Edit before approve: the user changes a proposed edit in Emacs, then approves it.

The worker offers each reviewed writing call's proposal (``proposal``: the
old and the proposed text of every file) and, on ``execute``, writes the
user's text instead when ``modified`` carries it.  The result says the user
modified the change and shows the diff that was written.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import MakeWorker, call, run

from forj_py.errors import ProtocolError
from forj_py.service import Worker


def _read(worker: Worker, *paths: str) -> None:
    calls = [call(f"r{i}", "read_file", path=p) for i, p in enumerate(paths)]
    _, result = run(worker, calls)
    assert all(r["ok"] for r in result["results"]), result


def test_proposal_gives_old_and_new_text_of_each_file(
    make_worker: MakeWorker, project: Path
) -> None:
    worker = make_worker()
    _read(worker, "README.md")
    plan = worker.plan(
        {"calls": [call("e", "edit", path="README.md", old_string="demo", new_string="forj")]}
    )
    proposal = worker.proposal({"batch_id": plan["batch_id"], "call_id": "e"})
    assert proposal == {
        "files": [{"path": "README.md", "old": "# demo\n", "new": "# forj\n", "existed": True}]
    }


def test_modified_edit_writes_the_users_text_and_says_so(
    make_worker: MakeWorker, project: Path
) -> None:
    worker = make_worker()
    _read(worker, "README.md")
    plan = worker.plan(
        {"calls": [call("e", "edit", path="README.md", old_string="demo", new_string="forj")]}
    )
    result = worker.execute(
        {
            "batch_id": plan["batch_id"],
            "approved": ["e"],
            "modified": {"e": {"README.md": "# forj, edited by hand\n"}},
        },
        lambda e: None,
    )
    (r,) = result["results"]
    assert r["ok"], r
    assert (project / "README.md").read_text() == "# forj, edited by hand\n"
    body = r["result"]
    assert body["user_modified"] is True
    assert "changed your proposed edit" in body["note"]
    assert body["preview"] == (
        "--- a/README.md\n+++ b/README.md\n@@ -1 +1 @@\n-# demo\n+# forj, edited by hand\n"
    )
    (f,) = body["files"]
    assert f["path"] == "README.md" and f["user_modified"] is True
    assert Path(f["backup_path"]).read_text() == "# demo\n"
    # The write counts as a read: the model can go on editing what is there now.
    _, again = run(
        worker,
        [call("e2", "edit", path="README.md", old_string="by hand", new_string="in Emacs")],
        approved=["e2"],
    )
    assert again["results"][0]["ok"], again


def test_modified_new_file_and_multi_edit_files(make_worker: MakeWorker, project: Path) -> None:
    worker = make_worker()
    _read(worker, "README.md", "src/main.py")
    calls = [
        call("w", "write_file", path="notes/new.txt", content="proposed\n"),
        call(
            "m",
            "multi_edit",
            edits=[
                {"path": "README.md", "start_line": 1, "end_line": 1, "new_content": "# A"},
                {"path": "src/main.py", "start_line": 1, "end_line": 1, "new_content": "one"},
            ],
        ),
    ]
    plan = worker.plan({"calls": calls})
    files = worker.proposal({"batch_id": plan["batch_id"], "call_id": "m"})["files"]
    assert [f["path"] for f in files] == ["README.md", "src/main.py"]
    result = worker.execute(
        {
            "batch_id": plan["batch_id"],
            "approved": ["w", "m"],
            "modified": {"w": {"notes/new.txt": "mine\n"}, "m": {"src/main.py": "uno\n"}},
        },
        lambda e: None,
    )
    w, m = result["results"]
    assert w["ok"] and m["ok"], result
    assert (project / "notes/new.txt").read_text() == "mine\n"
    assert w["result"]["files"][0]["created"] is True
    # The file the user left alone gets the proposal; the other one the user's text.
    assert (project / "README.md").read_text() == "# A\n"
    assert (project / "src/main.py").read_text() == "uno\n"
    assert [f["user_modified"] for f in m["result"]["files"]] == [False, True]


def test_modified_refused_when_the_file_changed_after_review(
    make_worker: MakeWorker, project: Path
) -> None:
    worker = make_worker()
    _read(worker, "README.md")
    plan = worker.plan(
        {"calls": [call("e", "edit", path="README.md", old_string="demo", new_string="forj")]}
    )
    (project / "README.md").write_text("# changed outside\n")
    _read(worker, "README.md")  # even a fresh read does not make the review current
    result = worker.execute(
        {"batch_id": plan["batch_id"], "approved": ["e"], "modified": {"e": {"README.md": "x\n"}}},
        lambda e: None,
    )
    err = result["results"][0]["error"]
    assert err["type"] == "stale-file" and "after the user reviewed" in err["message"]
    assert (project / "README.md").read_text() == "# changed outside\n"


def test_modified_elisp_must_still_be_readable(make_worker: MakeWorker, project: Path) -> None:
    (project / "a.el").write_text("(foo)\n")
    worker = make_worker()
    _read(worker, "a.el")
    plan = worker.plan(
        {"calls": [call("e", "edit", path="a.el", old_string="foo", new_string="bar")]}
    )
    result = worker.execute(
        {"batch_id": plan["batch_id"], "approved": ["e"], "modified": {"e": {"a.el": "(bar\n"}}},
        lambda e: None,
    )
    err = result["results"][0]["error"]
    assert err["type"] == "validation-error" and "not readable Emacs Lisp" in err["message"]
    assert (project / "a.el").read_text() == "(foo)\n"


def test_modified_requests_that_cannot_apply_are_protocol_errors(
    make_worker: MakeWorker, project: Path
) -> None:
    worker = make_worker()
    _read(worker, "README.md")
    plan = worker.plan(
        {
            "calls": [
                call("e", "edit", path="README.md", old_string="demo", new_string="forj"),
                call("r", "read_file", path="README.md"),
            ]
        }
    )
    batch = plan["batch_id"]
    for body, words in [
        ({"approved": [], "modified": {"e": {"README.md": "x"}}}, "not approved"),
        ({"approved": ["e"], "modified": {"e": {"other.txt": "x"}}}, "does not write other.txt"),
        ({"approved": ["e", "r"], "modified": {"r": {"README.md": "x"}}}, "awaiting review"),
    ]:
        with pytest.raises(ProtocolError) as info:
            worker.execute({"batch_id": batch, **body}, lambda e: None)
        assert words in str(info.value)
    with pytest.raises(ProtocolError, match="awaiting review"):
        worker.proposal({"batch_id": batch, "call_id": "r"})
    # Nothing ran: the batch can still be executed properly.
    result = worker.execute({"batch_id": batch, "approved": ["e"]}, lambda e: None)
    assert [r["ok"] for r in result["results"]] == [True, True]
    assert (project / "README.md").read_text() == "# forj\n"
