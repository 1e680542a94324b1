"""The MCP server joins the project's running worker, or runs its own.

A real worker (``python -m forj_py``, as Emacs starts it) publishes its
rendezvous file; ``python -m forj_py mcp`` is driven by the MCP SDK's own
client over stdio and must send its calls through that worker.  The file
is the key to the worker: its mode, owner and kind are checked, and a
process without the secret gets nothing.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import sqlite3
import sys
import time
from pathlib import Path
from typing import Any

import anyio
import pytest

pytest.importorskip("mcp")

import mcp_types as types
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

from forj_py.store.journal import _start_time
from forj_py.transport import rendezvous
from forj_py.transport.client import Client, RemoteError, WorkerProcess


@pytest.fixture
def home(tmp_path: Path) -> Path:
    h = tmp_path / "home"
    (h / "state").mkdir(parents=True)
    (h / "config.toml").write_text("", encoding="utf-8")
    return h


def mcp_session(project: Path, home: Path, scenario: Any) -> Any:
    """Run ``scenario(session)`` against ``forj_py mcp`` for ``project``; its value."""
    params = StdioServerParameters(
        command=sys.executable,
        args=[
            "-m",
            "forj_py",
            "mcp",
            "--root",
            str(project),
            "--config",
            str(home / "config.toml"),
            "--state-dir",
            str(home / "state"),
            "--log-level",
            "INFO",
        ],
        cwd=str(project),
    )

    async def run() -> Any:
        with (home / "mcp-stderr.log").open("a") as errlog:
            async with (
                stdio_client(params, errlog=errlog) as (read, write),
                ClientSession(read, write) as session,
            ):
                await session.initialize()
                with anyio.fail_after(60):
                    return await scenario(session)

    return anyio.run(run)


def payload(result: types.CallToolResult) -> Any:
    assert result.content and isinstance(result.content[0], types.TextContent)
    return json.loads(result.content[0].text)


def worker_for(project: Path, home: Path) -> WorkerProcess:
    return WorkerProcess(project, config=home / "config.toml", state_dir=home / "state")


def rendezvous_file(project: Path, home: Path) -> Path:
    return rendezvous.path_for(home / "state", os.path.realpath(project))


def journal_workers(home: Path) -> list[tuple[str, str]]:
    """(tool name, identity of the worker that planned it) of every journaled call."""
    with sqlite3.connect(home / "state" / "journal.sqlite3") as db:
        return db.execute(
            "SELECT c.name, b.worker FROM calls c JOIN batches b USING (batch_id) "
            "ORDER BY b.created_at"
        ).fetchall()


async def read_then_edit(session: ClientSession) -> tuple[Any, Any]:
    read = await session.call_tool("read_file", {"path": "src/main.py"})
    edit = await session.call_tool(
        "edit", {"path": "src/main.py", "old_string": "line 7\n", "new_string": "line seven\n"}
    )
    return read, edit


def test_fr_mcp_08_the_running_worker_publishes_a_private_rendezvous(
    project: Path, home: Path
) -> None:
    path = rendezvous_file(project, home)
    with worker_for(project, home) as proc:
        st = path.lstat()
        assert oct(st.st_mode & 0o777) == oct(0o600)
        assert st.st_uid == os.geteuid()
        data = json.loads(path.read_text())
        assert data["port"] == proc.port
        assert data["root"] == os.path.realpath(project)
        assert data["identity"].startswith(f"{proc.proc.pid}:")
        assert len(data["secret"]) == 64 and data["secret"] != proc.token
        assert oct(path.parent.stat().st_mode & 0o777) == oct(0o700)
    assert not path.exists(), "the worker removes its rendezvous when it stops"


def test_fr_mcp_09_mcp_calls_go_through_the_running_worker(project: Path, home: Path) -> None:
    (home / "config.toml").write_text('[permissions]\nallow = ["edit(src/**)"]\n')
    with worker_for(project, home) as proc, Client(proc.port) as emacs:
        emacs.call("hello", {"token": proc.token})
        read, edit = mcp_session(project, home, read_then_edit)
        assert read.is_error is False and edit.is_error is False, payload(edit)
        assert "line seven\n" in (project / "src/main.py").read_text()
        # The worker planned both calls: the journal names it, not the MCP process.
        planned_by = {name: who for name, who in journal_workers(home)}
        assert planned_by["read_file"].startswith(f"{proc.proc.pid}:")
        assert planned_by["edit"].startswith(f"{proc.proc.pid}:")
        # Each conversation has its own record of reads: what the MCP client
        # read is not read for Emacs's chat, which reads it itself first.
        edit = {
            "id": "e1",
            "name": "edit",
            "args": {"path": "src/main.py", "old_string": "line seven\n", "new_string": "line 7\n"},
        }
        read = {"id": "r1", "name": "read_file", "args": {"path": "src/main.py"}}
        for calls, ok in (([edit], False), ([read, edit], True)):
            plan = emacs.call("plan", {"calls": calls, "session": "chat-1"})
            done = emacs.call("execute", {"batch_id": plan["batch_id"]})
            assert done["results"][-1]["ok"] is ok, done
        assert "line 7\n" in (project / "src/main.py").read_text()
    assert "joined the worker" in (home / "mcp-stderr.log").read_text()


def test_fr_mcp_10_without_a_running_worker_the_server_runs_its_own(
    project: Path, home: Path
) -> None:
    (home / "config.toml").write_text('[permissions]\nallow = ["edit(src/**)"]\n')
    assert not rendezvous_file(project, home).exists()
    read, edit = mcp_session(project, home, read_then_edit)
    assert read.is_error is False and edit.is_error is False, payload(edit)
    assert "line seven\n" in (project / "src/main.py").read_text()
    assert [name for name, _ in journal_workers(home)] == ["read_file", "edit"]
    log = (home / "mcp-stderr.log").read_text()
    assert "running a worker of my own" in log


def test_fr_mcp_11_a_stale_rendezvous_is_removed_and_ignored(project: Path, home: Path) -> None:
    with worker_for(project, home) as proc:
        port = proc.port
    # A worker killed before it could clean up leaves its file behind.
    path = rendezvous_file(project, home)
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    dead = {
        "root": os.path.realpath(project),
        "port": port,
        "secret": "0" * 64,
        "identity": f"{proc.proc.pid}:1:gone",
    }
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    os.write(fd, json.dumps(dead).encode())
    os.close(fd)
    assert rendezvous.find(home / "state", os.path.realpath(project)) is None
    assert not path.exists()
    # A live process whose port refuses connections is stale too.
    # (our parent: alive, and another process than this one)
    parent = os.getppid()
    dead["identity"] = f"{parent}:{_start_time(parent)}:test"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    os.write(fd, json.dumps(dead).encode())
    os.close(fd)
    assert rendezvous.find(home / "state", os.path.realpath(project)) is None
    result = mcp_session(project, home, lambda s: s.call_tool("read_file", {"path": "README.md"}))
    assert result.is_error is False


def test_t_sec_mcp_01_a_rendezvous_others_can_read_is_refused(project: Path, home: Path) -> None:
    (home / "config.toml").write_text('[permissions]\nallow = ["edit(src/**)"]\n')
    with worker_for(project, home) as proc:
        path = rendezvous_file(project, home)
        path.chmod(0o644)
        with pytest.raises(rendezvous.RendezvousRefused, match="mode 0644"):
            rendezvous.find(home / "state", os.path.realpath(project))
        _, edit = mcp_session(project, home, read_then_edit)
        assert edit.is_error is False
        # The MCP server refused the file and ran its own worker.
        assert "mode 0644" in (home / "mcp-stderr.log").read_text()
        assert not any(who.startswith(f"{proc.proc.pid}:") for _, who in journal_workers(home))


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a file to another user needs root")
def test_t_sec_mcp_02_a_rendezvous_of_another_user_is_refused(project: Path, home: Path) -> None:
    (home / "config.toml").write_text('[permissions]\nallow = ["edit(src/**)"]\n')
    with worker_for(project, home) as proc:
        path = rendezvous_file(project, home)
        os.chown(path, 4242, -1)
        with pytest.raises(rendezvous.RendezvousRefused, match="belongs to uid 4242"):
            rendezvous.find(home / "state", os.path.realpath(project))
        # The real MCP server refuses it too, and runs its own worker.
        _, edit = mcp_session(project, home, read_then_edit)
        assert edit.is_error is False
        assert "belongs to uid 4242" in (home / "mcp-stderr.log").read_text()
        assert not any(who.startswith(f"{proc.proc.pid}:") for _, who in journal_workers(home))


def test_t_sec_mcp_03_a_link_in_place_of_the_rendezvous_is_refused(
    project: Path, home: Path, tmp_path: Path
) -> None:
    (home / "config.toml").write_text('[permissions]\nallow = ["edit(src/**)"]\n')
    with worker_for(project, home) as proc:
        path = rendezvous_file(project, home)
        real = tmp_path / "elsewhere.json"
        path.rename(real)
        path.symlink_to(real)
        with pytest.raises(rendezvous.RendezvousRefused, match="symbolic link"):
            rendezvous.find(home / "state", os.path.realpath(project))
        # The real MCP server refuses it too, and runs its own worker.
        _, edit = mcp_session(project, home, read_then_edit)
        assert edit.is_error is False
        assert "symbolic link" in (home / "mcp-stderr.log").read_text()
        assert not any(who.startswith(f"{proc.proc.pid}:") for _, who in journal_workers(home))


def test_t_sec_mcp_04_without_the_secret_the_worker_serves_nothing(
    project: Path, home: Path
) -> None:
    with worker_for(project, home) as proc:
        secret = json.loads(rendezvous_file(project, home).read_text())["secret"]
        with Client(proc.port) as stranger:
            with pytest.raises(RemoteError, match="unauthenticated"):
                stranger.call("plan", {"calls": []})
            with pytest.raises(RemoteError, match="unauthenticated"):
                stranger.call("review", {"batch_id": "b", "call_id": "c"})
            with pytest.raises(RemoteError, match="wrong token"):
                stranger.call("hello", {"token": secret[:-1] + "x"})
        # Emacs's own connection may not ask for reviews meant for MCP servers.
        with Client(proc.port) as emacs:
            emacs.call("hello", {"token": proc.token})
            with pytest.raises(RemoteError, match="review is for forj's MCP server"):
                emacs.call("review", {"batch_id": "b", "call_id": "c"})
        with Client(proc.port) as mcp:
            assert mcp.call("hello", {"token": secret})["root"] == os.path.realpath(project)
            # An MCP server runs its calls; the user's undo, grants and the
            # worker's life stay Emacs's.
            for method in ("shutdown", "revoke_grant", "undo", "rewind", "grants"):
                with pytest.raises(RemoteError, match="not-allowed"):
                    mcp.call(method, {})
            assert mcp.call("ping", {}) == {}


def test_fr_mcp_12_each_client_connection_is_a_session_of_its_own(
    project: Path, home: Path
) -> None:
    # Deduplication is per session: a second identical read in one connection
    # is deduplicated, the same read from another connection is not.
    (home / "config.toml").write_text('[tools.dedupe]\ntools = ["read_file"]\n')

    async def read_twice(session: ClientSession) -> list[types.CallToolResult]:
        args = {"path": "README.md"}
        return [await session.call_tool("read_file", args) for _ in range(2)]

    with worker_for(project, home):
        first = mcp_session(project, home, read_twice)
        second = mcp_session(project, home, read_twice)
    for results in (first, second):
        assert results[0].is_error is False
        assert results[1].is_error is True
        assert payload(results[1])["details"]["kind"] == "Deduplicated"


def test_fr_mcp_13_refusal_names_every_way_to_allow_the_call(project: Path, home: Path) -> None:
    (home / "config.toml").write_text("[mcp]\nreview_in_emacs = true\n")
    with worker_for(project, home):
        read, edit = mcp_session(project, home, read_then_edit)
    assert read.is_error is False
    error = payload(edit)
    assert edit.is_error is True
    message = error["message"]
    assert message.startswith("Refused: this call needs the user's review and no reviewer")
    assert "The user denied" not in message
    assert "no Emacs is connected to this project's forj worker" in message
    assert "cannot ask the user (no elicitation)" in message
    assert 'allow = ["edit(src/**)"]' in message
    assert "review_in_emacs" in message and "elicitation" in message
    assert error["details"]["no_reviewer"] is True
    assert error["details"]["code"] == "E_POLICY"
    assert "line 7\n" in (project / "src/main.py").read_text()


def test_fr_mcp_14_a_project_config_cannot_send_reviews_to_emacs(project: Path, home: Path) -> None:
    (project / ".forj").mkdir()
    (project / ".forj" / "config.toml").write_text("[mcp]\nreview_in_emacs = true\n")
    (home / "config.toml").write_text(f'[trust]\nprojects = ["{os.path.realpath(project)}"]\n')
    with worker_for(project, home) as proc, Client(proc.port) as emacs:
        hello = emacs.call("hello", {"token": proc.token})
        assert any("mcp.review_in_emacs" in w for w in hello["warnings"]), hello["warnings"]
        _, edit = mcp_session(project, home, read_then_edit)
    assert "[mcp] review_in_emacs is not set" in payload(edit)["message"]


def _add_project_grants(state_dir: str, root: str, tag: str, count: int) -> None:
    from forj_py.store.grants import GrantStore

    store = GrantStore(Path(state_dir), root, time.time)
    for n in range(count):
        store.add(f"edit(src/{tag}{n}.py)", "project", None, None, False)


def test_fr_mcp_10_two_workers_adding_project_grants_lose_none(project: Path, home: Path) -> None:
    # Emacs's worker and an MCP server's own one, each giving project grants
    # at once: the grants file is changed under a lock, so none is lost.
    root = os.path.realpath(project)
    ctx = multiprocessing.get_context("spawn")
    workers = [
        ctx.Process(target=_add_project_grants, args=(str(home / "state"), root, tag, 40))
        for tag in ("a", "b")
    ]
    for w in workers:
        w.start()
    for w in workers:
        w.join(60)
        assert w.exitcode == 0
    from forj_py.store.grants import GrantStore

    rules = {g.rule for g in GrantStore(home / "state", root, time.time).active()}
    assert len(rules) == 80


def test_t_sec_mcp_05_an_mcp_connection_runs_in_its_own_chat_and_never_looser_than_the_user(
    project: Path, home: Path
) -> None:
    (home / "config.toml").write_text('[permissions]\nmode = "ask"\n')
    with worker_for(project, home) as proc:
        secret = json.loads(rendezvous_file(project, home).read_text())["secret"]
        with Client(proc.port) as emacs, Client(proc.port) as mcp:
            emacs.call("hello", {"token": proc.token})
            mcp.call("hello", {"token": secret})
            write = {"id": "w", "name": "write_file", "args": {"path": "new.txt", "content": "x\n"}}
            # Asking for a looser mode than the user's gets the user's.
            plan = mcp.call("plan", {"calls": [write], "permission_mode": "accept-edits"})
            assert plan["permission_mode"] == "ask"
            assert plan["items"][0]["disposition"] == "confirm"
            # Emacs's batch is not the MCP server's to approve, even after it
            # names Emacs's chat in a plan of its own.
            theirs = emacs.call("plan", {"calls": [write], "session": "chat-1"})
            named = mcp.call("plan", {"calls": [write], "session": "chat-1"})
            with pytest.raises(RemoteError, match="not-allowed"):
                mcp.call("execute", {"batch_id": theirs["batch_id"], "approved": ["w"]})
            assert not (project / "new.txt").exists()
            # Its own batch it may execute.
            done = mcp.call("execute", {"batch_id": named["batch_id"], "approved": ["w"]})
            assert done["results"][0]["ok"], done
            assert (project / "new.txt").read_text() == "x\n"


def test_attack_what_emacs_read_is_not_read_for_an_mcp_client(project: Path, home: Path) -> None:
    (home / "config.toml").write_text('[permissions]\nallow = ["edit(src/**)"]\n')

    async def edit_unread(session: ClientSession) -> Any:
        return await session.call_tool(
            "edit", {"path": "src/main.py", "old_string": "line 7\n", "new_string": "line seven\n"}
        )

    with worker_for(project, home) as proc, Client(proc.port) as emacs:
        emacs.call("hello", {"token": proc.token})
        read = {"id": "r1", "name": "read_file", "args": {"path": "src/main.py"}}
        plan = emacs.call("plan", {"calls": [read], "session": "chat-1"})
        assert emacs.call("execute", {"batch_id": plan["batch_id"]})["results"][0]["ok"]
        edit = mcp_session(project, home, edit_unread)
    assert edit.is_error is True
    assert "was not read in this session" in payload(edit)["message"]
    assert "line 7\n" in (project / "src/main.py").read_text()


class EmacsApproving:
    """Emacs's side of reviews: approve every one, with ``grant``; count them."""

    def __init__(self, grant: dict[str, Any]) -> None:
        self.grant = grant
        self.asked = 0

    def __call__(self, method: str, body: Any) -> Any:
        assert method == "review" and body["client"].startswith("mcp")
        self.asked += 1
        return {"decision": "approve", "grant": self.grant}


