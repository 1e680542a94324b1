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


class _Flushes:
    """Follows the journal connection's statements: was every commit so far flushed?

    A commit made with ``synchronous=FULL`` flushes the WAL, and with it every
    commit before it; so all is on disk exactly when the latest commit was FULL.
    """

    def __init__(self, journal: Journal) -> None:
        self.mode = "NORMAL"
        self.commits: list[str] = []
        journal._db.set_trace_callback(self._trace)

    def _trace(self, statement: str) -> None:
        text = statement.strip().upper()
        if text.startswith("PRAGMA SYNCHRONOUS="):
            self.mode = text.split("=", 1)[1]
        elif text == "COMMIT":
            self.commits.append(self.mode)

    def all_flushed(self) -> bool:
        return bool(self.commits) and self.commits[-1] == "FULL"


class Probe(Tool[PeekArgs]):
    """Notes, when it runs, whether everything journaled so far is on disk."""

    name = "probe"
    description = "Check the journal's flushes."
    Args = PeekArgs
    side_effecting = True

    def __init__(self) -> None:
        self.flushes: _Flushes | None = None
        self.seen: list[tuple[bool, int]] = []

    def summary(self, args: PeekArgs) -> str:
        return "Probe"

    def execute(self, args: PeekArgs, ctx: ToolContext) -> Any:
        assert self.flushes is not None
        self.seen.append((self.flushes.all_flushed(), len(self.flushes.commits)))
        return {}


def test_fr_res_04b_everything_is_flushed_before_a_call_runs_and_before_each_reply(
    make_worker: MakeWorker,
) -> None:
    user_config('[tools.approval]\nallowlist = ["probe"]\n')
    probe = Probe()
    worker = make_worker(extra_tools=[probe])
    flushes = probe.flushes = _Flushes(worker.journal)
    plan = worker.plan({"calls": [call("1", "probe"), call("2", "probe"), call("3", "nope")]})
    # The plan's answer: the calls, dispositions and the ready error are on disk.
    assert flushes.all_flushed()
    # The calls themselves were not flushed on their own: one flush for the plan.
    assert flushes.commits[0] == "NORMAL"
    reply = worker.execute({"batch_id": plan["batch_id"]}, lambda e: None)
    assert [r["ok"] for r in reply["results"]] == [True, True, False]
    # Each call ran with all before it on disk: the batch executing, then the
    # first result; the reply leaves with every result and the end flushed.
    assert [ok for ok, _ in probe.seen] == [True, True]
    assert probe.seen[1][1] > probe.seen[0][1]
    assert flushes.all_flushed()
    final = worker.journal.batch(plan["batch_id"])
    assert final is not None and final["state"] == "done"
    assert [c["result"] for c in final["calls"]] == reply["results"]
    # Marking the reply delivered is left to the next flush (recovery would
    # show the results again, never run anything again).
    assert reply.on_sent is not None
    reply.on_sent()
    assert not flushes.all_flushed()
    meta = worker.journal.batch_meta(plan["batch_id"])
    assert meta is not None and meta["delivered_at"] is not None


def test_journal_flushes_each_file_change_before_the_tool_goes_on(
    make_worker: MakeWorker, monkeypatch: pytest.MonkeyPatch
) -> None:
    worker = make_worker()
    flushes = _Flushes(worker.journal)
    seen: list[bool] = []
    original = worker.journal.record_file_change

    def record(*args: Any) -> int:
        row = original(*args)
        seen.append(flushes.all_flushed())
        return row

    monkeypatch.setattr(worker.journal, "record_file_change", record)
    _, result = run(
        worker,
        [call("w", "write_file", path="new.txt", content="x\n")],
        approved=["w"],
    )
    assert result["results"][0]["ok"], result
    assert seen == [True]


def test_fr_res_04b_a_batch_of_reads_is_flushed_with_its_result_not_before(
    make_worker: MakeWorker,
) -> None:
    # Nothing it runs changes anything: the calls were flushed with the plan,
    # and the flush of the result is the batch's first after that.
    worker = make_worker()
    flushes = _Flushes(worker.journal)
    plan = worker.plan({"calls": [call("r", "read_file", path="README.md")]})
    assert flushes.all_flushed()
    planned = len(flushes.commits)
    reply = worker.execute({"batch_id": plan["batch_id"]}, lambda e: None)
    assert reply["results"][0]["ok"]
    assert flushes.commits[planned:] == ["NORMAL", "FULL"]  # executing; result and end
    final = worker.journal.batch(plan["batch_id"])
    assert final is not None and final["state"] == "done"
