"""Crash recovery (seed 000 FR-RES-04a, FR-RES-04c, FR-RES-05): what ran, what did not, and
nothing re-executed.

The crashes are real: a worker process killed with SIGKILL while a command
runs, and a client that goes away mid-batch.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import pytest
from conftest import MakeWorker, Note, call

from forj_py.errors import ProtocolError
from forj_py.transport.client import Client, WorkerProcess

HANG = 20.0

# The command leaves a line in ran.log each time it starts, then waits far
# longer than the test: a second line would mean it ran again.
LONG = "echo started >> ran.log; sleep 60; echo finished >> ran.log"


def _batch(extra: str = "") -> list[dict[str, Any]]:
    return [
        call("w1", "write_file", path=f"first{extra}.txt", content="one\n"),
        call("sh", "run_shell", cmd=LONG),
        call("w2", "write_file", path=f"never{extra}.txt", content="two\n"),
    ]


def _start_and_wait(c: Client, started: threading.Event, turn: str) -> str:
    """Journal, plan and execute the batch; return once the command is running."""
    journaled = c.call("journal_calls", {"calls": _batch(), "turn": turn})
    plan = c.call("plan", {"batch_id": journaled["batch_id"]})
    assert plan["batch_id"] == journaled["batch_id"]
    c.call_async(
        "execute", {"batch_id": plan["batch_id"], "approved": ["w1", "sh", "w2"], "turn": turn}
    )
    assert started.wait(HANG)
    return str(plan["batch_id"])


def _on_started(started: threading.Event) -> Any:
    def on_event(event: dict[str, Any]) -> None:
        if event["call_id"] == "sh" and event["kind"] == "started":
            started.set()

    return on_event


def _wait_for_line(path: Path) -> None:
    for _ in range(400):
        if path.exists() and path.read_text():
            return
        threading.Event().wait(0.025)
    raise AssertionError(f"{path} never got its line")


def test_fr_res_05_killed_worker_reports_completed_running_and_never_started(
    project: Path, tmp_path: Path
) -> None:
    state = tmp_path / "state"
    started = threading.Event()
    with (
        WorkerProcess(project, state_dir=state) as proc,
        Client(proc.port, on_event=_on_started(started)) as c,
    ):
        c.call("hello", {"token": proc.token})
        batch_id = _start_and_wait(c, started, "turn-1")
        _wait_for_line(project / "ran.log")
        proc.proc.kill()  # SIGKILL: no chance to record anything more
        proc.proc.wait()
    assert (project / "first.txt").read_text() == "one\n"
    assert not (project / "never.txt").exists()

    with WorkerProcess(project, state_dir=state) as proc, Client(proc.port) as c:
        hello = c.call("hello", {"token": proc.token})
        (report,) = hello["unfinished"]
        assert report["batch_id"] == batch_id
        assert report["turn"] == "turn-1"
        assert report["state"] == "executing"
        assert "stopped while the batch was running" in report["reason"]
        states = [(e["id"], e["state"]) for e in report["calls"]]
        assert states == [("w1", "completed"), ("sh", "running"), ("w2", "never-started")]
        first, running, never = report["calls"]
        assert first["result"]["ok"] is True
        assert first["result"]["result"]["created"] is True
        assert first["files_changed"] == ["first.txt"]
        assert running["result"]["error"]["details"]["interrupted"] is True
        assert "not run again" in running["result"]["error"]["message"]
        assert never["call"] == _batch()[2]
        assert "result" not in never
        # Still reported until resolved, by any number of hellos.
        assert c.call("hello", {"token": proc.token})["unfinished"] == [report]

        resolved = c.call("resolve_batch", {"batch_id": batch_id, "action": "resume"})
        assert [r["id"] for r in resolved["results"]] == ["w1", "sh"]
        assert resolved["remaining"] == [_batch()[2]]
        assert resolved["turn"] == "turn-1"
        assert c.call("hello", {"token": proc.token})["unfinished"] == []
        with pytest.raises(Exception, match="not an unfinished batch"):
            c.call("resolve_batch", {"batch_id": batch_id, "action": "discard"})
        # Resuming hands the calls back; it runs nothing.  The client plans them
        # anew, and they go through planning (and review) like any new call.
        replanned = c.call("plan", {"calls": resolved["remaining"], "turn": "turn-1"})
        assert replanned["items"][0]["disposition"] == "confirm"
    # Nothing ran again: one start of the command, the third call never ran.
    threading.Event().wait(0.3)
    assert (project / "ran.log").read_text() == "started\n"
    assert not (project / "never.txt").exists()


def test_fr_res_05_client_gone_mid_batch_is_reported_after_restart(
    project: Path, tmp_path: Path
) -> None:
    """Emacs dies: the worker cancels the batch and stops; the results never reached it."""
    state = tmp_path / "state"
    started = threading.Event()
    proc = WorkerProcess(project, state_dir=state)
    try:
        with Client(proc.port, on_event=_on_started(started)) as c:
            c.call("hello", {"token": proc.token})
            batch_id = _start_and_wait(c, started, "t")
            _wait_for_line(project / "ran.log")
        # The client is gone; so is the parent's end of the worker's stdin.
        assert proc.stop(timeout=HANG) == 0
    finally:
        proc.stop()

    with WorkerProcess(project, state_dir=state) as proc2, Client(proc2.port) as c:
        (report,) = c.call("hello", {"token": proc2.token})["unfinished"]
        assert report["batch_id"] == batch_id
        assert "never reached the client" in report["reason"]
        first, cmd, never = report["calls"]
        assert first["state"] == "completed" and first["result"]["ok"]
        # The command was stopped mid-way: it has its (cancelled) result.
        assert cmd["state"] == "completed"
        assert cmd["result"]["error"]["type"] == "cancelled"
        assert never["state"] == "never-started"
        resolved = c.call("resolve_batch", {"batch_id": batch_id, "action": "discard"})
        assert "remaining" not in resolved
        assert [r["id"] for r in resolved["results"]] == ["w1", "sh", "w2"]
        assert resolved["results"][2]["error"]["details"]["discarded"] is True
        assert c.call("hello", {"token": proc2.token})["unfinished"] == []
    assert (project / "ran.log").read_text() == "started\n"
    assert not (project / "never.txt").exists()


def test_fr_res_04a_journaled_calls_are_recovered_even_if_never_planned(
    make_worker: MakeWorker,
) -> None:
    note = Note()
    worker = make_worker(extra_tools=[note])
    calls = [call("a", "note", text="x"), {"id": "b", "name": "note", "args": {"text": 1}}]
    batch_id = worker.journal_calls({"calls": calls, "turn": "t1"})["batch_id"]
    # The worker dies before planning; a new one starts on the same journal.
    again = make_worker(extra_tools=[Note()])
    (report,) = again.hello_payload({})["unfinished"]
    assert report["batch_id"] == batch_id
    assert [c["state"] for c in report["calls"]] == ["never-started", "never-started"]
    assert [c["call"] for c in report["calls"]] == calls
    assert "before planning" in report["reason"]
    # The dead worker's journaled batch cannot be planned by the new one.
    with pytest.raises(ProtocolError, match="no journaled batch"):
        again.plan({"batch_id": batch_id})
    assert note.runs == []


def test_plan_of_a_journaled_batch_checks_its_calls_and_runs_once(
    make_worker: MakeWorker,
) -> None:
    worker = make_worker()
    calls = [call("r", "read_file", path="README.md")]
    batch_id = worker.journal_calls({"calls": calls})["batch_id"]
    with pytest.raises(ProtocolError, match="differ from those journaled"):
        worker.plan({"batch_id": batch_id, "calls": [call("x", "read_file", path="nope")]})
    plan = worker.plan({"batch_id": batch_id, "calls": calls})
    with pytest.raises(ProtocolError, match="already planned"):
        worker.plan({"batch_id": batch_id})
    result = worker.execute({"batch_id": plan["batch_id"]}, lambda e: None)
    assert result["results"][0]["ok"] is True
    with pytest.raises(ProtocolError, match="calls"):
        worker.plan({})
    # Plans without journal_calls keep working (older clients).
    assert worker.plan({"calls": calls})["items"][0]["disposition"] == "execute"


def test_delivered_batches_are_not_reported_and_undelivered_ones_are(
    make_worker: MakeWorker,
) -> None:
    worker = make_worker()
    seen = worker.plan({"calls": [call("r", "read_file", path="README.md")]})
    reply = worker.execute({"batch_id": seen["batch_id"]}, lambda e: None)
    assert reply.on_sent is not None
    reply.on_sent()  # what the transport does once the reply is on the socket
    lost = worker.plan({"calls": [call("r", "read_file", path="README.md")]})
    worker.execute({"batch_id": lost["batch_id"]}, lambda e: None)
    # The worker's own batches are never "unfinished" to itself.
    assert worker.hello_payload({})["unfinished"] == []
    again = make_worker()
    reported = [r["batch_id"] for r in again.hello_payload({})["unfinished"]]
    assert reported == [lost["batch_id"]]
    (report,) = again.hello_payload({})["unfinished"]
    assert report["calls"][0]["state"] == "completed"
    assert json.loads(json.dumps(report)) == report


def test_a_live_worker_batches_are_not_reported_to_another(project: Path, tmp_path: Path) -> None:
    """Two workers on one project (two Emacs sessions): neither recovers the other's work."""
    state = tmp_path / "state"
    with WorkerProcess(project, state_dir=state) as a, Client(a.port) as ca:
        ca.call("hello", {"token": a.token})
        ca.call("journal_calls", {"calls": [call("r", "read_file", path="README.md")]})
        with WorkerProcess(project, state_dir=state) as b, Client(b.port) as cb:
            assert cb.call("hello", {"token": b.token})["unfinished"] == []


def test_fr_res_05_a_killed_worker_not_yet_reaped_counts_as_dead() -> None:
    """A zombie keeps its pid and start time; recovery must not take it for a live worker."""
    import os
    import signal
    import subprocess
    import time

    from forj_py.store.journal import _start_time, alive_elsewhere

    child = subprocess.Popen(["sleep", "60"])
    try:
        identity = f"{child.pid}:{_start_time(child.pid)}:test"
        assert alive_elsewhere(identity)
        os.kill(child.pid, signal.SIGKILL)
        # Not reaped: wait until the kernel shows it as a zombie.
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            state = Path(f"/proc/{child.pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
            if state == "Z":
                break
            time.sleep(0.01)
        assert state == "Z"
        assert not alive_elsewhere(identity)
    finally:
        child.kill()
        child.wait()
