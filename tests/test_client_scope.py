"""One client cannot widen another's consent: grants and read records stay with their owner.

A real worker (``python -m forj_py``, as Emacs starts it) is driven over
real EPC connections: one proving the token (Emacs, the user) and others
proving the rendezvous secret (forj's MCP server, another agent).  A grant
an MCP connection gives holds for that connection only, and one for every
chat of the project is the user's alone; what one chat read is not read
for another chat, another connection, or the same client connecting again.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import call

from forj_py.store.grants import GrantStore
from forj_py.transport import rendezvous
from forj_py.transport.client import Client, RemoteError, WorkerProcess

EDIT = call("e", "edit", path="src/main.py", old_string="line 7\n", new_string="line seven\n")
READ = call("r", "read_file", path="src/main.py")


@pytest.fixture
def home(tmp_path: Path) -> Path:
    h = tmp_path / "home"
    (h / "state").mkdir(parents=True)
    (h / "config.toml").write_text("", encoding="utf-8")
    return h


@pytest.fixture
def proc(project: Path, home: Path) -> Iterator[WorkerProcess]:
    with WorkerProcess(project, config=home / "config.toml", state_dir=home / "state") as p:
        yield p


def secret_of(project: Path, home: Path) -> str:
    path = rendezvous.path_for(home / "state", os.path.realpath(project))
    return str(json.loads(path.read_text())["secret"])


def emacs(proc: WorkerProcess, **kw: Any) -> Client:
    c = Client(proc.port, **kw)
    c.call("hello", {"token": proc.token, "client": {"name": "forj.el"}})
    return c


def mcp(proc: WorkerProcess, project: Path, home: Path) -> Client:
    c = Client(proc.port)
    c.call("hello", {"token": secret_of(project, home), "client": {"name": "forj mcp"}})
    return c


def run(client: Client, *calls: dict[str, Any], **execute: Any) -> dict[str, Any]:
    """Plan then execute ``calls`` (``session`` goes with the plan); the execute reply."""
    session = execute.pop("session", None)
    body: dict[str, Any] = {"calls": list(calls)}
    if session is not None:
        body["session"] = session
    plan = client.call("plan", body)
    reply: dict[str, Any] = client.call("execute", {"batch_id": plan["batch_id"], **execute})
    reply["plan"] = plan
    return reply


def disposition(client: Client, one: dict[str, Any], session: str | None = None) -> str:
    body: dict[str, Any] = {"calls": [one]}
    if session is not None:
        body["session"] = session
    return str(client.call("plan", body)["items"][0]["disposition"])


def write(name: str) -> dict[str, Any]:
    return call("w", "write_file", path=f"src/{name}", content="x\n")


def not_read(result: dict[str, Any]) -> bool:
    return not result["ok"] and "was not read in this session" in result["error"]["message"]


def set_config(home: Path, text: str) -> None:
    (home / "config.toml").write_text(text, encoding="utf-8")


# --- grants ----------------------------------------------------------------------------


@pytest.mark.parametrize("pattern", [None, "write_file(src/**)", "write_file"])
def test_attack_an_mcp_connection_cannot_give_itself_a_project_grant(
    proc: WorkerProcess, project: Path, home: Path, pattern: str | None
) -> None:
    grant: dict[str, Any] = {"scope": "project"}
    if pattern:
        grant["pattern"] = pattern
    with emacs(proc) as user, mcp(proc, project, home) as agent:
        plan = agent.call("plan", {"calls": [write("a.py")]})
        assert plan["items"][0]["disposition"] == "confirm"
        with pytest.raises(RemoteError, match="not-allowed") as refused:
            agent.call(
                "execute",
                {"batch_id": plan["batch_id"], "approved": ["w"], "grants": {"w": grant}},
            )
        assert "the user's to give, in Emacs" in refused.value.error["message"]
        assert not (project / "src/a.py").exists()
        # Nothing was stored: Emacs's own later writes are still reviewed.
        assert user.call("grants", {})["grants"] == []
        assert disposition(user, write("b.py"), "chat-1") == "confirm"
    store = GrantStore(home / "state", os.path.realpath(project), lambda: 0.0)
    assert store.active() == []
    assert not store.path.exists()


def test_attack_an_mcp_session_grant_holds_for_its_connection_and_ends_with_it(
    proc: WorkerProcess, project: Path, home: Path
) -> None:
    touch = call("t", "run_shell", cmd=["touch", "made.txt"])
    with emacs(proc) as user:
        with mcp(proc, project, home) as agent:
            done = run(agent, touch, approved=["t"], grants={"t": {"scope": "session"}})
            assert done["results"][0]["ok"], done
            assert done["grants"][0]["scope"] == "session"
            # Its own connection: the next such call runs unasked.
            assert disposition(agent, touch) == "execute"
            # Emacs's chats, even one named as the MCP connection's chat,
            # and another MCP connection, are still asked.
            assert disposition(user, touch) == "confirm"
            assert disposition(user, touch, "chat-1") == "confirm"
            assert disposition(user, touch, done["grants"][0]["session"]) == "confirm"
            with mcp(proc, project, home) as other:
                assert disposition(other, touch) == "confirm"
            assert len(user.call("grants", {})["grants"]) == 1
        # The connection closed: its grant is gone, and the same client
        # connecting again starts with none.
        assert user.call("grants", {})["grants"] == []
        with mcp(proc, project, home) as again:
            assert disposition(again, touch) == "confirm"


def test_attack_an_mcp_server_cannot_ask_a_review_of_an_emacs_batch(
    proc: WorkerProcess, project: Path, home: Path
) -> None:
    with emacs(proc) as user, mcp(proc, project, home) as agent:
        theirs = user.call("plan", {"calls": [write("a.py")], "session": "chat-1"})
        with pytest.raises(RemoteError, match="not-allowed"):
            agent.call("review", {"batch_id": theirs["batch_id"], "call_id": "w"})
        with pytest.raises(RemoteError, match="not-allowed"):
            agent.call(
                "execute",
                {
                    "batch_id": theirs["batch_id"],
                    "approved": ["w"],
                    "grants": {"w": {"scope": "session"}},
                },
            )
        assert not (project / "src/a.py").exists()


def test_attack_an_mcp_server_cannot_plan_a_batch_emacs_journaled(
    proc: WorkerProcess, project: Path, home: Path
) -> None:
    with emacs(proc) as user, mcp(proc, project, home) as agent:
        journaled = user.call("journal_calls", {"calls": [write("a.py")]})
        with pytest.raises(RemoteError, match="not-allowed"):
            agent.call("plan", {"batch_id": journaled["batch_id"]})
        # The chat's batch is still the chat's to plan.
        plan = user.call("plan", {"batch_id": journaled["batch_id"], "session": "chat-1"})
        assert plan["items"][0]["disposition"] == "confirm"


def _reviewer(grant: dict[str, Any]) -> Any:
    """Emacs's side of a review: approve, giving ``grant``."""

    def answer(method: str, body: Any) -> Any:
        assert method == "review"
        return {"decision": "approve", "grant": grant}

    return answer


