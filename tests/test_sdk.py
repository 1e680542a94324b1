"""The JSON-lines SDK transport, driven as a real child process over its stdin and stdout.

Each test starts ``python -m forj_py sdk`` and writes envelopes to it line by
line, as an embedding host would; nothing is mocked.
"""

from __future__ import annotations

import hashlib
import json
import queue
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

Message = dict[str, Any]


class Host:
    """A running ``forj_py sdk`` and every line it has written so far."""

    def __init__(self, project: Path, home: Path, heartbeat: float = 30.0) -> None:
        self.errlog = (home / "stderr.log").open("ab")
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "forj_py",
                "sdk",
                "--root",
                str(project),
                "--config",
                str(home / "config.toml"),
                "--state-dir",
                str(home / "state"),
                "--heartbeat-seconds",
                str(heartbeat),
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.errlog,
            cwd=str(project),
        )
        self.lines: queue.Queue[Message] = queue.Queue()
        self.seen: list[Message] = []
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(json.loads(line))  # every line the host writes is JSON

    def send_raw(self, data: bytes) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(data)
        self.proc.stdin.flush()

    def send(self, message: Message) -> None:
        self.send_raw(json.dumps(message).encode() + b"\n")

    def expect(self, match: Callable[[Message], bool], timeout: float = 60) -> Message:
        """The first message (seen or coming) that ``match`` accepts."""
        for m in self.seen:
            if match(m):
                self.seen.remove(m)
                return m
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"no matching message; saw {self.seen[-10:]}")
            try:
                m = self.lines.get(timeout=left)
            except queue.Empty:
                continue
            if match(m):
                return m
            self.seen.append(m)

    def response(self, request_id: str) -> Message:
        return self.expect(lambda m: m["type"] == "ToolResponse" and m["request_id"] == request_id)

    def open(self, session_id: str = "s1", **extra: Any) -> Message:
        self.send({"type": "SessionOpen", "session_id": session_id, **extra})
        return self.expect(lambda m: m["type"] == "SessionOpened" and m["session_id"] == session_id)

    def call(self, request_id: str, tool: str, session: str = "s1", **args: Any) -> Message:
        self.send(
            {
                "type": "ToolRequest",
                "tool": tool,
                "args": args,
                "request_id": request_id,
                "session_id": session,
                "timestamp": int(time.time()),
            }
        )
        return self.response(request_id)

    def close(self) -> int:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        code = self.proc.wait(timeout=60)
        self.reader.join(timeout=10)
        assert self.proc.stdout is not None
        self.proc.stdout.close()
        self.errlog.close()
        return code


@pytest.fixture
def home(tmp_path: Path) -> Path:
    h = tmp_path / "home"
    (h / "state").mkdir(parents=True)
    (h / "config.toml").write_text("", encoding="utf-8")
    return h


@pytest.fixture
def host(project: Path, home: Path) -> Iterator[Host]:
    h = Host(project, home)
    yield h
    if h.proc.poll() is None:
        h.close()


def journal_rows(home: Path, sql: str) -> list[Any]:
    db = sqlite3.connect(home / "state" / "journal.sqlite3")
    try:
        return db.execute(sql).fetchall()
    finally:
        db.close()


def test_fr_sdk_01_a_session_reads_a_file(host: Host) -> None:
    opened = host.open()
    assert opened["protocol"] == "forj-sdk/1" and opened["heartbeat_seconds"] == 30.0
    assert "read_file" in {t["name"] for t in opened["tools"]}
    reply = host.call("r1", "read_file", path="src/main.py")
    assert reply["ok"] is True and reply["errors"] == []
    assert reply["data"]["content"].startswith("line 1\nline 2\n")
    assert reply["session_id"] == "s1" and isinstance(reply["duration_ms"], int)
    started = host.expect(lambda m: m.get("event") == "TaskStarted")
    assert started["request_id"] == "r1" and started["type"] == "EventMessage"
    assert host.close() == 0


def test_fr_sdk_02_an_edit_needing_review_is_refused_and_journaled(
    host: Host, home: Path, project: Path
) -> None:
    host.open()
    host.call("r1", "read_file", path="src/main.py")
    reply = host.call("r2", "edit", path="src/main.py", old_string="line 7\n", new_string="7\n")
    assert reply["ok"] is False and reply["data"] is None
    (error,) = reply["errors"]
    assert error["code"] == "E_POLICY" and error["details"]["code"] == "E_POLICY"
    assert "cannot ask the user" in error["message"]
    assert 'allow = ["edit(src/**)"]' in error["message"]
    assert error["recovery"]
    assert "line 7\n" in (project / "src" / "main.py").read_text()
    host.close()
    rows = journal_rows(home, "SELECT name FROM calls ORDER BY rowid")
    assert [r[0] for r in rows] == ["read_file", "edit"]


