"""The worker as a subprocess over EPC: auth, concurrency, bad input, lifetime."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest
from epc.client import EPCClient
from epc.handler import ReturnError
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from forj_py.transport import sexp
from forj_py.transport.client import Client, ConnectionLost, RemoteError, WorkerProcess
from forj_py.transport.sexp import Symbol


def _close_epc(client: EPCClient) -> None:
    """python-epc's close() leaves its socket open; close everything it holds."""
    client.close()
    with contextlib.suppress(OSError):
        client.socket.shutdown(socket.SHUT_RDWR)
    client.handler_thread.join(2)
    for stream in (client.handler.rfile, client.handler.wfile):
        stream.close()
    client.socket.close()


def _wait_exit(proc: subprocess.Popen[bytes], seconds: float = 5.0) -> int | None:
    try:
        return proc.wait(seconds)
    except subprocess.TimeoutExpired:
        return None


def test_e2e_with_the_epc_package_client(project: Path) -> None:
    events: list[dict] = []
    with WorkerProcess(project) as proc:
        client = EPCClient(("127.0.0.1", proc.port))
        try:
            client.register_function(lambda text: events.append(json.loads(text)), name="event")
            with pytest.raises(ReturnError) as exc:
                client.call_sync("plan", ['{"calls": []}'], timeout=60)
            assert json.loads(exc.value.args[0])["type"] == "unauthenticated"
            hello = json.loads(
                client.call_sync(
                    "hello",
                    [json.dumps({"token": proc.token, "client": {"name": "epc"}})],
                    timeout=60,
                )
            )
            assert hello["protocol"] == 1
            assert hello["root"] == str(project.resolve())
            assert "read_file" in [t["name"] for t in hello["tools"]]
            plan = json.loads(
                client.call_sync(
                    "plan",
                    [
                        json.dumps(
                            {
                                "calls": [
                                    {"id": "1", "name": "read_file", "args": {"path": "README.md"}}
                                ]
                            }
                        )
                    ],
                    timeout=60,
                )
            )
            assert plan["items"][0]["disposition"] == "execute"
            result = json.loads(
                client.call_sync(
                    "execute", [json.dumps({"batch_id": plan["batch_id"]})], timeout=60
                )
            )
            assert result["results"][0]["result"]["content"] == "# demo\n"
            deadline = time.monotonic() + 30
            while len(events) < 2 and time.monotonic() < deadline:
                time.sleep(0.01)
            assert [e["kind"] for e in events] == ["started", "finished"]
        finally:
            _close_epc(client)


def test_every_method_is_refused_before_hello(project: Path) -> None:
    with WorkerProcess(project) as proc, Client(proc.port) as c:
        for method in ["ping", "tool_definitions", "plan", "execute", "cancel", "shutdown"]:
            with pytest.raises(RemoteError) as exc:
                c.call(method, {})
            assert exc.value.type == "unauthenticated"
        assert proc.proc.poll() is None  # shutdown was refused too


def test_wrong_token_closes_the_connection(project: Path) -> None:
    with WorkerProcess(project) as proc:
        c = Client(proc.port)
        with pytest.raises(RemoteError) as exc:
            c.call("hello", {"token": "not-the-token"})
        assert exc.value.type == "unauthenticated"
        assert c.closed.wait(2)
        with pytest.raises(ConnectionLost):
            c.call("ping")
        c.close()
        # The worker still serves honest clients.
        with Client(proc.port) as ok:
            ok.call("hello", {"token": proc.token})
            assert ok.call("ping") == {}


