"""proc_list (seed 004 section 5.2) over real processes read from /proc."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import MakeWorker, call

from forj_py.safety.cmdline import redact_argv
from forj_py.service import Worker

SLEEPER = "import sys, time; time.sleep(60)"
SECRET = "ghp_" + "Q" * 36


def detached(cwd: Path, *argv: str) -> int:
    """Start a process that is not the worker's descendant (its parent exits at once)."""
    script = " ".join(f"'{a}'" for a in argv) + " >/dev/null 2>&1 & echo $!"
    out = subprocess.run(["sh", "-c", script], cwd=cwd, capture_output=True, check=True)
    return int(out.stdout)


@pytest.fixture
def started() -> Iterator[list[int]]:
    pids: list[int] = []
    yield pids
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def listing(worker: Worker, approve: bool = False, **args: Any) -> dict[str, Any]:
    plan = worker.plan({"calls": [call("c", "proc_list", **args)]})
    (item,) = plan["items"]
    if item["disposition"] == "resolved":
        return dict(item["result"])
    approved = ["c"] if approve else []
    reply = worker.execute({"batch_id": plan["batch_id"], "approved": approved}, lambda e: None)
    (entry,) = reply["results"]
    return dict(entry)


def test_seed_004_proc_list_shows_forj_and_the_project_not_the_rest(
    make_worker: MakeWorker, project: Path, tmp_path: Path, started: list[int]
) -> None:
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (project / "sub").mkdir()
    inside_pid = detached(project / "sub", sys.executable, "-c", SLEEPER, "inside-marker")
    outside_pid = detached(outside, sys.executable, "-c", SLEEPER, "outside-marker")
    child = subprocess.Popen([sys.executable, "-c", SLEEPER, "child-marker"], cwd=outside)
    started += [inside_pid, outside_pid]
    try:
        entry = listing(make_worker())
    finally:
        child.kill()
        child.wait()
    assert entry["ok"], entry
    rows = {r["pid"]: r for r in entry["result"]["processes"]}
    # Working inside the project: listed, with its directory relative to the root.
    assert rows[inside_pid]["cwd"] == "sub" and "inside-marker" in rows[inside_pid]["cmd"]
    assert "forj" not in rows[inside_pid]
    # The worker itself and what it started are forj's own, wherever they work.
    assert rows[os.getpid()]["forj"] == "worker"
    assert rows[child.pid]["forj"] == "command" and "cwd" not in rows[child.pid]
    # Anything else of the user's is not listed without review.
    assert outside_pid not in rows
    assert entry["result"]["scope"] == "project"
    assert all({"pid", "cmd", "cpu", "mem_mb"} <= set(r) for r in rows.values())
    assert rows[inside_pid]["mem_mb"] > 0


def test_seed_004_proc_list_of_all_the_users_processes_is_reviewed(
    make_worker: MakeWorker, tmp_path: Path, started: list[int]
) -> None:
    outside_pid = detached(tmp_path, sys.executable, "-c", SLEEPER, "outside-marker")
    started.append(outside_pid)
    w = make_worker()
    plan = w.plan({"calls": [call("c", "proc_list", scope="user")]})
    (item,) = plan["items"]
    assert item["disposition"] == "confirm"
    assert "every process you run" in item["warnings"][0]
    # Even an allow rule does not skip that review.
    denied = listing(w, scope="user")
    assert not denied["ok"] and denied["error"]["type"] == "permission-error"
    entry = listing(w, approve=True, scope="user", filter="outside-marker")
    assert entry["ok"], entry
    assert [r["pid"] for r in entry["result"]["processes"]] == [outside_pid]


def test_seed_004_proc_list_redacts_command_lines_before_the_filter_sees_them(
    make_worker: MakeWorker, project: Path, started: list[int]
) -> None:
    pid = detached(project, sys.executable, "-c", SLEEPER, f"--token={SECRET}", SECRET)
    started.append(pid)
    w = make_worker()
    entry = listing(w, filter="token")
    (row,) = [r for r in entry["result"]["processes"] if r["pid"] == pid]
    assert SECRET not in row["cmd"] and "[REDACTED]" in row["cmd"]
    # A filter cannot find the secret's characters: it sees the redacted text.
    probe = listing(w, filter="ghp_Q")
    assert pid not in [r["pid"] for r in probe["result"]["processes"]]


def test_seed_004_proc_list_limit_filter_and_bad_regex(
    make_worker: MakeWorker, project: Path, started: list[int]
) -> None:
    for n in range(3):
        started.append(detached(project, sys.executable, "-c", SLEEPER, f"many-{n}"))
    w = make_worker()
    entry = listing(w, filter="many-[0-9]", limit=2)
    result = entry["result"]
    assert len(result["processes"]) == 2 and result["total"] == 3 and result["truncated"]
    assert "1 more" in result["note"]
    assert listing(w, filter="many-[0-9]")["result"]["total"] == 3
    bad = listing(w, filter="(unclosed")
    assert not bad["ok"] and "not a valid regex" in bad["error"]["message"]
    # The default (and the seed's) limit is 50 rows.
    plan = w.plan({"calls": [call("c", "proc_list")]})
    assert plan["items"][0]["disposition"] == "execute"