def test_fr_sdk_03_the_same_edit_runs_when_an_allow_rule_covers_it(
    project: Path, home: Path
) -> None:
    (home / "config.toml").write_text('[permissions]\nallow = ["edit(src/**)"]\n')
    host = Host(project, home)
    try:
        host.open()
        host.call("r1", "read_file", path="src/main.py")
        reply = host.call("r2", "edit", path="src/main.py", old_string="line 7\n", new_string="7\n")
        assert reply["ok"] is True, reply
        assert "\n7\n" in (project / "src" / "main.py").read_text()
        metrics = host.expect(lambda m: m.get("event") == "Metrics" and m["request_id"] == "r2")
        assert metrics["metrics"]["calls"] == 2 and metrics["metrics"]["errors"] == 0
        assert metrics["metrics"]["files"] == ["src/main.py"]
    finally:
        host.close()


def test_fr_sdk_04_a_sandbox_violation_carries_its_code(host: Host) -> None:
    host.open()
    for rid, path in (("r1", "../outside.txt"), ("r2", "/etc/passwd")):
        reply = host.call(rid, "read_file", path=path)
        (error,) = reply["errors"]
        assert reply["ok"] is False
        assert error["code"] == "E_POLICY" and error["details"]["kind"] == "SandboxViolation"


def test_fr_sdk_05_malformed_lines_get_error_messages_and_the_host_goes_on(host: Host) -> None:
    host.open()
    bad = [
        b"this is not json\n",
        b"[1, 2]\n",
        b'{"no_type": 1}\n',
        b'{"type": "Teleport", "request_id": "t1"}\n',
        b'{"type": "ToolRequest", "tool": "read_file", "request_id": "t2", "session_id": "s1",'
        b' "args": "not an object"}\n',
        b"\xff\xfe garbage\n",
        b'{"type": "ToolRequest", "tool": "read_file", "request_id": "t3", "session_id": "s1",'
        b' "args": {}, "surprise": 1}\n',
    ]
    for line in bad:
        host.send_raw(line)
    errors = [host.expect(lambda m: m["type"] == "ErrorMessage") for _ in bad]
    assert all(e["code"] == "E_VALIDATION_FAIL" and e["recovery"] for e in errors)
    messages = " | ".join(e["message"] for e in errors)
    assert "not JSON" in messages and "not an object" in messages
    assert "unknown type 'Teleport'" in messages and "not UTF-8" in messages
    assert {e["request_id"] for e in errors} >= {"t1", "t2", "t3"}
    # Still serving.
    assert host.call("r9", "read_file", path="README.md")["ok"] is True


def test_fr_sdk_06_a_missing_or_unknown_session_is_refused(host: Host) -> None:
    host.send({"type": "ToolRequest", "tool": "read_file", "args": {}, "request_id": "q1"})
    missing = host.expect(lambda m: m["type"] == "ErrorMessage")
    assert missing["code"] == "E_VALIDATION_FAIL" and missing["request_id"] == "q1"
    assert "session_id" in missing["message"]
    assert any("SessionOpen" in r for r in missing["recovery"])
    host.send(
        {
            "type": "ToolRequest",
            "tool": "read_file",
            "args": {"path": "README.md"},
            "request_id": "q2",
            "session_id": "nobody",
        }
    )
    unknown = host.expect(lambda m: m["type"] == "ErrorMessage")
    assert unknown["code"] == "E_POLICY" and unknown["request_id"] == "q2"
    assert "No open session 'nobody'" in unknown["message"]
    # A closed session is unknown too.
    host.open("s2")
    host.send({"type": "SessionClose", "session_id": "s2"})
    closed = host.expect(lambda m: m["type"] == "SessionClosed")
    assert closed["metrics"]["calls"] == 0
    host.send({"type": "Heartbeat", "session_id": "s2"})
    assert host.expect(lambda m: m["type"] == "ErrorMessage")["code"] == "E_POLICY"


def test_fr_sdk_07_open_sessions_get_heartbeats(project: Path, home: Path) -> None:
    host = Host(project, home, heartbeat=0.2)
    try:
        host.open("beat")
        first = host.expect(lambda m: m["type"] == "Heartbeat")
        second = host.expect(lambda m: m["type"] == "Heartbeat")
        assert first["session_id"] == second["session_id"] == "beat"
        assert isinstance(first["timestamp"], int) and second["timestamp"] >= first["timestamp"]
    finally:
        host.close()


def test_fr_sdk_08_a_command_streams_its_output_as_events(project: Path, home: Path) -> None:
    (home / "config.toml").write_text('[permissions]\nallow = ["run_shell(sh *)"]\n')
    host = Host(project, home)
    try:
        host.open()
        script = "for i in 1 2 3; do echo tick $i; done; echo oops >&2"
        reply = host.call("c1", "run_shell", cmd=["sh", "-c", script])
        if not reply["ok"]:
            pytest.skip(f"commands cannot run here: {reply['errors'][0]['message'][:200]}")
        assert "tick 3" in reply["data"]["stdout"]
        outputs = []
        while True:
            try:
                outputs.append(host.expect(lambda m: m.get("event") == "TaskOutput", timeout=0.5))
            except AssertionError:
                break
        streamed = {
            s: "".join(o["data"] for o in outputs if o["stream"] == s) for s in ("stdout", "stderr")
        }
        assert streamed["stdout"] == "tick 1\ntick 2\ntick 3\n"
        assert streamed["stderr"] == "oops\n"
        assert all(o["request_id"] == "c1" for o in outputs)
        finished = host.expect(lambda m: m.get("event") == "TaskFinished")
        assert finished["ok"] is True
    finally:
        host.close()