def test_concurrent_calls_never_interleave_on_the_socket(project: Path) -> None:
    lines = "".join(f"{i:06d} " + 'x"\\é' * 40 + "\n" for i in range(20_000))
    (project / "big.txt").write_text(lines)
    config = project / "cfg.toml"
    config.write_text(
        "[tools.output]\nmax_bytes = 4000000\n[tools.read_file]\nmax_scan_bytes = 100000000\n"
    )
    with WorkerProcess(project, config=config) as proc, Client(proc.port) as c:
        c.call("hello", {"token": proc.token})
        failures: list[str] = []

        def worker(n: int) -> None:
            try:
                start = 1 + n * 300
                plan = c.call(
                    "plan",
                    {
                        "calls": [
                            {
                                "id": str(n),
                                "name": "read_file",
                                "args": {
                                    "path": "big.txt",
                                    "start_line": start,
                                    "end_line": start + 299,
                                    "max_bytes": 4000000,
                                },
                            }
                        ]
                    },
                )
                res = c.call(
                    "execute", {"batch_id": plan["batch_id"], "capacity_bytes": 4000000}, timeout=60
                )
                content = res["results"][0]["result"]["content"]
                if not content.startswith(f"{start - 1:06d} ") or content.count("\n") != 300:
                    failures.append(f"call {n}: wrong content")
                for _ in range(5):
                    c.call("ping")
            except Exception as exc:
                failures.append(f"call {n}: {exc!r}")

        threads = [threading.Thread(target=worker, args=(n,)) for n in range(40)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        assert failures == []


def test_concurrent_python_epc_clients(project: Path) -> None:
    with WorkerProcess(project) as proc:
        clients = [EPCClient(("127.0.0.1", proc.port)) for _ in range(4)]
        errors: list[str] = []

        def drive(client: EPCClient, n: int) -> None:
            try:
                client.call_sync("hello", [json.dumps({"token": proc.token})], timeout=10)
                for i in range(20):
                    body = {
                        "calls": [
                            {
                                "id": f"{n}-{i}",
                                "name": "read_file",
                                "args": {
                                    "path": "src/main.py",
                                    "start_line": i + 1,
                                    "end_line": i + 1,
                                },
                            }
                        ]
                    }
                    plan = json.loads(client.call_sync("plan", [json.dumps(body)], timeout=10))
                    res = json.loads(
                        client.call_sync(
                            "execute", [json.dumps({"batch_id": plan["batch_id"]})], timeout=10
                        )
                    )
                    if res["results"][0]["result"]["content"] != f"line {i + 1}\n":
                        errors.append(f"{n}-{i}")
            except Exception as exc:
                errors.append(repr(exc))

        threads = [threading.Thread(target=drive, args=(c, n)) for n, c in enumerate(clients)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        for c in clients:
            _close_epc(c)
        assert errors == []


def test_bad_frames_and_requests_get_errors_and_the_worker_keeps_serving(project: Path) -> None:
    with WorkerProcess(project) as proc:
        with Client(proc.port) as c:
            c.call("hello", {"token": proc.token})
            with pytest.raises(RemoteError) as exc:
                c.call_async("plan", None).result(5)  # JSON null body
            assert exc.value.type == "bad-request"
            raw = sexp.frame([Symbol("call"), 99, Symbol("plan"), ["{not json"]])
            fut = c._pending.setdefault(99, __import__("concurrent.futures").futures.Future())
            c.send_raw(raw)
            with pytest.raises(RemoteError) as exc:
                fut.result(5)
            assert (
                exc.value.type == "bad-request" and "not valid JSON" in exc.value.error["message"]
            )
            with pytest.raises(RemoteError) as exc:
                c.call("no_such_method", {})
            assert exc.value.kind == "epc-error"
            with pytest.raises(RemoteError) as exc:
                c.call("plan", {"calls": "nope"})
            assert exc.value.type == "bad-request"
            with pytest.raises(RemoteError) as exc:
                c.call("execute", {"batch_id": "missing"})
            assert exc.value.type == "unknown-batch"
            c.send_raw(b"000004(((\n")  # unreadable s-expression: an epc-error, connection stays
            assert c.call("ping") == {}
            c.send_raw(b"zzzzzz")  # not a frame header: the connection is closed
            assert c.closed.wait(2)
        with Client(proc.port) as again:
            again.call("hello", {"token": proc.token})
            assert again.call("ping") == {}


@pytest.fixture(scope="module")
def shared_worker(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    root = tmp_path_factory.mktemp("fuzzroot")
    (root / "a.txt").write_text("a\n")
    env = dict(os.environ, FORJ_CONFIG=str(root / "none.toml"), FORJ_STATE_DIR=str(root / "state"))
    with WorkerProcess(root, env=env) as proc:
        yield proc


@settings(
    max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    payload=st.one_of(
        st.binary(max_size=64),
        st.builds(lambda b: b"%06x" % len(b) + b, st.binary(max_size=64)),
        st.builds(
            lambda m, a: sexp.frame([Symbol("call"), 1, Symbol(m), a]),
            st.sampled_from(["hello", "plan", "execute", "cancel", "ping", "methods"]),
            st.lists(st.one_of(st.text(max_size=20), st.integers()), max_size=3),
        ),
    )
)
def test_fuzz_epc_socket_never_kills_the_worker(
    shared_worker: WorkerProcess, payload: bytes
) -> None:
    with socket.create_connection(("127.0.0.1", shared_worker.port), timeout=2) as s:
        s.sendall(payload)
        s.shutdown(socket.SHUT_WR)
        try:
            while s.recv(65536):
                pass
        except (TimeoutError, ConnectionResetError):
            pass
    assert shared_worker.proc.poll() is None
    with Client(shared_worker.port) as c:
        c.call("hello", {"token": shared_worker.token})
        assert c.call("ping") == {}


def test_fuzz_tool_arguments_over_the_wire(shared_worker: WorkerProcess) -> None:
    values = [
        None,
        True,
        0,
        -1,
        2**70,
        1.5,
        "",
        "a.txt",
        "\x00",
        "../x",
        [],
        {},
        ["a.txt"],
        {"x": 1},
    ]
    keys = ["path", "start_line", "end_line", "max_bytes", "include_context", "bogus"]
    calls = []
    for i, key in enumerate(keys):
        for j, value in enumerate(values):
            calls.append(
                {"id": f"{i}-{j}", "name": "read_file", "args": {"path": "a.txt", key: value}}
            )
    with Client(shared_worker.port) as c:
        c.call("hello", {"token": shared_worker.token})
        for chunk in range(0, len(calls), 8):
            batch = calls[chunk : chunk + 8]
            plan = c.call("plan", {"calls": batch})
            res = c.call("execute", {"batch_id": plan["batch_id"]})
            assert [r["id"] for r in res["results"]] == [b["id"] for b in batch]
            for r in res["results"]:
                assert r["ok"] or r["error"]["recovery"]


# --- lifetime ---------------------------------------------------------------------


def test_worker_exits_on_shutdown(project: Path) -> None:
    with WorkerProcess(project) as proc, Client(proc.port) as c:
        c.call("hello", {"token": proc.token})
        assert c.call("shutdown") == {}
        assert _wait_exit(proc.proc) == 0


def test_worker_exits_when_stdin_closes(project: Path) -> None:
    proc = WorkerProcess(project)
    assert proc.proc.stdin is not None
    proc.proc.stdin.close()
    assert _wait_exit(proc.proc) == 0
    proc.stop()


def test_worker_exits_when_its_parent_dies(project: Path, tmp_path: Path) -> None:
    """The parent is killed with SIGKILL while the worker's stdin stays open elsewhere."""
    read_end, write_end = os.pipe()
    pidfile = tmp_path / "worker.pid"
    parent_code = textwrap.dedent(
        f"""
        import os, subprocess, sys, time
        env = dict(os.environ, FORJ_TOKEN="t" * 32)
        p = subprocess.Popen(
            [sys.executable, "-m", "forj_py", "--root", {str(project)!r}],
            stdin={read_end}, stdout=subprocess.PIPE, env=env, pass_fds=[{read_end}],
        )
        p.stdout.readline()
        open({str(pidfile)!r}, "w").write(str(p.pid))
        time.sleep(60)
        """
    )
    parent = subprocess.Popen([sys.executable, "-c", parent_code], pass_fds=[read_end])
    try:
        deadline = time.monotonic() + 10
        while not (pidfile.exists() and pidfile.read_text()) and time.monotonic() < deadline:
            time.sleep(0.05)
        worker_pid = int(pidfile.read_text())
        parent.send_signal(signal.SIGKILL)
        parent.wait()
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            try:
                os.kill(worker_pid, 0)
            except ProcessLookupError:
                break
            # Once the worker exits it is reparented and reaped by init (or by us below).
            with contextlib.suppress(ChildProcessError):
                os.waitpid(worker_pid, os.WNOHANG)
            time.sleep(0.05)
        else:
            os.kill(worker_pid, signal.SIGKILL)
            raise AssertionError("the worker outlived its parent")
    finally:
        os.close(read_end)
        os.close(write_end)
        if parent.poll() is None:
            parent.kill()


def _start_fails(root: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "forj_py", "--root", str(root)],
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
        stdin=subprocess.DEVNULL,
    )


def test_worker_refuses_to_start_without_a_token(project: Path) -> None:
    out = _start_fails(project, {k: v for k, v in os.environ.items() if k != "FORJ_TOKEN"})
    assert out.returncode == 2
    assert "FORJ_TOKEN is not set" in out.stderr
    assert out.stdout == ""


def test_worker_refuses_to_start_on_a_bad_config(project: Path) -> None:
    (project / ".forj").mkdir()
    (project / ".forj" / "config.toml").write_text("[tools.approval]\nmode = 'yolo'\n")
    out = _start_fails(project, dict(os.environ, FORJ_TOKEN="x" * 32))
    assert out.returncode == 2
    assert "tools.approval.mode: got 'yolo'" in out.stderr


def test_worker_refuses_a_root_that_is_not_a_directory(project: Path) -> None:
    out = _start_fails(project / "README.md", dict(os.environ, FORJ_TOKEN="x" * 32))
    assert out.returncode == 2 and "not a directory" in out.stderr


def test_worker_listens_on_loopback_only(project: Path) -> None:
    with WorkerProcess(project) as proc:
        out = subprocess.run(["ss", "-ltnp"], capture_output=True, text=True)
        if out.returncode != 0:
            pytest.skip("ss is not available")
        line = next(line for line in out.stdout.splitlines() if f":{proc.port} " in line)
        assert "127.0.0.1:" in line


def test_cancel_over_the_wire_stops_a_running_batch(project: Path) -> None:
    (project / "huge.txt").write_text("y\n" * 3_000_000)
    config = project / "cfg.toml"
    config.write_text("[tools.read_file]\nmax_scan_bytes = 1000000000\n")
    with WorkerProcess(project, config=config) as proc, Client(proc.port) as c:
        c.call("hello", {"token": proc.token})
        calls = [
            {
                "id": str(i),
                "name": "read_file",
                "args": {"path": "huge.txt", "start_line": 2_999_999},
            }
            for i in range(3)
        ]
        plan = c.call("plan", {"calls": calls})
        fut = c.call_async("execute", {"batch_id": plan["batch_id"]})
        time.sleep(0.05)
        assert c.call("cancel", {"batch_id": plan["batch_id"]}) == {"cancelled": True}
        res = json.loads(fut.result(10))
        kinds = [r["ok"] or r["error"]["details"]["kind"] for r in res["results"]]
        assert kinds[-1] == "Cancelled"
        assert res["state"] == "cancelled"


def test_it_jrn_02_crash_mid_execution_leaves_a_record_and_nothing_reruns(
    project: Path, tmp_path: Path
) -> None:
    """SIGKILL the worker while the second call runs; the journal has it all."""
    import sqlite3

    (project / "huge.txt").write_text("z\n" * 4_000_000)
    config = tmp_path / "cfg.toml"
    config.write_text("[tools.read_file]\nmax_scan_bytes = 1000000000\n")
    state = tmp_path / "state"
    started = threading.Event()

    def on_event(event: dict) -> None:
        if event["call_id"] == "slow" and event["kind"] == "started":
            started.set()

    calls = [
        {"id": "quick", "name": "read_file", "args": {"path": "README.md"}},
        {"id": "slow", "name": "read_file", "args": {"path": "huge.txt", "start_line": 3_999_999}},
        {"id": "never", "name": "read_file", "args": {"path": "README.md"}},
    ]
    with (
        WorkerProcess(project, config=config, state_dir=state) as proc,
        Client(proc.port, on_event=on_event) as c,
    ):
        c.call("hello", {"token": proc.token})
        plan = c.call("plan", {"calls": calls})
        c.call_async("execute", {"batch_id": plan["batch_id"]})
        assert started.wait(10)
        proc.proc.kill()
        proc.proc.wait()
    db = sqlite3.connect(state / "journal.sqlite3")
    state_row = db.execute("SELECT state FROM batches WHERE batch_id=?", (plan["batch_id"],))
    assert state_row.fetchone()[0] == "executing"
    recorded = db.execute(
        "SELECT call_id, raw FROM calls WHERE batch_id=? ORDER BY seq", (plan["batch_id"],)
    ).fetchall()
    assert [json.loads(raw) for _, raw in recorded] == calls
    done = db.execute("SELECT call_id FROM results WHERE batch_id=?", (plan["batch_id"],))
    assert [r[0] for r in done.fetchall()] == ["quick"]
    db.close()
    # A new worker on the same journal runs nothing by itself.
    with WorkerProcess(project, config=config, state_dir=state) as proc, Client(proc.port) as c:
        c.call("hello", {"token": proc.token})
        time.sleep(0.3)
    db = sqlite3.connect(state / "journal.sqlite3")
    done = db.execute("SELECT call_id FROM results WHERE batch_id=?", (plan["batch_id"],))
    assert [r[0] for r in done.fetchall()] == ["quick"]
    db.close()
