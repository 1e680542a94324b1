"""run_shell: results, bad input, time limits, cancel, whole-group kill, streaming, environment.

Real commands, real process groups.  Timings are never what a test checks;
the bounds below only turn a hang into a failure.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import sqlite3
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from conftest import MakeWorker, call, project_config, running, user_config

from forj_py.config import load
from forj_py.service import Worker
from forj_py.system import process
from forj_py.system.process import Channel
from forj_py.tools._shell import BUILTIN_ENV_DENYLIST, clean_environment
from forj_py.transport.client import Client, WorkerProcess

HANG = 20  # seconds: far beyond any of these commands; reaching it means a hang

FAST_KILL = "[tools.shell]\nkill_grace_seconds = 0.3\ndrain_seconds = 0.3\n"


@pytest.fixture(params=["bwrap", "none"])
def confined(request: pytest.FixtureRequest) -> str:
    """Process control is checked in the command sandbox and without it."""
    if request.param == "bwrap" and shutil.which("bwrap") is None:
        pytest.skip("bubblewrap is not installed")
    return f"sandbox = {request.param!r}\n"


def shell(
    worker: Worker, *calls: dict[str, Any], events: list[dict[str, Any]] | None = None, **kw: Any
) -> list[dict[str, Any]]:
    """Plan and execute, approving every call."""
    plan = worker.plan({"calls": list(calls)})
    sink = events if events is not None else []
    result = worker.execute(
        {"batch_id": plan["batch_id"], "approved": [c["id"] for c in calls], **kw},
        lambda e: sink.append(e.wire()),
    )
    return list(result["results"])


def sh(id_: str, cmd: list[str] | str, **args: Any) -> dict[str, Any]:
    return call(id_, "run_shell", cmd=cmd, **args)


# --- results -------------------------------------------------------------------------


def test_result_carries_exit_code_stdout_stderr_and_duration(make_worker: MakeWorker) -> None:
    (r,) = shell(make_worker(), sh("1", ["sh", "-c", "echo out; echo err >&2"]))
    assert r["ok"], r
    res = r["result"]
    assert res["exit_code"] == 0
    assert res["stdout"] == "out\n" and res["stderr"] == "err\n"
    assert isinstance(res["duration_ms"], int) and res["duration_ms"] >= 0
    assert "truncated" not in res


def test_non_zero_exit_is_a_process_error_with_all_four_fields(make_worker: MakeWorker) -> None:
    (r,) = shell(make_worker(), sh("1", "echo partial; echo why >&2; exit 3"))
    assert r["ok"] is False
    err = r["error"]
    assert err["type"] == "process-error"
    assert err["details"]["kind"] == "ExecutionFailed"
    assert err["message"] == "The command exited with code 3"
    d = err["details"]
    assert (d["exit_code"], d["stdout"], d["stderr"]) == (3, "partial\n", "why\n")
    assert isinstance(d["duration_ms"], int)
    assert err["recovery"]


def test_string_form_runs_through_sh_c_and_argv_form_does_not(make_worker: MakeWorker) -> None:
    worker = make_worker()
    text, argv = shell(worker, sh("1", "echo a b | tr a-z A-Z"), sh("2", ["echo", "$HOME", "|"]))
    assert text["result"]["stdout"] == "A B\n"
    assert argv["result"]["stdout"] == "$HOME |\n"  # no shell: nothing expanded


def test_cwd_is_relative_to_the_project_and_stdin_is_closed_unless_given(
    make_worker: MakeWorker,
) -> None:
    worker = make_worker()
    where, closed, given = shell(
        worker,
        sh("1", ["pwd"], cwd="src"),
        sh("2", ["cat"]),  # would wait forever on an open stdin
        sh("3", ["cat"], stdin="fed\n"),
    )
    assert where["result"]["stdout"].strip().endswith("/project/src")
    assert closed["result"]["stdout"] == ""
    assert given["result"]["stdout"] == "fed\n"


def test_stdin_is_written_while_output_is_read(make_worker: MakeWorker) -> None:
    # In and out at once, each more than a pipe holds (64 KiB for stdin): a
    # writer that blocked on stdin while stdout filled up would deadlock.
    data = "0123456789abcdef\n" * 14_000
    (r,) = shell(make_worker(), sh("1", "tee /dev/stderr | wc -c", stdin=data))
    assert r["result"]["stdout"].strip() == str(len(data))
    assert r["result"]["omitted_bytes"]["stderr"] > 0  # and the echo was cut to fit


# --- bad input --------------------------------------------------------------------------


def test_bad_input_gets_precise_errors_and_the_worker_keeps_serving(
    make_worker: MakeWorker, project: Path, tmp_path: Path
) -> None:
    (project / "out").symlink_to(tmp_path)
    worker = make_worker()
    results = shell(
        worker,
        sh("empty", []),
        sh("blank", [""]),
        sh("nul", ["echo", "a\0b"]),
        sh("missing", ["no-such-program-forj"]),
        sh("up", ["ls"], cwd=".."),
        sh("abs", ["ls"], cwd="/tmp"),
    ) + shell(
        worker,
        sh("link", ["ls"], cwd="out"),
        sh("file", ["ls"], cwd="README.md"),
        sh("envname", ["ls"], env={"1BAD": "x"}),
        sh("shell127", "no-such-program-forj --flag"),
        call("after", "read_file", path="README.md"),
    )
    by_id = {r["id"]: r for r in results}
    for key in ("empty", "blank", "nul", "up", "abs", "link", "file", "envname"):
        assert by_id[key]["error"]["type"] == "validation-error", key
        assert by_id[key]["error"]["recovery"], key
    assert "should be non-empty" in by_id["empty"]["error"]["message"]
    assert "empty" in by_id["blank"]["error"]["message"]
    assert "NUL" in by_id["nul"]["error"]["message"]
    assert by_id["up"]["error"]["details"]["reason"] == "PathOutsideSandbox"
    assert by_id["link"]["error"]["details"]["reason"] == "PathOutsideSandbox"
    assert "not a directory" in by_id["file"]["error"]["message"]
    missing = by_id["missing"]["error"]
    assert missing["type"] == "process-error"
    assert "program not found" in missing["message"]
    assert any("PATH" in step for step in missing["recovery"])
    sh127 = by_id["shell127"]["error"]
    assert sh127["details"]["exit_code"] == 127
    assert "exit 127" in sh127["recovery"][0]
    assert by_id["after"]["ok"] is True


def test_100_mb_of_output_is_capped_head_and_tail_within_the_limit(
    make_worker: MakeWorker,
) -> None:
    events: list[dict[str, Any]] = []
    total = 100_000_000
    cmd = f"seq 1 30000000 | head -c {total}"
    (r,) = shell(make_worker(), sh("1", cmd), events=events, capacity_bytes=20_000)
    res = r["result"]
    assert len(json.dumps(r, ensure_ascii=False).encode()) <= 20_000
    assert res["truncated"] is True
    assert res["stdout"].startswith("1\n2\n3\n")
    kept = len(res["stdout"].encode())
    marker = f"[... {res['omitted_bytes']['stdout']} bytes omitted ...]"
    assert marker in res["stdout"]
    # The marker counts exactly what is missing (both sides cut at line ends).
    assert res["omitted_bytes"]["stdout"] == total - (kept - len(marker) - 2)
    # Streaming dropped nothing: every byte reached the event sink.
    streamed = sum(len(e["data"]) for e in events if e["kind"] == "stdout")
    assert streamed == total


def test_binary_and_invalid_utf8_output(make_worker: MakeWorker) -> None:
    worker = make_worker()
    bad, binary = shell(
        worker,
        sh("1", r"printf 'ok \377\376 caf\303\251 \033[31mred'"),
        sh("2", r"printf 'PK\003\004\000\000\001\002'"),
    )
    assert bad["result"]["stdout"] == "ok \ufffd\ufffd café red"  # escape sequence removed
    assert binary["result"]["stdout_encoding"] == "base64"
    import base64

    assert base64.b64decode(binary["result"]["stdout"]) == b"PK\x03\x04\x00\x00\x01\x02"


# --- time limits, cancel, the whole group --------------------------------------------------


def test_t_tmo_01_command_timeout_kills_the_group_and_the_batch_continues(
    make_worker: MakeWorker, confined: str
) -> None:
    user_config(FAST_KILL + confined)
    worker = make_worker()
    started = time.monotonic()
    slow, nxt = shell(
        worker,
        sh("slow", "sleep 3001 & sleep 3002", timeout=0.5),
        call("next", "read_file", path="README.md"),
    )
    assert time.monotonic() - started < HANG
    err = slow["error"]
    assert err["type"] == "timeout-error"
    assert err["details"]["kind"] == "Timeout"
    # Unlike the executor's own deadline, the command's limit reports what it did.
    assert err["details"]["signal"] == "SIGTERM"
    assert err["details"]["exit_code"] == -signal.SIGTERM
    assert err["details"]["timeout_s"] == 0.5
    _wait_gone("sleep", "3001", limit=0)
    _wait_gone("sleep", "3002", limit=0)
    assert nxt["ok"] is True


def test_t_tmo_01_meta_timeout_shortens_the_commands_own_limit(
    make_worker: MakeWorker, confined: str
) -> None:
    """A meta.timeout shorter than the shell limit: the command stops inside it, reporting."""
    user_config("[tools.shell]\n" + confined)
    worker = make_worker()
    events: list[dict[str, Any]] = []
    calls = [
        {
            "id": "s",
            "name": "run_shell",
            "args": {"cmd": "echo started; sleep 3003"},
            "meta": {"timeout": 1},
        },
        call("next", "read_file", path="README.md"),
    ]
    slow, nxt = shell(worker, *calls, events=events)
    err = slow["error"]
    assert err["type"] == "timeout-error"
    # The command's own limit fired (inside the executor's 1 s), so the result
    # still says what the command printed and how it ended.
    assert err["details"]["timeout_s"] < 1
    assert nxt["ok"] is True
    printed = "".join(e["data"] for e in events if e["kind"] == "stdout")
    assert err["details"]["stdout"].strip() == printed.strip() == "started"
    _wait_gone("sleep", "3003")


def test_t_can_01_cancel_kills_the_running_command_and_cancels_the_rest(
    make_worker: MakeWorker, confined: str
) -> None:
    user_config("[tools.shell]\n" + confined)
    worker = make_worker()
    calls = [sh("long", "echo started; sleep 3004"), sh("after", ["echo", "never"])]
    plan = worker.plan({"calls": calls})
    printed: list[str] = []
    running = threading.Event()

    def emit(event: Any) -> None:
        if event.kind == "stdout":
            printed.append(event.data)
            running.set()

    out: dict[str, Any] = {}
    runner = threading.Thread(
        target=lambda: out.update(
            worker.execute({"batch_id": plan["batch_id"], "approved": ["long", "after"]}, emit)
        )
    )
    runner.start()
    assert running.wait(HANG)
    worker.cancel({"batch_id": plan["batch_id"]})
    runner.join(HANG)
    long_, after = out["results"]
    assert long_["error"]["type"] == "cancelled"
    assert after["error"]["type"] == "cancelled"
    assert out["state"] == "cancelled"
    _wait_gone("sleep", "3004")


ORPHAN = (
    # The shell and its background child both ignore SIGTERM; the child holds
    # stdout and stderr open and would live for 1000 s.
    "trap '' TERM; (trap '' TERM; exec sleep 3005) & echo started"
)


def test_orphan_that_ignores_sigterm_and_holds_the_pipe_cannot_hang_a_timed_out_call(
    make_worker: MakeWorker, confined: str
) -> None:
    user_config(FAST_KILL + confined)
    (r,) = shell(make_worker(), sh("1", ORPHAN + "; sleep 3006", timeout=0.5))
    details = r["error"]["details"]
    assert details["signal"] == "SIGKILL"  # SIGTERM was ignored
    _wait_gone("sleep", "3005", limit=0)
    _wait_gone("sleep", "3006", limit=0)


def test_orphan_left_behind_by_a_finished_command_is_stopped(
    make_worker: MakeWorker, confined: str
) -> None:
    user_config(FAST_KILL + confined)
    started = time.monotonic()
    (r,) = shell(make_worker(), sh("1", ORPHAN))
    assert time.monotonic() - started < HANG
    res = r["result"]
    assert res["exit_code"] == 0
    if "none" in confined:
        # In the sandbox the orphan dies with the namespace, before it can hold anything.
        assert "left processes running" in res["note"]
    _wait_gone("sleep", "3005", limit=0)


def test_job_control_shell_cannot_hide_a_job_in_another_group(
    make_worker: MakeWorker, confined: str
) -> None:
    # With job control (set -m) each background job gets its own process
    # group, but stays in the command's session: it is stopped too.
    user_config(FAST_KILL + confined)
    (r,) = shell(
        make_worker(),
        sh("1", "set -m; sleep 3007 >/dev/null 2>&1 & echo started; sleep 3008", timeout=0.5),
    )
    assert r["error"]["type"] == "timeout-error"
    _wait_gone("sleep", "3008", limit=0)
    _wait_gone("sleep", "3007", limit=0)  # its own group, gone as well


def _live_run(c: Client, calls: list[dict[str, Any]], timeout: float = HANG) -> dict[str, Any]:
    plan = c.call("plan", {"calls": calls})
    ids = [i["id"] for i in plan["items"]]
    return dict(c.call("execute", {"batch_id": plan["batch_id"], "approved": ids}, timeout=timeout))


def _wait_gone(*argv: str, limit: float = HANG) -> None:
    end = time.monotonic() + limit
    while running(*argv):
        assert time.monotonic() < end, f"{' '.join(argv)} outlived its call"
        time.sleep(0.02)


def test_nothing_of_a_killed_command_survives_and_daemons_end_with_the_call(
    project: Path, tmp_path: Path
) -> None:
    """Over a real worker: a group that ignores SIGTERM is gone after a timeout, and a
    daemon that left the command's session ends with the call (the sandbox's PID
    namespace ends when the command does)."""
    cfg = tmp_path / "config.toml"
    cfg.write_text(FAST_KILL)
    with WorkerProcess(project, config=cfg) as proc, Client(proc.port) as c:
        c.call("hello", {"token": proc.token})
        res = _live_run(
            c,
            [sh("1", "trap '' TERM; (trap '' TERM; exec sleep 1001) & sleep 1002", timeout=0.5)],
        )
        assert res["results"][0]["error"]["type"] == "timeout-error"
        _wait_gone("sleep", "1001")
        _wait_gone("sleep", "1002")
        res = _live_run(c, [sh("2", "setsid sleep 1003 >/dev/null 2>&1 </dev/null & echo started")])
        assert res["results"][0]["result"]["stdout"] == "started\n"
        _wait_gone("sleep", "1003")
        assert c.call("ping") == {}


# --- streaming -----------------------------------------------------------------------------


def test_it_cmd_01_chunks_stream_while_the_command_runs_and_the_result_is_journaled(
    project: Path, tmp_path: Path
) -> None:
    state = tmp_path / "state"
    events: list[dict[str, Any]] = []
    first = threading.Event()

    def on_event(event: dict[str, Any]) -> None:
        events.append(event)
        if event["kind"] == "stdout" and "first" in event.get("data", ""):
            first.set()

    script = "echo first; while [ ! -e go ]; do sleep 0.02; done; echo second; echo oops >&2"
    with (
        WorkerProcess(project, state_dir=state) as proc,
        Client(proc.port, on_event=on_event) as c,
    ):
        c.call("hello", {"token": proc.token})
        plan = c.call("plan", {"calls": [sh("cmd", script)]})
        fut = c.call_async("execute", {"batch_id": plan["batch_id"], "approved": ["cmd"]})
        # The first line arrives while the command still waits for us.
        assert first.wait(HANG)
        assert not fut.done()
        (project / "go").touch()
        res = json.loads(fut.result(HANG))
    result = res["results"][0]
    assert result["result"]["stdout"] == "first\nsecond\n"
    kinds = [e["kind"] for e in events]
    assert kinds[0] == "started" and kinds[-1] == "finished"
    assert "".join(e["data"] for e in events if e["kind"] == "stdout") == "first\nsecond\n"
    assert "".join(e["data"] for e in events if e["kind"] == "stderr") == "oops\n"
    # The final result is what is recorded; the chunks are not.
    db = sqlite3.connect(state / "journal.sqlite3")
    (stored,) = db.execute(
        "SELECT result FROM results WHERE batch_id=?", (plan["batch_id"],)
    ).fetchone()
    db.close()
    assert json.loads(stored) == result


def test_streaming_waits_instead_of_dropping_when_the_receiver_is_slow(tmp_path: Path) -> None:
    received: list[str] = []

    def slow_send(kind: str, text: str) -> None:
        time.sleep(0.002)
        received.append(text)

    channel = Channel(slow_send, capacity=64 << 10, event_bytes=16 << 10)
    outcome = process.run(
        ["sh", "-c", "seq 1 400000"],
        cwd=str(tmp_path),
        env=dict(os.environ),
        on_output=channel,
    )
    channel.close(HANG)
    expected = "".join(f"{i}\n" for i in range(1, 400001))
    assert outcome.returncode == 0
    assert "".join(received) == expected


def test_queued_chunks_of_one_stream_are_coalesced() -> None:
    release = threading.Event()
    sent: list[tuple[str, str]] = []

    def send(kind: str, text: str) -> None:
        release.wait(HANG)  # the receiver is busy while the chunks queue up
        sent.append((kind, text))

    channel = Channel(send, event_bytes=4096)
    channel.put("stdout", b"first ")
    time.sleep(0.05)  # taken by the sender, which now blocks
    for i in range(100):
        channel.put("stdout", b"%03d," % i)
    channel.put("stderr", b"err")
    channel.put("stdout", b"last")
    release.set()
    channel.close(HANG)
    assert sent == [
        ("stdout", "first "),
        ("stdout", "".join(f"{i:03}," for i in range(100))),
        ("stderr", "err"),
        ("stdout", "last"),
    ]


def test_streamed_chunks_redact_a_secret_split_between_reads() -> None:
    got: list[str] = []
    channel = Channel(lambda kind, text: got.append(text), secrets=["hunter2-secret-value"])
    for piece in (b"password is hunter2-sec", b"ret-value, ", b"bye \xc3", b"\xa9\n"):
        channel.put("stdout", piece)
        time.sleep(0.01)  # let each piece go out on its own
    channel.close(HANG)
    text = "".join(got)
    assert text == "password is [REDACTED], bye é\n"


# --- environment -------------------------------------------------------------------------


def test_environment_is_scrubbed_by_the_denylist_and_removed_values_are_redacted(
    make_worker: MakeWorker, project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    secrets = {
        "GITHUB_TOKEN": "ghp-token-value-1234",
        "MY_API_KEY": "key-value-123456",
        "DB_PASSWORD": "password-value-99",
        "APP_SECRET": "app-secret-value-1",
        "AWS_DEFAULT_OUTPUT": "json",
        "ANTHROPIC_BASE_URL": "https://anthropic.example",
        "OPENAI_ORG": "org-openai-value",
        "GEMINI_API_KEY": "gemini-value-12345",
        "GOOGLE_API_KEY": "google-value-12345",
        "lower_case_token": "lower-token-value",
        "CUSTOM_THING": "custom-value-1234",
        # spellings the seed's patterns miss (found in review)
        "PGPASSWORD": "pg-password-value",
        "GITHUB_PAT": "github-pat-value-1",
        "AZURE_OPENAI_APIKEY": "azure-apikey-value",
    }
    kept = {"PLAIN_SETTING": "visible", "KEYBOARD": "us", "TOKENIZER": "fast"}
    for name, value in {**secrets, **kept}.items():
        monkeypatch.setenv(name, value)
    user_config('[tools.environment]\ndenylist = ["CUSTOM_*"]\n')
    (project / "leak.txt").write_text("db=password-value-99 format=json\n")
    worker = make_worker()
    events: list[dict[str, Any]] = []
    env_r, cat_r = shell(
        worker,
        sh("env", ["env"], env={"ADDED": "yes"}),
        sh("cat", ["cat", "leak.txt"]),
        events=events,
    )
    names = {
        line.split("=", 1)[0] for line in env_r["result"]["stdout"].splitlines() if "=" in line
    }
    assert not names & set(secrets)
    assert set(kept) <= names and "ADDED" in names
    # Values of removed variables are redacted from output, streamed and final;
    # short ones ("json") would blank out ordinary text and are left alone.
    assert cat_r["result"]["stdout"] == "db=[REDACTED] format=json\n"
    streamed = "".join(e.get("data", "") for e in events)
    assert "password-value-99" not in streamed and "[REDACTED]" in streamed


def test_clean_environment_matches_without_regard_to_case() -> None:
    env = clean_environment(
        list(BUILTIN_ENV_DENYLIST),
        base={"aws_profile": "x", "Some_Password": "y" * 10, "PATH": "/bin"},
    )
    assert env.env == {"PATH": "/bin"}
    assert env.removed == ["Some_Password", "aws_profile"]
    assert env.secrets == ["y" * 10]


# --- approval and the read-only classifier ----------------------------------------------------


def test_run_shell_always_asks_by_default_and_shows_argv_cwd_and_env(
    make_worker: MakeWorker,
) -> None:
    worker = make_worker()
    plan = worker.plan(
        {
            "calls": [
                sh("ro", ["git", "status"]),
                sh("rw", ["rm", "-rf", "build"], cwd="src", env={"MODE": "fast it"}),
            ]
        }
    )
    ro, rw = plan["items"]
    assert ro["disposition"] == rw["disposition"] == "confirm"
    assert (ro["risk"], rw["risk"]) == ("low", "high")
    assert rw["summary"] == "Run rm -rf build (in src) with MODE='fast it'"
    preview = rw["preview"]
    assert 'argv:    ["rm", "-rf", "build"]' in preview
    assert "cwd:     src  (" in preview
    assert 'MODE="fast it"' in preview
    assert "risk:    high" in preview


def test_auto_approval_of_read_only_commands_is_the_users_choice_only(
    make_worker: MakeWorker, project: Path
) -> None:
    project_config(project, "[tools.approval]\nread_only_commands = 'auto'\n")
    loaded = load(project)
    assert loaded.config.tools.approval.read_only_commands == "prompt"
    assert any("read_only_commands" in w for w in loaded.warnings)
    plan = make_worker().plan({"calls": [sh("1", ["ls"])]})
    assert plan["items"][0]["disposition"] == "confirm"

    user_config("[tools.approval]\nread_only_commands = 'auto'\n")
    worker = make_worker()
    plan = worker.plan(
        {"calls": [sh("ls", ["ls"]), sh("rm", ["rm", "x"]), sh("env", ["ls"], env={"A": "b"})]}
    )
    assert [i["disposition"] for i in plan["items"]] == ["execute", "confirm", "confirm"]
    result = worker.execute({"batch_id": plan["batch_id"]}, lambda e: None)
    assert "README.md" in result["results"][0]["result"]["stdout"]


def test_unreviewed_read_only_commands_are_checked_against_the_sandbox(
    make_worker: MakeWorker, project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    user_config("[tools.approval]\nread_only_commands = 'auto'\n")
    (project / ".env").write_text("SECRET=1\n")
    (tmp_path / "outside.txt").write_text("outside\n")
    (project / "escape").symlink_to(tmp_path / "outside.txt")
    (project / "id_rsa").write_text("-----BEGIN KEY-----\nsearchme\n")
    results = shell(
        make_worker(),
        sh("env", ["cat", ".env"]),
        sh("link", ["cat", "escape"]),
        sh("rg", ["rg", "-l", "searchme"]),
        sh("ok", "cat README.md"),
    )
    env_r, link_r, rg_r, ok_r = results
    assert env_r["error"]["type"] == "permission-error"
    assert "nothing was run" in env_r["error"]["message"]
    assert link_r["error"]["type"] == "permission-error"
    # rg runs with the sandbox's denied patterns excluded: id_rsa is not searched.
    assert rg_r["error"]["details"]["exit_code"] == 1  # rg: no match
    assert ok_r["result"]["stdout"] == "# demo\n"
    # A program found inside the project is not trusted to only read.
    (project / "bin").mkdir()
    fake = project / "bin" / "ls"
    fake.write_text("#!/bin/sh\necho pwned\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{project / 'bin'}:{os.environ['PATH']}")
    (r,) = shell(make_worker(), sh("fake", ["ls"]))
    assert r["error"]["type"] == "permission-error"
    assert "inside the project" in r["error"]["message"]


def test_unreviewed_calls_found_in_review_are_refused(
    make_worker: MakeWorker, project: Path
) -> None:
    """Auto-approved calls that read denied files or run repository config: refused."""
    user_config("[tools.approval]\nread_only_commands = 'auto'\n")
    (project / ".env").write_text("OPENAI_API_KEY=sk-live-SECRET123\n")
    (project / "empty").mkdir()
    (project / "vendor" / "lib" / ".git").mkdir(parents=True)
    subprocess.run(["git", "init", "-q"], cwd=project, check=True)
    worker = make_worker()
    calls = [
        sh("date", ["diff", "--from-file=.env", "README.md"]),
        sh("diffdir", ["diff", "empty", "src"]),
        {
            "id": "nested",
            "name": "run_shell",
            "args": {"cmd": ["git", "status"]},
            "meta": {"cwd": "vendor/lib"},
        },
        sh("own", ["git", "status", "--short"]),
    ]
    plan = worker.plan({"calls": calls})
    assert [i["disposition"] for i in plan["items"]] == ["execute"] * 4
    date_r, diff_r, nested_r, own_r = worker.execute(
        {"batch_id": plan["batch_id"]}, lambda e: None
    )["results"]
    for r in (date_r, diff_r, nested_r):
        assert r["error"]["type"] == "permission-error", r
        assert "nothing was run" in r["error"]["message"]
        assert "SECRET123" not in json.dumps(r)
    assert "reads every file in it" in diff_r["error"]["message"]
    assert "repository of its own" in nested_r["error"]["message"]
    # The project's own repository still answers.
    assert own_r["ok"] is True, own_r


def test_output_is_not_lost_when_the_receiver_is_slow(make_worker: MakeWorker) -> None:
    """Found in review: waiting for a slow receiver is not time a leftover holds the pipes."""
    worker = make_worker()
    seen: list[int] = []

    def slow(event: dict[str, Any]) -> None:
        if event.get("kind") == "stdout":
            seen.append(len(event["data"]))
            if len(seen) == 2:
                time.sleep(3)  # longer than the drain limits

    plan = worker.plan(
        {"calls": [sh("big", "head -c 5000000 /dev/zero | tr '\\0' a; echo END-MARKER")]}
    )
    result = worker.execute(
        {"batch_id": plan["batch_id"], "approved": ["big"], "capacity_bytes": 200_000},
        lambda e: slow(e.wire()),
    )["results"][0]
    assert result["ok"] is True, result
    assert result["result"]["stdout"].rstrip().endswith("END-MARKER")
    assert "left processes running" not in json.dumps(result)
    assert sum(seen) == 5_000_011


def test_reviewed_call_whose_context_changed_is_not_run(
    make_worker: MakeWorker, project: Path
) -> None:
    (project / "work").mkdir()
    (project / "other").mkdir()
    worker = make_worker()
    plan = worker.plan({"calls": [sh("1", ["touch", "made"], cwd="work")]})
    # Between review and run, "work" becomes a link to another directory.
    (project / "work").rmdir()
    (project / "work").symlink_to(project / "other")
    result = worker.execute({"batch_id": plan["batch_id"], "approved": ["1"]}, lambda e: None)
    err = result["results"][0]["error"]
    assert "differs from what was approved" in err["message"]
    assert not (project / "other" / "made").exists()


def test_a_script_written_earlier_in_the_batch_can_be_run(make_worker: MakeWorker) -> None:
    # The review names a path program as given: the file may not exist yet.
    worker = make_worker()
    wrote, ran, via_sh = shell(
        worker,
        call("w", "write_file", path="tool.sh", content="echo from the script\n"),
        sh("x", ["./tool.sh"]),
        sh("s", ["sh", "tool.sh"]),
    )
    assert wrote["ok"], wrote
    # Written files are not executable: a precise error, not "changed since review".
    assert ran["error"]["type"] == "process-error"
    assert "permission denied" in ran["error"]["message"]
    assert via_sh["result"]["stdout"] == "from the script\n"
