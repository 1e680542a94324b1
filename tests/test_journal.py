"""The journal: calls before planning, each result before the next call."""

from __future__ import annotations

import json
import os
import sqlite3
import stat
from pathlib import Path
from typing import Any

import pytest
from conftest import MakeWorker, Note, call, run, user_config
from pydantic import BaseModel, ConfigDict

from forj_py.errors import ProtocolError
from forj_py.store.journal import Journal
from forj_py.tools.registry import Tool, ToolContext


def _journal_path() -> Path:
    return Path(os.environ["FORJ_STATE_DIR"]) / "journal.sqlite3"


class PeekArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Peek(Tool[PeekArgs]):
    """Reads the journal from a second connection while its own call runs."""

    name = "peek"
    description = "Look at the journal."
    Args = PeekArgs

    def __init__(self) -> None:
        self.seen: list[Any] = []

    def summary(self, args: PeekArgs) -> str:
        return "Peek"

    def execute(self, args: PeekArgs, ctx: ToolContext) -> Any:
        db = sqlite3.connect(_journal_path())
        rows = db.execute(
            "SELECT seq, ok FROM results WHERE batch_id=? ORDER BY seq", (ctx.batch_id,)
        ).fetchall()
        state = db.execute("SELECT state FROM batches WHERE batch_id=?", (ctx.batch_id,)).fetchone()
        db.close()
        self.seen.append((rows, state[0]))
        return {"rows": len(rows)}


def test_fr_res_04_calls_are_journaled_as_received(make_worker: MakeWorker) -> None:
    worker = make_worker()
    raw = [
        call("a", "read_file", path="README.md"),
        {"id": "b", "name": "x", "args": {"weird": [1, None]}},
        17,
    ]
    plan = worker.plan({"calls": raw})
    batch = worker.journal.batch(plan["batch_id"])
    assert batch is not None
    assert batch["state"] == "planned"
    assert [c["call"] for c in batch["calls"]] == raw
    assert [c["disposition"] for c in batch["calls"]] == ["execute", "resolved", "resolved"]
    # Pre-resolved results are final at planning time, so they are already there.
    assert batch["calls"][0]["result"] is None
    assert batch["calls"][1]["result"]["error"]["details"]["kind"] == "UnknownTool"


def test_fr_res_04b_each_result_is_durable_before_the_next_call_starts(
    make_worker: MakeWorker,
) -> None:
    user_config('[tools.approval]\nallowlist = ["note"]\n')
    peek = Peek()
    worker = make_worker(extra_tools=[peek, Note()])
    calls = [
        call("1", "peek"),
        call("2", "note", text="x"),
        call("3", "peek"),
        call("4", "nope"),
        call("5", "peek"),
    ]
    _, result = run(worker, calls)
    assert [r["ok"] for r in result["results"]] == [True, True, True, False, True]
    # Seen from another connection: every earlier call's result, and the batch executing.
    assert peek.seen[0] == ([(3, 0)], "executing")  # the unknown tool, resolved at plan time
    assert peek.seen[1] == ([(0, 1), (1, 1), (3, 0)], "executing")
    assert peek.seen[2] == ([(0, 1), (1, 1), (2, 1), (3, 0)], "executing")
    final = worker.journal.batch(result["batch_id"])
    assert final is not None and final["state"] == "done"
    assert [c["result"] for c in final["calls"]] == result["results"]


def test_fr_res_04c_nothing_re_executes_after_a_restart(
    make_worker: MakeWorker, project: Path
) -> None:
    note = Note()
    worker = make_worker(extra_tools=[note])
    plan = worker.plan({"calls": [call("1", "note", text="x")]})
    assert plan["items"][0]["disposition"] == "confirm"
    # The worker goes away before the user decided; a new one starts.
    note2 = Note()
    again = make_worker(extra_tools=[note2])
    assert plan["batch_id"] in again.journal.unfinished(again.root)
    assert note.runs == [] and note2.runs == []
    # Approving the old batch on the new worker is refused, not run.
    with pytest.raises(ProtocolError, match="no batch") as refused:
        again.execute({"batch_id": plan["batch_id"], "approved": ["1"]}, lambda e: None)
    assert refused.value.type == "unknown-batch"
    assert note2.runs == []


def test_journal_file_is_private_and_outside_the_project(
    make_worker: MakeWorker, project: Path
) -> None:
    worker = make_worker()
    run(worker, [call("1", "read_file", path="README.md")])
    path = _journal_path()
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert project not in path.parents
    db = sqlite3.connect(path)
    assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    db.close()


def test_journal_refuses_a_newer_schema(tmp_path: Path) -> None:
    path = tmp_path / "j.sqlite3"
    db = sqlite3.connect(path)
    db.execute("PRAGMA user_version=99")
    db.close()
    try:
        Journal(path)
    except Exception as exc:
        assert "newer forj" in str(exc)
    else:
        raise AssertionError("a newer schema must be refused")


def test_lone_surrogates_are_journaled_losslessly(make_worker: MakeWorker) -> None:
    worker = make_worker()
    raw = {"id": "s", "name": "read_file", "args": {"path": "bad\udce9"}}
    plan = worker.plan({"calls": [raw]})
    db = sqlite3.connect(_journal_path())
    stored = db.execute("SELECT raw FROM calls WHERE batch_id=?", (plan["batch_id"],)).fetchone()[0]
    db.close()
    assert json.loads(stored) == raw


def test_a_schema_1_journal_is_upgraded_and_its_history_is_not_reported(
    make_worker: MakeWorker, project: Path
) -> None:
    path = _journal_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    db = sqlite3.connect(path)
    db.executescript(
        """
        CREATE TABLE batches (batch_id TEXT PRIMARY KEY, root TEXT NOT NULL, mode TEXT NOT NULL,
            state TEXT NOT NULL, created_at REAL NOT NULL, updated_at REAL NOT NULL);
        CREATE TABLE calls (batch_id TEXT NOT NULL, seq INTEGER NOT NULL, call_id TEXT NOT NULL,
            name TEXT NOT NULL, raw TEXT NOT NULL, disposition TEXT,
            PRIMARY KEY (batch_id, seq));
        CREATE TABLE results (batch_id TEXT NOT NULL, seq INTEGER NOT NULL,
            call_id TEXT NOT NULL, ok INTEGER NOT NULL, result TEXT NOT NULL,
            finished_at REAL NOT NULL, PRIMARY KEY (batch_id, seq));
        PRAGMA user_version=1;
        """
    )
    # A batch schema 1 left executing: history from before recovery existed.
    db.execute(
        "INSERT INTO batches VALUES ('old', ?, 'enabled', 'executing', "
        "CAST(strftime('%s','now') AS REAL), 0)",
        (os.path.realpath(project),),
    )
    db.commit()
    db.close()
    worker = make_worker()
    assert worker.journal.unfinished(worker.root) == ["old"]  # still in the record
    assert worker.hello_payload({})["unfinished"] == []  # but not a crash to report
    db = sqlite3.connect(path)
    assert db.execute("PRAGMA user_version").fetchone()[0] == 3  # schema 3 on top of 2
    assert "step" in {row[1] for row in db.execute("PRAGMA table_info(consent)")}
    assert db.execute("SELECT count(*) FROM call_times").fetchone()[0] == 0
    columns = {row[1] for row in db.execute("PRAGMA table_info(batches)")}
    assert {"turn", "kind", "worker", "delivered_at", "resolution", "undone_by"} <= columns
    assert db.execute("SELECT count(*) FROM file_changes").fetchone()[0] == 0
    db.close()
    # Opening it again is a no-op.
    make_worker()