def test_seed_004_proc_list_redacts_secrets_by_their_position_in_argv(
    make_worker: MakeWorker, project: Path, started: list[int]
) -> None:
    # Real processes whose argv carries secrets in the usual places: a
    # pattern over the joined line sees none of these.
    secrets = {
        "glued -p": ("-pHunter2Mysql",),
        "--password": ("--password", "SpacedPassw0rd"),
        "-u user:pass": ("-u", "bob:BasicPassw0rd"),
        "--token": ("--token", "SpacedTok3nValue"),
        "--passwd": ("--passwd", "PasswdValue77"),
        "--pass": ("--pass", "PassValue88"),
        "--secret": ("--secret", "SecretValue99"),
        "--api-key": ("--api-key", "ApiKeyValue11"),
        "--auth": ("--auth", "AuthValue22"),
        "--user=": ("--user=al:UserPassValue33",),
        "header": ("-H", "X-Api-Key: HeaderValue44"),
        "--header": ("--header", "Authorization: Basic YWxhZGRpbjpvcGVu"),
        "env": ("PGPASSWORD=PgPassValue55",),
        "url": ("https://deploy:UrlPassValue66@example.com/repo.git",),
    }
    words = [w for group in secrets.values() for w in group]
    pid = detached(project, sys.executable, "-c", SLEEPER, *words, "--port", "8080")
    sshpass = project / "sshpass"
    sshpass.write_text(f"#!{sys.executable}\nimport time\ntime.sleep(60)\n")
    sshpass.chmod(0o755)
    sshpass_pid = detached(project, str(sshpass), "-p", "1234567", "ssh", "-p", "2222", "host")
    started += [pid, sshpass_pid]
    w = make_worker()
    rows = {r["pid"]: r for r in listing(w)["result"]["processes"]}
    cmd = rows[pid]["cmd"]
    for value in (
        "Hunter2Mysql",
        "SpacedPassw0rd",
        "BasicPassw0rd",
        "SpacedTok3nValue",
        "PasswdValue77",
        "PassValue88",
        "SecretValue99",
        "ApiKeyValue11",
        "AuthValue22",
        "UserPassValue33",
        "HeaderValue44",
        "YWxhZGRpbjpvcGVu",
        "PgPassValue55",
        "UrlPassValue66",
    ):
        assert value not in cmd, (value, cmd)
    # What is not a secret stays readable: the user, the header name, a port.
    for kept in ("-u bob:", "X-Api-Key:", "Authorization:", "PGPASSWORD=", "deploy:", "8080"):
        assert kept in cmd, (kept, cmd)
    # sshpass -p is a password even when it is a number; ssh's -p is a port.
    ssh = rows[sshpass_pid]["cmd"]
    assert "1234567" not in ssh and "ssh -p 2222 host" in ssh
    # Not forj's own: the program shows by name, not by the path it ran from.
    assert rows[pid]["cmd"].startswith(os.path.basename(sys.executable) + " -c ")
    # A filter sees the redacted line only.
    probe = listing(w, filter="Hunter2|SpacedTok3n|1234567")
    assert [r["pid"] for r in probe["result"]["processes"]] == []


@pytest.mark.parametrize(
    ("argv", "shown"),
    [
        (["ssh", "-p", "2222", "host"], "ssh -p 2222 host"),
        (["docker", "run", "-p", "8080:80", "img"], "docker run -p 8080:80 img"),
        (["mysql", "-p", "s3cret"], "mysql -p [REDACTED]"),
        (["tool", "--password-file", "/run/pw"], "tool --password-file /run/pw"),
        (["tool", "--db-password=x1"], "tool --db-password=[REDACTED]"),
        (["git", "log", "--author", "bob"], "git log --author bob"),
        (["java", "-Ddb.password=x2", "-jar", "a.jar"], "java -Ddb.password=[REDACTED] -jar a.jar"),
        (["env", "AUTHOR=me", "GITHUB_TOKEN=x3"], "env AUTHOR=me GITHUB_TOKEN=[REDACTED]"),
        (["curl", "-HCookie: sid=x4"], "curl -HCookie: [REDACTED]"),
        (["curl", "-uuser:x5", "-u", "plainuser"], "curl -uuser:[REDACTED] -u plainuser"),
    ],
)
def test_seed_004_proc_list_positional_rules_keep_what_is_not_a_secret(
    argv: list[str], shown: str
) -> None:
    assert " ".join(redact_argv(argv)) == shown