def test_attack_an_mcp_server_forwards_only_the_project_grant_the_user_gave_in_emacs(
    project: Path, home: Path
) -> None:
    set_config(home, "[mcp]\nreview_in_emacs = true\n")
    given = {"scope": "project", "pattern": "write_file(src/a.py)"}
    with (
        WorkerProcess(project, config=home / "config.toml", state_dir=home / "state") as p,
        emacs(p, on_request=_reviewer(given)) as user,
        mcp(p, project, home) as agent,
    ):
        # The user said "always, for src/a.py"; the MCP server forwards a
        # wider rule, or a project grant for a call the user never saw.
        plan = agent.call("plan", {"calls": [write("a.py")]})
        asked = agent.call("review", {"batch_id": plan["batch_id"], "call_id": "w"})
        assert asked == {"outcome": "approved", "modified": {}, "grant": given}
        for forged in ({"scope": "project", "pattern": "write_file(src/**)"}, {"scope": "project"}):
            with pytest.raises(RemoteError, match="not-allowed"):
                agent.call(
                    "execute",
                    {"batch_id": plan["batch_id"], "approved": ["w"], "grants": {"w": forged}},
                )
        unasked = agent.call("plan", {"calls": [write("b.py")]})
        with pytest.raises(RemoteError, match="not-allowed"):
            agent.call(
                "execute",
                {"batch_id": unasked["batch_id"], "approved": ["w"], "grants": {"w": given}},
            )
        assert user.call("grants", {})["grants"] == []
        # Exactly what the user gave is taken: it is the user's, for every chat.
        done = agent.call(
            "execute", {"batch_id": plan["batch_id"], "approved": ["w"], "grants": {"w": given}}
        )
        assert done["results"][0]["ok"], done
        listed = user.call("grants", {})["grants"]
        assert [(g["rule"], g["scope"]) for g in listed] == [("write_file(src/a.py)", "project")]
        # A file this chat never read would be refused as stale before any
        # grant counts: the grant is checked on creating it again.
        (project / "src/a.py").unlink()
        assert disposition(user, write("a.py"), "chat-1") == "execute"


