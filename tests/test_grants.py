"""Standing grants and the review timeout, through the real worker and over the wire."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

import pytest
from conftest import call, user_config
from consent_helpers import Clock, Workers, error_of, execute, kinds, plan, workers

from forj_py.errors import ProtocolError
from forj_py.service import Worker
from forj_py.transport.client import Client, WorkerProcess

__all__ = ["workers"]


def touch(name: str) -> dict[str, Any]:
    return call(name, "run_shell", cmd=["touch", f"{name}.txt"])


def approve(worker: Worker, reply: dict[str, Any], **grants: Any) -> dict[str, Any]:
    ids = [i["id"] for i in reply["items"] if i["disposition"] == "confirm"]
    return execute(worker, reply, approved=ids, grants=grants)


def test_fr_grant_01_once_is_never_cached(workers: Workers, project: Path) -> None:
    worker = workers()
    first = plan(worker, touch("a"), session="s")
    done = approve(worker, first, a={"scope": "once"})
    assert done["results"][0]["ok"] and done["grants"] == []
    assert kinds(plan(worker, touch("a"), session="s")) == ["confirm"]
    assert worker.grants({})["grants"] == []


def test_fr_grant_02_a_session_grant_covers_matching_calls_of_that_chat_only(
    workers: Workers, project: Path
) -> None:
    worker = workers()
    first = plan(worker, touch("a"), session="s1")
    assert first["items"][0]["grant_pattern"] == "run_shell(touch *)"
    done = approve(worker, first, a={"scope": "session"})
    assert done["grants"][0]["rule"] == "run_shell(touch *)"
    assert done["grants"][0]["scope"] == "session" and done["grants"][0]["network"] is False
    again = plan(worker, touch("b"), call("rm", "run_shell", cmd=["rm", "a.txt"]), session="s1")
    assert kinds(again) == ["execute", "confirm"]
    assert again["items"][0]["reason"].startswith("runs: standing grant g-")
    ran = execute(worker, again)
    assert ran["results"][0]["ok"] and (project / "b.txt").exists()
    assert (project / "a.txt").exists()  # the rm was not approved
    assert kinds(plan(worker, touch("c"), session="s2")) == ["confirm"]
    assert kinds(plan(worker, touch("c"))) == ["confirm"]


def test_fr_grant_03_a_timed_grant_expires(workers: Workers) -> None:
    clock = Clock()
    worker = workers(clock)
    approve(worker, plan(worker, touch("a"), session="s"), a={"scope": "minutes", "minutes": 30})
    clock.advance(29 * 60)
    assert kinds(plan(worker, touch("b"), session="s")) == ["execute"]
    clock.advance(2 * 60)
    assert kinds(plan(worker, touch("c"), session="s")) == ["confirm"]
    assert worker.grants({"session": "s"})["grants"] == []


def test_fr_grant_04_a_project_grant_is_kept_outside_the_project_listed_and_revoked(
    workers: Workers, project: Path
) -> None:
    worker = workers()
    done = approve(
        worker,
        plan(worker, call("w", "write_file", path="src/a.py", content="a\n"), session="s"),
        w={"scope": "project", "pattern": "write_file(src/**)"},
    )
    grant_id = done["grants"][0]["id"]
    # A new worker (another chat, a restart) finds it.
    other = workers()
    assert [g["id"] for g in other.grants({})["grants"]] == [grant_id]
    reply = plan(other, call("w2", "write_file", path="src/b.py", content="b\n"), session="x")
    assert kinds(reply) == ["execute"]
    files = list(Path(os.environ["FORJ_STATE_DIR"]).glob("grants/*.json"))
    assert len(files) == 1 and stat.S_IMODE(files[0].stat().st_mode) == 0o600
    assert json.loads(files[0].read_text())["root"] == str(project.resolve())
    assert not any("grant" in p.name for p in project.rglob("*"))
    assert other.revoke_grant({"id": grant_id}) == {"revoked": True}
    assert kinds(plan(worker, call("w3", "write_file", path="src/c.py", content="c\n"))) == [
        "confirm"
    ]
    with pytest.raises(ProtocolError, match="no grant"):
        other.revoke_grant({"id": grant_id})


def test_fr_grant_05_a_grant_must_cover_the_call_it_approves(workers: Workers) -> None:
    worker = workers()
    reply = plan(worker, touch("a"))
    with pytest.raises(ProtocolError, match="does not cover"):
        approve(worker, reply, a={"scope": "session", "pattern": "run_shell(rm *)"})
    with pytest.raises(ProtocolError, match="no minutes"):
        approve(worker, reply, a={"scope": "minutes"})
    with pytest.raises(ProtocolError, match="not an approved"):
        execute(worker, reply, grants={"a": {"scope": "session"}})
    # Nothing ran and nothing was granted: the batch can still be answered.
    assert approve(worker, reply)["results"][0]["ok"]
    assert worker.grants({})["grants"] == []


def test_fr_grant_06_a_grant_without_network_never_covers_a_network_call(
    workers: Workers,
) -> None:
    user_config('[permissions]\nnetwork = ["run_shell(curl *)"]\n')
    worker = workers()
    approve(
        worker,
        plan(worker, call("c", "run_shell", cmd=["curl", "-V"]), session="s"),
        c={"scope": "session", "pattern": "run_shell(curl *)"},
    )
    assert worker.grants({})["grants"][0]["network"] is False
    net = call("n", "run_shell", cmd=["curl", "-V"], allow_network=True)
    assert kinds(plan(worker, net, session="s")) == ["confirm"]
    approve(worker, plan(worker, net, session="s"), n={"scope": "session"})
    assert [g["network"] for g in worker.grants({})["grants"]] == [False, True]
    assert kinds(plan(worker, net, session="s")) == ["execute"]


def test_fr_grant_07_an_unanswered_review_past_the_timeout_is_a_denial(
    workers: Workers, project: Path
) -> None:
    user_config("[permissions]\npermission_timeout_seconds = 60\n")
    clock = Clock()
    worker = workers(clock)
    reply = plan(worker, touch("late"), call("r", "read_file", path="README.md"))
    assert reply["review_timeout_seconds"] == 60
    clock.advance(61)
    done = approve(worker, reply, late={"scope": "session"})
    error = error_of(done["results"][0])
    assert error["details"]["timed_out"] is True
    assert "Nobody answered the review within 60 s" in error["message"]
    assert done["results"][1]["ok"]  # what needed no review still runs
    assert not (project / "late.txt").exists()
    assert worker.grants({})["grants"] == []
    on_time = plan(worker, touch("ok"))
    clock.advance(59)
    assert approve(worker, on_time)["results"][0]["ok"]


def test_fr_grant_08_grants_and_modes_over_the_wire(project: Path) -> None:
    with WorkerProcess(project) as proc, Client(proc.port) as client:
        hello = client.call("hello", {"token": proc.token, "client": {"name": "pytest"}})
        assert hello["permissions"]["mode"] == "ask"
        names = {
            t["name"]
            for t in client.call("tool_definitions", {"permission_mode": "read-only"})["tools"]
        }
        assert "write_file" not in names and "read_file" in names
        assert "write_file" in {t["name"] for t in client.call("tool_definitions", {})["tools"]}
        reply = client.call("plan", {"calls": [touch("w")], "session": "chat", "turn": "t1"})
        assert reply["items"][0]["grant_pattern"] == "run_shell(touch *)"
        done = client.call(
            "execute",
            {
                "batch_id": reply["batch_id"],
                "approved": ["w"],
                "grants": {"w": {"scope": "session"}},
            },
        )
        assert done["results"][0]["ok"]
        listed = client.call("grants", {"session": "chat"})["grants"]
        assert [g["rule"] for g in listed] == ["run_shell(touch *)"]
        assert client.call("revoke_grant", {"id": listed[0]["id"]}) == {"revoked": True}
        assert client.call("grants", {})["grants"] == []