async def write_twice(session: ClientSession) -> list[types.CallToolResult]:
    return [
        await session.call_tool("write_file", {"path": f"src/{n}.py", "content": "x\n"})
        for n in ("a", "b")
    ]


def grants_when_settled(emacs: Client) -> list[dict[str, Any]]:
    """The grants in force once the worker has seen a closed connection go (within 10 s)."""
    deadline = time.monotonic() + 10
    while True:
        listed: list[dict[str, Any]] = emacs.call("grants", {})["grants"]
        if not any(g["scope"] == "session" for g in listed) or time.monotonic() > deadline:
            return listed
        time.sleep(0.05)


def test_attack_a_session_grant_given_in_emacs_for_an_mcp_call_ends_with_its_connection(
    project: Path, home: Path
) -> None:
    (home / "config.toml").write_text("[mcp]\nreview_in_emacs = true\n")
    reviewer = EmacsApproving({"scope": "session", "pattern": "write_file(src/**)"})
    with worker_for(project, home) as proc, Client(proc.port, on_request=reviewer) as emacs:
        emacs.call("hello", {"token": proc.token})
        results = mcp_session(project, home, write_twice)
        assert [r.is_error for r in results] == [False, False]
        assert (project / "src/b.py").read_text() == "x\n"
        assert reviewer.asked == 1  # the grant covered the second write
        # It held for that MCP connection and ended with it; it never
        # covered Emacs's chats.
        assert grants_when_settled(emacs) == []
        write = {"id": "w", "name": "write_file", "args": {"path": "src/c.py", "content": "x\n"}}
        plan = emacs.call("plan", {"calls": [write], "session": "chat-1"})
        assert plan["items"][0]["disposition"] == "confirm"


def test_fr_mcp_19_a_project_grant_given_in_emacs_for_an_mcp_call_is_the_users(
    project: Path, home: Path
) -> None:
    (home / "config.toml").write_text("[mcp]\nreview_in_emacs = true\n")
    reviewer = EmacsApproving({"scope": "project", "pattern": "write_file(src/**)"})
    with worker_for(project, home) as proc, Client(proc.port, on_request=reviewer) as emacs:
        emacs.call("hello", {"token": proc.token})
        results = mcp_session(project, home, write_twice)
        assert [r.is_error for r in results] == [False, False]
        assert reviewer.asked == 1
        listed = emacs.call("grants", {})["grants"]
        assert [(g["rule"], g["scope"], g["owner"]) for g in listed] == [
            ("write_file(src/**)", "project", None)
        ]
        write = {"id": "w", "name": "write_file", "args": {"path": "src/c.py", "content": "x\n"}}
        plan = emacs.call("plan", {"calls": [write], "session": "chat-1"})
        assert plan["items"][0]["disposition"] == "execute"
