"""The audit timeline and the per-session metrics, through the worker's own methods."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest
from conftest import MakeWorker, call, user_config

from forj_py.errors import ProtocolError
from forj_py.service import Worker
from forj_py.store import journal as journal_mod
from forj_py.store.journal import Journal


def batch(worker: Worker, calls: list[Any], session: str = "chat-a", **execute: Any) -> Any:
    plan = worker.plan({"calls": calls, "session": session})
    reply = worker.execute({"batch_id": plan["batch_id"], **execute}, lambda event: None)
    reply.on_sent()  # as a transport does once the reply is out
    return plan, reply


def by_call(rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {r["call_id"]: r for r in rows}


def test_fr_aud_01_rows_say_who_decided_how_long_and_what_came_of_it(
    make_worker: MakeWorker, project: Path
) -> None:
    user_config('[permissions]\nallow = ["write_file(docs/**)"]\n')
    worker = make_worker()
    batch(worker, [call("r", "read_file", path="src/main.py")])
    edit = {"path": "src/main.py", "old_string": "line 7\n", "new_string": "7\n"}
    batch(worker, [call("e1", "edit", **edit)], approved=["e1"])
    batch(worker, [call("r2", "read_file", path="src/main.py")])
    deny = {"path": "src/main.py", "old_string": "line 8\n", "new_string": "8\n"}
    batch(worker, [call("e2", "edit", **deny)], denied={"e2": "not now"})
    batch(worker, [call("w", "write_file", path="docs/n.md", content="n\n")])
    batch(worker, [call("x", "read_file", path="../outside")])
    rows = by_call(worker.audit({})["rows"])
    assert rows["r"]["decided_by"] == "mode" and rows["r"]["outcome"] == "ok"
    assert rows["r"]["decision"] == "runs: the call changes nothing"
    assert rows["r"]["summary"] == "src/main.py"
    assert rows["e1"]["decided_by"] == "review" and rows["e1"]["outcome"] == "ok"
    assert rows["e1"]["decision"] == "approved by the user (once)"
    assert rows["e1"]["files"] == ["src/main.py"]
    assert rows["e2"]["decided_by"] == "review" and rows["e2"]["outcome"] == "refused"
    assert rows["e2"]["decision"] == "denied by the user: not now"
    assert rows["e2"]["code"] == "E_POLICY" and rows["e2"]["files"] == []
    assert rows["w"]["decided_by"] == "rule" and rows["w"]["files"] == ["docs/n.md"]
    assert rows["w"]["decision"] == "runs: [permissions] allow 'write_file(docs/**)'"
    assert rows["x"]["decided_by"] == "validation" and rows["x"]["outcome"] == "error"
    assert rows["x"]["code"] == "E_POLICY"
    for ran in ("r", "e1", "w"):
        assert isinstance(rows[ran]["duration_ms"], float) and rows[ran]["duration_ms"] >= 0
    assert rows["e2"]["duration_ms"] is None  # it never ran
    # Newest first.
    order = [r["call_id"] for r in worker.audit({})["rows"]]
    assert order == ["x", "w", "e2", "r2", "e1", "r"]


def test_fr_aud_01_a_standing_grant_decides_later_calls(make_worker: MakeWorker) -> None:
    worker = make_worker()
    batch(worker, [call("r", "read_file", path="src/main.py")])
    edit = {"path": "src/main.py", "old_string": "line 7\n", "new_string": "7\n"}
    batch(
        worker,
        [call("e1", "edit", **edit)],
        approved=["e1"],
        grants={"e1": {"scope": "session", "pattern": "edit(src/**)"}},
    )
    again = {"path": "src/main.py", "old_string": "line 9\n", "new_string": "9\n"}
    batch(worker, [call("e3", "edit", **again)])
    rows = by_call(worker.audit({})["rows"])
    assert rows["e3"]["decided_by"] == "grant" and rows["e3"]["outcome"] == "ok"
    assert "standing grant" in rows["e3"]["decision"]


def test_fr_aud_02_filters_and_pages(make_worker: MakeWorker) -> None:
    worker = make_worker()
    for i in range(5):
        batch(worker, [call(f"r{i}", "read_file", path="README.md")])
    batch(worker, [call("m", "read_file", path="missing_100%.txt")])
    batch(worker, [call("l", "list_files", directory="src")])
    batch(worker, [call("u", "read_file", path="café_notes.txt")])
    assert {r["tool"] for r in worker.audit({"tool": "list_files"})["rows"]} == {"list_files"}
    errors = worker.audit({"outcome": "error"})["rows"]
    assert [r["call_id"] for r in errors] == ["u", "m"]
    assert [r["call_id"] for r in worker.audit({"text": "café"})["rows"]] == ["u"]
    assert [r["call_id"] for r in worker.audit({"text": "100%"})["rows"]] == ["m"]
    assert worker.audit({"text": "no such thing anywhere"})["rows"] == []
    first = worker.audit({"limit": 3})
    assert len(first["rows"]) == 3 and first["more"] and first["next_offset"] == 3
    rest = worker.audit({"limit": 10, "offset": first["next_offset"]})
    assert len(rest["rows"]) == 5 and not rest["more"] and rest["next_offset"] is None
    seen = [r["call_id"] for r in first["rows"] + rest["rows"]]
    assert len(set(seen)) == 8
    with pytest.raises(ProtocolError):
        worker.audit({"limit": 100_000})
    with pytest.raises(ProtocolError):
        worker.audit({"outcome": "maybe"})


def test_fr_aud_03_an_entry_shows_the_call_and_its_result(make_worker: MakeWorker) -> None:
    worker = make_worker()
    plan, _ = batch(worker, [call("r", "read_file", path="README.md")])
    entry = worker.audit_entry({"batch_id": plan["batch_id"], "seq": 0})
    assert entry["call"] == call("r", "read_file", path="README.md")
    assert entry["result"]["ok"] is True and entry["result"]["result"]["content"] == "# demo\n"
    with pytest.raises(ProtocolError, match="no call 3"):
        worker.audit_entry({"batch_id": plan["batch_id"], "seq": 3})


def test_fr_aud_04_another_projects_calls_stay_out(make_worker: MakeWorker, tmp_path: Path) -> None:
    other = tmp_path / "other"
    other.mkdir()
    (other / "o.txt").write_text("o\n")
    worker, elsewhere = make_worker(), make_worker(other)
    batch(elsewhere, [call("o", "read_file", path="o.txt")])
    plan, _ = batch(elsewhere, [call("o2", "read_file", path="o.txt")])
    assert worker.audit({})["rows"] == []
    with pytest.raises(ProtocolError):
        worker.audit_entry({"batch_id": plan["batch_id"], "seq": 0})


def test_fr_aud_05_a_schema_2_journal_is_migrated(tmp_path: Path) -> None:
    path = tmp_path / "journal.sqlite3"
    db = sqlite3.connect(path)
    db.executescript(journal_mod._SCHEMA)
    for name, decl in journal_mod._BATCH_COLUMNS_2.items():
        db.execute(f"ALTER TABLE batches ADD COLUMN {name} {decl}")
    for statement in journal_mod._SCHEMA_2:
        db.execute(statement)
    db.execute(
        "INSERT INTO batches (batch_id, root, mode, state, created_at, updated_at) "
        "VALUES ('b', '/p', 'enabled', 'done', 1, 1)"
    )
    db.execute("INSERT INTO calls VALUES ('b', 0, 'c', 'read_file', '{\"id\": \"c\"}', 'execute')")
    db.execute("INSERT INTO consent VALUES ('b', 0, 'plan', '[ask] runs: old', 1)")
    db.execute("PRAGMA user_version=2")
    db.commit()
    db.close()
    journal = Journal(path)
    try:
        assert journal.consent("b") == {0: {"plan": "[ask] runs: old"}}
        rows, more = journal.audit("/p")
        assert not more and rows[0]["step"] is None and rows[0]["outcome"] == "none"
        journal.record_consent("b", "approval", {0: "approved"}, {0: "default"})
        journal.record_delivered("b", {0: (2.0, 2.5)})
        rows, _ = journal.audit("/p")
        assert rows[0]["approval_reason"] == "approved" and rows[0]["started_at"] == 2.0
    finally:
        journal.close()
    check = sqlite3.connect(path)
    assert check.execute("PRAGMA user_version").fetchone()[0] == journal_mod.SCHEMA_VERSION == 3
    check.close()


def test_fr_met_02_the_metrics_method_counts_per_session(make_worker: MakeWorker) -> None:
    user_config('[permissions]\nallow = ["write_file(docs/**)"]\n')
    worker = make_worker()
    batch(worker, [call("a", "write_file", path="docs/a.md", content="a\n")], session="chat-a")
    batch(
        worker,
        [
            call("b", "write_file", path="docs/a.md", content="b\n"),
            call("c", "read_file", path="nope.txt"),
        ],
        session="chat-a",
    )
    batch(worker, [call("d", "read_file", path="README.md")], session="chat-b")
    a = worker.metrics({"session": "chat-a"})["session"]
    assert (a["calls"], a["errors"], a["files_touched"], a["files"]) == (3, 1, 1, ["docs/a.md"])
    assert a["by_tool"] == {
        "read_file": {"calls": 1, "errors": 1},
        "write_file": {"calls": 2, "errors": 0},
    }
    assert a["bytes_out"] > 0 and a["duration_ms_total"] >= a["duration_ms_max"] > 0
    sessions = {m["session"]: m for m in worker.metrics({})["sessions"]}
    assert set(sessions) == {"chat-a", "chat-b"} and sessions["chat-b"]["calls"] == 1
    assert worker.metrics({"session": "chat-none"})["session"]["calls"] == 0
