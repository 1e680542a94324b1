"""The worker over its own stdin and stdout (``--stdio``): real processes, real frames.

This is how Emacs speaks to a worker on another host through TRAMP; the
ssh itself is exercised by the ERT suite (test-el/forj-remote-test.el).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from forj_py.transport.client import ConnectionLost, RemoteError, StdioWorkerProcess

HANG = 30.0


def _children(pid: int) -> list[int]:
    text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    return [int(p) for p in text.split()]


def _read(cid: str, path: str) -> dict[str, Any]:
    return {"id": cid, "name": "read_file", "args": {"path": path}}


def test_stdio_worker_serves_hello_plan_execute_and_events_on_its_pipes(project: Path) -> None:
    events: list[dict[str, Any]] = []
    with StdioWorkerProcess(project) as proc, proc.client(on_event=events.append) as c:
        hello = c.call("hello", {"token": proc.token, "client": {"name": "test"}}, HANG)
        assert hello["root"] == str(project.resolve())
        assert "read_file" in [t["name"] for t in hello["tools"]]
        assert hello["frames"] == ["json"]  # the same JSON frames as on the socket
        plan = c.call("plan", {"calls": [_read("1", "README.md")]}, HANG)
        assert plan["items"][0]["disposition"] == "execute"
        result = c.call("execute", {"batch_id": plan["batch_id"]}, HANG)
        assert result["results"][0]["result"]["content"] == "# demo\n"
        assert c.call("ping") == {}
        assert c.call("shutdown") == {}
        assert proc.proc.wait(HANG) == 0
    assert [e["kind"] for e in events] == ["started", "finished"]


def test_stdio_large_replies_and_concurrent_calls_keep_their_frames_whole(project: Path) -> None:
    # Replies of ~400 kB (several times what a pipe holds), written by pool
    # threads at once onto one pipe: a frame interleaved with another would
    # fail to parse.
    big = "".join(f"{i:06d} " + 'x"\\é' * 40 + "\n" for i in range(1600))
    (project / "big.txt").write_text(big)
    config = project / "cfg.toml"
    config.write_text(
        "[tools.output]\nmax_bytes = 4000000\n"
        "[tools.read_file]\nmax_file_read_bytes = 4000000\nmax_scan_bytes = 100000000\n"
    )
    with StdioWorkerProcess(project, extra=["--config", str(config)]) as proc, proc.client() as c:
        c.call("hello", {"token": proc.token}, HANG)
        futures = []
        for i in range(8):
            read = _read(str(i), "big.txt")
            read["args"]["max_bytes"] = 4000000
            plan = c.call("plan", {"calls": [read]}, HANG)
            futures.append(
                c.call_async("execute", {"batch_id": plan["batch_id"], "capacity_bytes": 4000000})
            )
        for fut in futures:
            reply = json.loads(fut.result(HANG))
            assert reply["results"][0]["result"]["content"] == big


def test_stdio_every_method_is_refused_before_hello(project: Path) -> None:
    with StdioWorkerProcess(project) as proc, proc.client() as c:
        for method in ["ping", "plan", "execute", "shutdown"]:
            with pytest.raises(RemoteError) as exc:
                c.call(method, {}, HANG)
            assert exc.value.type == "unauthenticated"
        assert proc.proc.poll() is None  # shutdown was refused too
        c.call("hello", {"token": proc.token}, HANG)
        assert c.call("ping") == {}


def test_stdio_wrong_token_ends_the_worker(project: Path) -> None:
    with StdioWorkerProcess(project) as proc:
        c = proc.client()
        with pytest.raises(RemoteError) as exc:
            c.call("hello", {"token": "not-the-token"}, HANG)
        assert exc.value.type == "unauthenticated"
        # Its only connection refused, the worker has no one left to serve.
        assert proc.proc.wait(HANG) == 0
        assert c.closed.wait(HANG)
        with pytest.raises(ConnectionLost):
            c.call("ping")
        c.close()


def test_stdio_stray_output_of_the_worker_and_its_children_never_enters_the_frames(
    tmp_path: Path,
) -> None:
    """Descriptor 1 is the frames' no more: a print or a child's output goes to stderr."""
    script = (
        "import os, subprocess, sys\n"
        "from forj_py.transport.stdio import take_stdio\n"
        "rfile, wfile = take_stdio()\n"
        "print('stray print', flush=True)\n"
        "subprocess.run(['echo', 'stray child'], check=True)\n"
        "subprocess.run(['sh', '-c', 'cat; echo child read done'], check=True)\n"
        "wfile.write(b'FRAME:' + rfile.read(5)); wfile.flush()\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", script],
        input=b"hello",
        capture_output=True,
        timeout=HANG,
        check=True,
    )
    # The child's cat found /dev/null, not the frames: the frames' reader got them all.
    assert out.stdout == b"FRAME:hello"
    assert out.stderr.decode().splitlines() == ["stray print", "stray child", "child read done"]


def test_stdio_end_of_stdin_stops_the_worker_and_the_next_one_offers_the_unfinished_batch(
    project: Path, tmp_path: Path
) -> None:
    """A dropped connection is a dead worker; the journal keeps what it left unfinished."""
    state = tmp_path / "state"
    started = threading.Event()

    def on_event(event: dict[str, Any]) -> None:
        if event["call_id"] == "sh" and event["kind"] == "started":
            started.set()

    calls = [
        {"id": "w1", "name": "write_file", "args": {"path": "first.txt", "content": "one\n"}},
        {"id": "sh", "name": "run_shell", "args": {"cmd": "echo started >> ran.log; sleep 60"}},
        {"id": "w2", "name": "write_file", "args": {"path": "never.txt", "content": "two\n"}},
    ]
    # The worker's pipes pass through two cats, the connection: killing them
    # drops it both ways at once, as when ssh dies.
    link = ["sh", "-c", 'cat | sh -c "$1" | cat', "link"]
    with StdioWorkerProcess(project, state_dir=state, launcher=link) as proc:
        c = proc.client(on_event=on_event)
        c.call("hello", {"token": proc.token}, HANG)
        journaled = c.call("journal_calls", {"calls": calls, "turn": "t1"}, HANG)
        plan = c.call("plan", {"batch_id": journaled["batch_id"]}, HANG)
        pending = c.call_async(
            "execute", {"batch_id": plan["batch_id"], "approved": ["w1", "sh", "w2"]}
        )
        assert started.wait(HANG)
        for pid in _children(proc.proc.pid):
            if Path(f"/proc/{pid}/cmdline").read_bytes() == b"cat\0":
                os.kill(pid, signal.SIGKILL)
        with pytest.raises(ConnectionLost):
            pending.result(HANG)
        proc.proc.wait(HANG)  # the pipeline ends when the worker has stopped
        c.close()
    with StdioWorkerProcess(project, state_dir=state) as proc2, proc2.client() as c2:
        (report,) = c2.call("hello", {"token": proc2.token}, HANG)["unfinished"]
        assert report["batch_id"] == plan["batch_id"]
        first, cmd, never = report["calls"]
        assert first["state"] == "completed" and first["result"]["ok"]
        # Stopped mid-way, and its end journaled before the worker stopped.
        assert cmd["state"] == "completed"
        assert cmd["result"]["error"]["type"] == "cancelled"
        assert never["state"] == "never-started"
    assert not (project / "never.txt").exists()


def test_stdio_worker_that_cannot_start_says_why_on_stderr(tmp_path: Path) -> None:
    with StdioWorkerProcess(tmp_path / "missing") as proc:
        assert proc.proc.wait(HANG) == 2
        assert proc.proc.stderr is not None
        assert b"not a directory" in proc.proc.stderr.read()


_OPEN_THE_PIPES = """
import os, sys
pid = sys.argv[1]
opened = []
try:
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            with open(f"/proc/{pid}/fd/{fd}", "wb"):
                opened.append(fd)
        except OSError:  # refused, or not a file to write (a socket, a directory)
            pass