def test_fr_sdk_09_requests_of_one_session_run_in_order(host: Host, project: Path) -> None:
    host.open()
    for i in range(5):
        host.send(
            {
                "type": "ToolRequest",
                "tool": "read_file",
                "args": {"path": "README.md"},
                "request_id": f"o{i}",
                "session_id": "s1",
            }
        )
    order = [host.expect(lambda m: m["type"] == "ToolResponse")["request_id"] for _ in range(5)]
    assert order == [f"o{i}" for i in range(5)]


def test_fr_met_01_metrics_count_calls_errors_bytes_and_files(host: Host) -> None:
    host.open()
    host.call("m1", "read_file", path="README.md")
    host.call("m2", "read_file", path="missing.txt")
    host.send({"type": "MetricsRequest", "session_id": "s1", "request_id": "m3"})
    event = host.expect(lambda m: m.get("event") == "Metrics" and m["request_id"] == "m3")
    metrics = event["metrics"]
    assert (metrics["calls"], metrics["errors"]) == (2, 1)
    assert metrics["by_tool"] == {"read_file": {"calls": 2, "errors": 1}}
    assert metrics["bytes_out"] > 0 and metrics["ran"] >= 1
    assert metrics["duration_ms_max"] >= metrics["duration_ms_mean"] > 0
    assert metrics["session"] == "sdk-s1"


def test_fr_sdk_11_a_session_may_be_stricter_than_the_user_never_looser(host: Host) -> None:
    looser = host.open("loose", permission_mode="accept-edits")
    assert looser["permission_mode"] == "ask" and "looser" in looser["mode_note"]
    host.call("r1", "read_file", session="loose", path="src/main.py")
    edit = host.call(
        "r2", "edit", session="loose", path="src/main.py", old_string="line 7\n", new_string="7\n"
    )
    assert edit["ok"] is False and "cannot ask the user" in edit["errors"][0]["message"]
    stricter = host.open("strict", permission_mode="read-only")
    assert stricter["permission_mode"] == "read-only" and "mode_note" not in stricter
    assert "edit" not in {t["name"] for t in stricter["tools"]}
    write = host.call("w", "write_file", session="strict", path="n.txt", content="n\n")
    assert write["ok"] is False and write["errors"][0]["code"] == "E_POLICY"


def test_fr_sdk_12_seed_004_tool_names_answer_in_seed_004_shapes(host: Host, project: Path) -> None:
    host.open()
    reply = host.call("r1", "file_read", path="src/main.py")
    assert reply["ok"] is True, reply
    data = (project / "src/main.py").read_bytes()
    assert reply["tool"] == "file_read"
    assert reply["data"]["content"] == data.decode()
    assert reply["data"]["sha256"] == hashlib.sha256(data).hexdigest()
    listed = host.call("r2", "fs_list", glob="src/*.py")
    assert listed["data"]["files"] == ["src/main.py"]
    found = host.call("r3", "grep", pattern=r"line 4\d", glob="src/**", max_results=2)
    assert [(m["file"], m["line"]) for m in found["data"]["matches"]] == [
        ("src/main.py", 40),
        ("src/main.py", 41),
    ]
    assert host.close() == 0


def test_attack_a_file_one_sdk_session_read_is_not_read_for_another(
    project: Path, home: Path
) -> None:
    (home / "config.toml").write_text('[permissions]\nallow = ["edit(src/**)"]\n')
    host = Host(project, home)
    edit = {"path": "src/main.py", "old_string": "line 7\n", "new_string": "7\n"}
    try:
        host.open("a")
        host.open("b")
        assert host.call("r1", "read_file", session="a", path="src/main.py")["ok"] is True
        reply = host.call("r2", "edit", session="b", **edit)
        assert reply["ok"] is False
        assert "was not read in this session" in reply["errors"][0]["message"]
        # A session closed and opened again under the same id starts afresh.
        host.send({"type": "SessionClose", "session_id": "a"})
        host.expect(lambda m: m["type"] == "SessionClosed" and m["session_id"] == "a")
        host.open("a")
        reply = host.call("r3", "edit", session="a", **edit)
        assert reply["ok"] is False
        assert "was not read in this session" in reply["errors"][0]["message"]
        assert "line 7\n" in (project / "src" / "main.py").read_text()
        assert host.call("r4", "read_file", session="a", path="src/main.py")["ok"] is True
        assert host.call("r5", "edit", session="a", **edit)["ok"] is True
    finally:
        host.close()