def test_attack_a_stray_entry_in_the_grants_file_is_never_project_wide(
    project: Path, home: Path
) -> None:
    # A grants file holding a session or timed grant of some chat, or a
    # "project" grant naming a connection (forj writes none of them):
    # after a restart, none may cover any chat's calls.
    store = GrantStore(home / "state", os.path.realpath(project), lambda: 0.0)
    store.path.parent.mkdir(parents=True, exist_ok=True)
    base = {"created_at": 0.0, "expires_at": None, "network": False, "session": None}
    entries = [
        {**base, "id": "g-1", "rule": "write_file(src/a.py)", "scope": "session", "session": "c"},
        {**base, "id": "g-2", "rule": "write_file(src/b.py)", "scope": "minutes"},
        {**base, "id": "g-4", "rule": "write_file(src/d.py)", "scope": "project"},
    ]
    store.path.write_text(json.dumps({"root": store.root, "grants": entries}))
    with (
        WorkerProcess(project, config=home / "config.toml", state_dir=home / "state") as p,
        emacs(p) as user,
    ):
        for name in ("a.py", "b.py"):
            assert disposition(user, write(name), "c") == "confirm", name
        # A project grant as forj writes it holds.
        assert disposition(user, write("d.py"), "c") == "execute"
        assert [g["id"] for g in user.call("grants", {})["grants"]] == ["g-4"]
        owned = {**base, "id": "g-3", "rule": "write_file(src/c.py)", "scope": "project"}
        owned["owner"] = "conn-1-abc"
        store.path.write_text(json.dumps({"root": store.root, "grants": [*entries, owned]}))
        assert disposition(user, write("c.py"), "c") == "confirm"
        assert disposition(user, write("d.py"), "c") == "execute"


# --- read records ------------------------------------------------------------------------


def test_attack_a_file_one_chat_read_is_not_read_for_another_chat(
    project: Path, home: Path
) -> None:
    set_config(home, '[permissions]\nallow = ["edit(src/**)"]\n')
    with (
        WorkerProcess(project, config=home / "config.toml", state_dir=home / "state") as p,
        emacs(p) as user,
    ):
        assert run(user, READ, session="chat-a")["results"][0]["ok"]
        assert not_read(run(user, EDIT, session="chat-b")["results"][0])
        assert not_read(run(user, EDIT)["results"][0])
        assert "line 7\n" in (project / "src/main.py").read_text()
        assert run(user, EDIT, session="chat-a")["results"][0]["ok"]


def test_attack_an_edit_by_one_chat_makes_the_file_stale_for_another(
    project: Path, home: Path
) -> None:
    set_config(home, '[permissions]\nallow = ["edit(src/**)"]\n')
    with (
        WorkerProcess(project, config=home / "config.toml", state_dir=home / "state") as p,
        emacs(p) as user,
    ):
        for chat in ("chat-a", "chat-b"):
            assert run(user, READ, session=chat)["results"][0]["ok"]
        assert run(user, EDIT, session="chat-a")["results"][0]["ok"]
        other = call("e2", "edit", path="src/main.py", old_string="line 8\n", new_string="8\n")
        result = run(user, other, session="chat-b")["results"][0]
        assert not result["ok"]
        assert result["error"]["message"] in (
            "src/main.py changed since it was last read; read it again before changing it",
            "src/main.py was not read in this session; read it before changing it",
        )


def test_attack_a_second_client_replaying_emacss_chat_id_gets_no_reads(
    project: Path, home: Path
) -> None:
    set_config(home, '[permissions]\nallow = ["edit(src/**)"]\n')
    with (
        WorkerProcess(project, config=home / "config.toml", state_dir=home / "state") as p,
        emacs(p) as user,
    ):
        assert run(user, READ, session="chat-1")["results"][0]["ok"]
        # forj's MCP server (the secret), naming Emacs's chat.
        with mcp(p, project, home) as agent:
            assert not_read(run(agent, EDIT, session="chat-1")["results"][0])
        # Another connection with the token, naming the same chat.
        with emacs(p) as second:
            assert not_read(run(second, EDIT, session="chat-1")["results"][0])
        assert "line 7\n" in (project / "src/main.py").read_text()
        assert run(user, EDIT, session="chat-1")["results"][0]["ok"]


def test_attack_an_mcp_client_connecting_again_starts_with_no_reads(
    project: Path, home: Path
) -> None:
    set_config(home, '[permissions]\nallow = ["edit(src/**)"]\n')
    with (
        WorkerProcess(project, config=home / "config.toml", state_dir=home / "state") as p,
        emacs(p) as user,
    ):
        with mcp(p, project, home) as agent:
            assert run(agent, READ)["results"][0]["ok"]
        with mcp(p, project, home) as again:
            assert not_read(run(again, EDIT)["results"][0])
        # Nor does Emacs inherit what the MCP client read.
        assert not_read(run(user, EDIT, session="chat-1")["results"][0])
        assert not_read(run(user, EDIT)["results"][0])
        assert "line 7\n" in (project / "src/main.py").read_text()


def test_a_read_record_does_not_survive_the_worker(project: Path, home: Path) -> None:
    # Read records live in the worker's memory, per connection: neither a
    # restart nor the journal's recovery brings one back.
    set_config(home, '[permissions]\nallow = ["edit(src/**)"]\n')
    with (
        WorkerProcess(project, config=home / "config.toml", state_dir=home / "state") as p,
        emacs(p) as user,
    ):
        assert run(user, READ, session="chat-1")["results"][0]["ok"]
    with (
        WorkerProcess(project, config=home / "config.toml", state_dir=home / "state") as p,
        emacs(p) as user,
    ):
        assert not_read(run(user, EDIT, session="chat-1")["results"][0])