except PermissionError:
    pass
print("opened", *opened) if opened else print("denied")
"""


def test_attack_another_process_of_the_user_cannot_open_the_stdio_workers_pipes(
    project: Path,
) -> None:
    """/proc/<worker>/fd/N would let any process of the user write frames into an open session."""
    import shutil

    drop: list[str] = []
    if os.geteuid() == 0:
        # Root's capabilities open anything; the attack is another process
        # of the worker's own user, so both run as root without them.
        if shutil.which("setpriv") is None:
            pytest.skip("running as root without setpriv to drop capabilities")
        drop = ["setpriv", "--bounding-set=-all", "--inh-caps=-all"]
    with (
        StdioWorkerProcess(project, launcher=[*drop, "sh", "-c"]) as proc,
        proc.client() as c,
    ):
        c.call("hello", {"token": proc.token}, HANG)
        pid = proc.proc.pid
        while b"-m\0forj_py\0" not in Path(f"/proc/{pid}/cmdline").read_bytes():
            (pid,) = _children(pid)  # the shell, unless it became the worker
        attacker = subprocess.run(
            [*drop, sys.executable, "-c", _OPEN_THE_PIPES, str(pid)],
            capture_output=True,
            timeout=HANG,
            check=True,
        )
        assert attacker.stdout.decode().split() == ["denied"]
        assert c.call("ping", {}, HANG) == {}


def test_stdio_login_shell_chatter_before_the_worker_never_reaches_the_frames(
    project: Path,
) -> None:
    """A ~/.bashrc that prints (even something shaped like a frame) is dropped, not parsed."""
    chatter = 'echo "Welcome to the host"; printf "000010(return 1 nil)"'
    noisy = ["sh", "-c", f'{chatter}; eval "exec $1"', "login-shell"]
    with StdioWorkerProcess(project, launcher=noisy) as proc, proc.client() as c:
        hello = c.call("hello", {"token": proc.token}, HANG)
        assert hello["root"] == str(project.resolve())
        assert c.noise == b"Welcome to the host\n000010(return 1 nil)"
        assert c.call("ping", {}, HANG) == {}
