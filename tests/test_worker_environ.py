"""The running worker holds no secret in its own environment.

``/proc/<pid>/environ`` shows the environment a process was started with;
deleting a variable from ``os.environ`` does not change it.  So each test
starts the real worker the way its hosts do (Emacs: the token on stdin;
older hosts: the token in ``FORJ_TOKEN``; an MCP client; an SDK host) with
provider keys, tokens and passwords in its environment, waits until it
answers, and reads the running process's ``/proc/<pid>/environ``.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import user_config

from forj_py.safety.secretenv import BUILTIN_ENV_DENYLIST
from forj_py.transport.client import Client, WorkerProcess

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="reads /proc/<pid>/environ"
)

ROOT = Path(__file__).resolve().parent.parent
# What a developer's shell holds: provider keys, forge tokens, cloud keys,
# passwords under short names, and credentials under innocent names.
SECRETS = {
    "OPENAI_API_KEY": "sk-proj-" + "o" * 40,
    "ANTHROPIC_API_KEY": "sk-ant-" + "a" * 40,
    "GEMINI_API_KEY": "AIza" + "g" * 35,
    "GITHUB_TOKEN": "ghp_" + "h" * 36,
    "AWS_SECRET_ACCESS_KEY": "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
    "AWS_ACCESS_KEY_ID": "AKIAIOSFODNN7EXAMPLE",
    "MYSQL_PWD": "correct-horse-battery",
    "Npm_Auth": "npm-auth-value-1234",  # names match without regard to case
    "INNOCENT_SETTING": "sk-" + "i" * 30,  # a key's shape under any name
    "UPSTREAM": "https://deploy:hunter2-hunter2@git.example/repo.git",
}
PLAIN = {"EDITOR": "emacsclient", "FORJ_PLAIN_SETTING": "visible-value"}


def environ_of(pid: int) -> dict[str, str]:
    raw = Path(f"/proc/{pid}/environ").read_bytes()
    pairs = (item.split(b"=", 1) for item in raw.split(b"\0") if b"=" in item)
    return {k.decode(errors="replace"): v.decode(errors="replace") for k, v in pairs}


def assert_no_secret(pid: int, token: str | None = None) -> dict[str, str]:
    env = environ_of(pid)
    raw = Path(f"/proc/{pid}/environ").read_text(errors="replace")
    for name, value in SECRETS.items():
        assert name not in env, name
        assert value not in raw, name
    assert "FORJ_TOKEN" not in env
    if token is not None:
        assert token not in raw
    for name, value in PLAIN.items():
        assert env.get(name) == value  # the rest of the environment is kept
    return env


def secret_env() -> dict[str, str]:
    return {**os.environ, **SECRETS, **PLAIN}


@pytest.mark.parametrize("token_in_env", [False, True], ids=["token-on-stdin", "token-in-env"])
def test_attack_running_worker_holds_no_secret_in_its_own_environ(
    project: Path, token_in_env: bool
) -> None:
    """A process of the user reads the worker's /proc/<pid>/environ: no key, no token."""
    with WorkerProcess(project, env=secret_env(), token_in_env=token_in_env) as proc:
        with Client(proc.port) as c:
            assert c.call("hello", {"token": proc.token})["root"]  # the token still works
        assert_no_secret(proc.proc.pid, proc.token)
        assert str(proc.proc.pid) in Path(f"/proc/{proc.proc.pid}/stat").read_text()


def test_attack_worker_started_from_a_console_script_holds_no_secret(project: Path) -> None:
    """The forj-worker entry point restarts itself as the same program."""
    script = Path(sys.executable).with_name("forj-worker")
    if not script.exists():
        pytest.skip("forj-worker is not installed in this environment")
    token = "c" * 32
    proc = subprocess.Popen(
        [str(script), "--root", str(project)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**secret_env(), "FORJ_TOKEN": token},
    )
    try:
        assert proc.stdout is not None
        port = int(proc.stdout.readline())
        with Client(port) as c:
            c.call("hello", {"token": token})
        assert_no_secret(proc.pid, token)
    finally:
        assert proc.stdin is not None
        proc.stdin.close()
        proc.wait(10)
        for stream in (proc.stdout, proc.stderr):
            assert stream is not None
            stream.close()


def test_attack_secrets_only_the_users_config_names_leave_the_workers_environ(
    project: Path,
) -> None:
    """[tools.environment] denylist adds names: gone from /proc/<pid>/environ too."""
    user_config('[tools.environment]\ndenylist = ["ACME_*"]\n')
    env = {**secret_env(), "ACME_INTERNAL": "acme-internal-credential"}
    with WorkerProcess(project, env=env) as proc:
        with Client(proc.port) as c:
            c.call("hello", {"token": proc.token})
        seen = assert_no_secret(proc.proc.pid, proc.token)
        assert "ACME_INTERNAL" not in seen
        assert "acme-internal-credential" not in Path(f"/proc/{proc.proc.pid}/environ").read_text()


@pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bubblewrap")
def test_attack_secrets_the_worker_dropped_are_still_removed_and_redacted_for_commands(
    project: Path,
) -> None:
    """After the restart the worker no longer has the values, but still knows them:
    a command that prints one (from a file) shows [REDACTED], and the review
    still lists the names removed."""
    (project / "leak.txt").write_text(SECRETS["MYSQL_PWD"] + "\n" + SECRETS["GITHUB_TOKEN"] + "\n")
    with WorkerProcess(project, env=secret_env()) as proc, Client(proc.port) as c:
        c.call("hello", {"token": proc.token})
        call = {"id": "1", "name": "run_shell", "args": {"cmd": ["sh", "-c", "cat leak.txt; env"]}}
        plan = c.call("plan", {"calls": [call]})
        preview = json.dumps(plan)
        assert "MYSQL_PWD" in preview and "OPENAI_API_KEY" in preview  # "removed: ..."
        res = c.call("execute", {"batch_id": plan["batch_id"], "approved": ["1"]}, timeout=60)
        result = res["results"][0]
        assert result["ok"], result
        text = result["result"]["stdout"]
        assert "[REDACTED]" in text
        for name, value in SECRETS.items():
            assert f"{name}=" not in text and value not in text
        assert "FORJ_PLAIN_SETTING=visible-value" in text
        assert "FORJ_HANDOVER_FD" not in text


def _first_line(proc: subprocess.Popen[bytes]) -> bytes:
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert line, f"no reply; exit status {proc.poll()}"
    return line


def _standalone(project: Path, tmp_path: Path, mode: str) -> subprocess.Popen[bytes]:
    home = tmp_path / f"home-{mode}"
    (home / "state").mkdir(parents=True)
    (home / "config.toml").write_text("")
    return subprocess.Popen(
        [
            *(sys.executable, "-m", "forj_py", mode, "--root", str(project)),
            *("--config", str(home / "config.toml"), "--state-dir", str(home / "state")),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env={**secret_env(), "FORJ_TOKEN": "m" * 32},
    )


def _close(proc: subprocess.Popen[bytes]) -> None:
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.close()
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    proc.stdout.close()


def test_attack_mcp_server_holds_no_secret_in_its_own_environ(
    project: Path, tmp_path: Path
) -> None:
    """python -m forj_py mcp, as an MCP client starts it with the user's whole environment."""
    pytest.importorskip("mcp")
    proc = _standalone(project, tmp_path, "mcp")
    try:
        assert proc.stdin is not None
        hello = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": {"name": "test", "version": "0"},
            },
        }
        proc.stdin.write(json.dumps(hello).encode() + b"\n")
        proc.stdin.flush()
        reply = json.loads(_first_line(proc))
        assert reply["id"] == 1 and "result" in reply
        assert_no_secret(proc.pid, "m" * 32)
    finally:
        _close(proc)


def test_attack_sdk_host_holds_no_secret_in_its_own_environ(project: Path, tmp_path: Path) -> None:
    """python -m forj_py sdk, as an embedding host starts it."""
    proc = _standalone(project, tmp_path, "sdk")
    try:
        assert proc.stdin is not None
        proc.stdin.write(json.dumps({"type": "SessionOpen", "session_id": "s1"}).encode() + b"\n")
        proc.stdin.flush()
        reply = json.loads(_first_line(proc))
        assert reply["type"] == "SessionOpened", reply
        assert_no_secret(proc.pid, "m" * 32)
    finally:
        _close(proc)


def test_emacs_starts_the_worker_without_the_variables_the_worker_calls_secret() -> None:
    """elisp/forj-worker.el keeps the worker's own list of secret names."""
    text = (ROOT / "elisp" / "forj-worker.el").read_text(encoding="utf-8")
    body = re.search(r"\(defconst forj-worker-secret-variables\s+'\(([^)]*)\)", text)
    assert body is not None
    assert tuple(re.findall(r'"([^"]+)"', body.group(1))) == BUILTIN_ENV_DENYLIST
