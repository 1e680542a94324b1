"""A hostile repository or a sly call cannot make the git tools run a program or leak a file."""

from __future__ import annotations

import base64
import contextlib
import os
import socket
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import MakeWorker, call, user_config

from forj_py.service import Worker


@pytest.fixture(autouse=True)
def _identity(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = tmp_path / "gitconfig"
    config.write_text(
        '[user]\n\tname = T\n\temail = t@example.com\n[protocol "file"]\n\tallow = always\n'
    )
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(config))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")


def git(root: Path, *args: str) -> str:
    env = {k: v for k, v in os.environ.items() if k not in ("GIT_DIR", "GIT_WORK_TREE")}
    done = subprocess.run(["git", *args], cwd=root, env=env, capture_output=True, check=False)
    assert done.returncode == 0, done.stderr.decode()
    return done.stdout.decode()


def run_one(worker: Worker, name: str, **args: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    plan = worker.plan({"calls": [call("c", name, **args)]})
    done = worker.execute({"batch_id": plan["batch_id"], "approved": ["c"]}, lambda e: None)
    result: dict[str, Any] = done["results"][0]
    return plan, result


def test_sec_git_01_a_submodules_filter_does_not_run_on_git_status(
    make_worker: MakeWorker, project: Path, tmp_path: Path
) -> None:
    source = tmp_path / "subsrc"
    source.mkdir()
    git(source, "init", "-q", "-b", "main")
    (source / "f.txt").write_text("x\n")
    (source / ".gitattributes").write_text("* filter=evil\n")
    git(source, "add", "-A")
    git(source, "commit", "-qm", "s")
    git(project, "init", "-q", "-b", "main")
    git(project, "add", "-A")
    git(project, "commit", "-qm", "a")
    git(project, "-c", "protocol.file.allow=always", "submodule", "add", "-q", str(source), "sub")
    git(project, "commit", "-qm", "sub")
    marker = tmp_path / "PWNED"
    config = project / ".git" / "modules" / "sub" / "config"
    config.write_text(config.read_text() + f'[filter "evil"]\n\tclean = touch {marker} && cat\n')
    os.utime(project / "sub" / "f.txt", (1_000_000_000, 1_000_000_000))  # stat-dirty
    worker = make_worker()
    for tool in ("git_status", "git_diff"):
        _, result = run_one(worker, tool)
        assert result["ok"], result
    assert not marker.exists()


def test_sec_git_02_a_local_remotes_hooks_do_not_run_on_push(
    make_worker: MakeWorker, project: Path, tmp_path: Path
) -> None:
    git(project, "init", "-q", "-b", "main")
    git(project, "add", "-A")
    git(project, "commit", "-qm", "a")
    bare = tmp_path / "r.git"
    git(tmp_path, "init", "-q", "--bare", str(bare))
    marker = tmp_path / "HOOKRAN"
    hook = bare / "hooks" / "pre-receive"
    hook.write_text(f"#!/bin/sh\ntouch {marker}\n")
    hook.chmod(0o755)
    git(project, "remote", "add", "origin", str(bare))
    _, result = run_one(make_worker(), "git_push", refspec="main")
    assert result["ok"], result
    assert git(bare, "rev-parse", "main") == git(project, "rev-parse", "main")
    assert not marker.exists()


def test_sec_git_03_the_repositorys_config_cannot_force_a_plain_push(
    make_worker: MakeWorker, project: Path, tmp_path: Path
) -> None:
    bare = tmp_path / "r.git"
    git(tmp_path, "init", "-q", "--bare", str(bare))
    git(project, "init", "-q", "-b", "main")
    git(project, "add", "-A")
    git(project, "commit", "-qm", "a")
    git(project, "remote", "add", "origin", str(bare))
    git(project, "push", "-q", "origin", "main")
    git(project, "commit", "-q", "--allow-empty", "-m", "remote-only")
    git(project, "push", "-q", "origin", "main")
    git(project, "reset", "-q", "--hard", "HEAD~1")
    git(project, "commit", "-q", "--allow-empty", "-m", "local")
    before = git(bare, "rev-parse", "main")
    git(project, "config", "remote.origin.push", "+refs/heads/*:refs/heads/*")
    _, result = run_one(make_worker(), "git_push")
    assert not result["ok"]  # git refuses the non-fast-forward push
    assert git(bare, "rev-parse", "main") == before


def test_sec_git_04_a_glob_never_matches_a_path_scoped_allow_rule(
    make_worker: MakeWorker, project: Path
) -> None:
    user_config('[permissions]\nallow = ["git_add(src/**)"]\n')
    git(project, "init", "-q", "-b", "main")
    git(project, "add", "-A")
    git(project, "commit", "-qm", "a")
    (project / "deploy.sh").write_text("evil\n")
    (project / "src" / "main.py").write_text("x\n")
    worker = make_worker()
    plan = worker.plan({"calls": [call("c", "git_add", paths=["src/main.py", "*"])]})
    assert plan["items"][0]["disposition"] == "confirm"
    only = worker.plan({"calls": [call("d", "git_add", paths=["src/main.py"])]})
    assert only["items"][0]["disposition"] == "execute"


def test_sec_git_05_a_rename_into_a_denied_file_is_left_out_of_git_diff(
    make_worker: MakeWorker, project: Path
) -> None:
    git(project, "init", "-q", "-b", "main")
    body = "".join(f"setting_{i} = {i}\n" for i in range(20))
    (project / "settings.txt").write_text(body)
    git(project, "add", "-A")
    git(project, "commit", "-qm", "a")
    git(project, "mv", "settings.txt", ".env")
    (project / ".env").write_text(body + "STRIPE_ACCT=acct_correcthorsebattery\n")
    git(project, "add", "-f", "-A")
    git(project, "commit", "-qm", "b")
    _, result = run_one(make_worker(), "git_diff", rev="HEAD~1")
    assert result["ok"], result
    assert "correcthorse" not in str(result)
    assert ".env" in result["result"]["omitted"]


class _Proxy:
    """A local HTTP proxy that asks for Basic credentials and keeps every request it saw."""

    def __init__(self) -> None:
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        self.seen: list[bytes] = []
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.server.accept()
            except OSError:
                return
            with conn:
                conn.settimeout(5)
                data = b""
                with contextlib.suppress(OSError):
                    while b"\r\n\r\n" not in data:
                        chunk = conn.recv(4096)
                        if not chunk:
                            break
                        data += chunk
                self.seen.append(data)
                with contextlib.suppress(OSError):
                    conn.sendall(
                        b"HTTP/1.1 401 Unauthorized\r\n"
                        b'WWW-Authenticate: Basic realm="r"\r\n'
                        b"Content-Length: 0\r\nConnection: close\r\n\r\n"
                    )

    def close(self) -> None:
        self.server.close()

    def saw(self, needle: bytes) -> bool:
        return any(needle in request for request in self.seen)


@pytest.fixture
def proxy() -> Iterator[_Proxy]:
    p = _Proxy()
    yield p
    p.close()


VICTIM_URL = "http://git.example.com/victim/repo.git"
TOKEN = "ghp_victimtoken0123456789abcdef"


def _store_credentials(tmp_path: Path) -> None:
    """The user's own git config keeps a token for the victim's host (credential.helper=store)."""
    store = tmp_path / "git-credentials"
    store.write_text(f"http://victim:{TOKEN}@git.example.com\n")
    config = tmp_path / "gitconfig"
    config.write_text(config.read_text() + f'[credential]\n\thelper = "store --file={store}"\n')


def _basic(user: str, secret: str) -> bytes:
    return base64.b64encode(f"{user}:{secret}".encode())


def test_sec_git_06_a_repository_set_proxy_never_gets_the_users_credentials(
    make_worker: MakeWorker, project: Path, tmp_path: Path, proxy: _Proxy
) -> None:
    _store_credentials(tmp_path)
    git(project, "init", "-q", "-b", "main")
    git(project, "add", "-A")
    git(project, "commit", "-qm", "a")
    git(project, "remote", "add", "origin", VICTIM_URL)
    git(project, "config", "http.proxy", f"http://127.0.0.1:{proxy.port}")
    git(project, "config", "http.sslVerify", "false")
    _, result = run_one(make_worker(), "git_pull", remote="origin", branch="main")
    assert not proxy.saw(_basic("victim", TOKEN))
    assert not proxy.seen  # nothing was sent at all
    assert not result["ok"]
    error = result["error"]
    assert error["details"]["code"] == "E_GIT", error
    assert "http.proxy" in error["message"] and "http.sslverify" in error["message"]
    assert error["details"]["rule"] == "git.network_config"
    assert "global git configuration" in error["recovery"][0]


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("http.extraHeader", "X-Leak: 1"),
        ("remote.origin.proxy", "http://127.0.0.1:1"),
        ("url.http://elsewhere.example/.insteadOf", "http://git.example.com/"),
        ("url.http://elsewhere.example/.pushInsteadOf", "http://git.example.com/"),
        ("credential.username", "victim"),
        ("credential.http://git.example.com.useHttpPath", "true"),
        ("http.http://git.example.com.proxy", "http://127.0.0.1:1"),
        ("transfer.bundleURI", "true"),
    ],
)
def test_sec_git_06_only_listed_repository_keys_are_honoured_on_the_network(
    make_worker: MakeWorker, project: Path, key: str, value: str
) -> None:
    git(project, "init", "-q", "-b", "main")
    git(project, "add", "-A")
    git(project, "commit", "-qm", "a")
    git(project, "remote", "add", "origin", VICTIM_URL)
    git(project, "config", key, value)
    worker = make_worker()
    for tool, args in (("git_pull", {"branch": "main"}), ("git_push", {"refspec": "main"})):
        _, result = run_one(worker, tool, remote="origin", **args)
        assert not result["ok"]
        assert result["error"]["details"]["code"] == "E_GIT", result
        assert "nothing was sent" in result["error"]["message"]


def test_sec_git_06_the_users_own_proxy_is_used(
    make_worker: MakeWorker, project: Path, tmp_path: Path, proxy: _Proxy
) -> None:
    config = tmp_path / "gitconfig"
    config.write_text(config.read_text() + f"[http]\n\tproxy = http://127.0.0.1:{proxy.port}\n")
    git(project, "init", "-q", "-b", "main")
    git(project, "add", "-A")
    git(project, "commit", "-qm", "a")
    git(project, "remote", "add", "origin", VICTIM_URL)
    git(project, "config", "remote.origin.gh-resolved", "base")  # data git does not read
    _, result = run_one(make_worker(), "git_pull", remote="origin", branch="main")
    assert not result["ok"]  # the proxy answers 401 and no credential is stored
    assert proxy.saw(b"/victim/repo.git/info/refs")


@pytest.mark.parametrize(
    ("init", "why"),
    [
        ([], "when forj started it had no repository"),
        (["--separate-git-dir=.fg"], "is not the project's own"),
    ],
)
def test_sec_git_07_a_git_directory_made_after_start_is_not_trusted(
    make_worker: MakeWorker,
    project: Path,
    tmp_path: Path,
    proxy: _Proxy,
    init: list[str],
    why: str,
) -> None:
    _store_credentials(tmp_path)
    worker = make_worker()  # no repository yet
    # What a sandboxed command may do in the writable project.
    git(project, "init", "-q", *init, "-b", "main", ".")
    git(project, "remote", "add", "origin", VICTIM_URL)
    for tool, args in (
        ("git_pull", {"remote": "origin", "branch": "main"}),
        ("git_status", {}),
        ("git_log", {}),
    ):
        _, result = run_one(worker, tool, **args)
        assert not result["ok"], result
        assert result["error"]["details"]["code"] == "E_GIT"
        assert why in result["error"]["message"]
    assert not proxy.seen
    if not init:
        # A worker started now takes the repository the user has.
        _, result = run_one(make_worker(), "git_status")
        assert result["ok"], result


def test_sec_git_07_a_nested_git_directory_cannot_replace_the_one_above(
    make_worker: MakeWorker, tmp_path: Path
) -> None:
    outer = tmp_path / "outer"
    (outer / "proj").mkdir(parents=True)
    (outer / "proj" / "a.txt").write_text("a\n")
    git(outer, "init", "-q", "-b", "main")
    git(outer, "add", "-A")
    git(outer, "commit", "-qm", "a")
    worker = make_worker(outer / "proj")
    _, result = run_one(worker, "git_status")
    assert result["ok"], result
    git(outer / "proj", "init", "-q", "-b", "main")
    _, result = run_one(worker, "git_status")
    assert not result["ok"]
    assert "when forj started it had the repository at" in result["error"]["message"]


def _private_repo(tmp_path: Path) -> Path:
    private = tmp_path / "private"
    private.mkdir()
    git(private, "init", "-q", "-b", "main")
    (private / "secret.txt").write_text("the private plans\n")
    git(private, "add", "-A")
    git(private, "commit", "-qm", "private-history-subject")
    (private / "secret.txt").write_text("the private plans, changed\n")
    return private


@pytest.mark.parametrize("planted", ["before start", "after start"])
def test_sec_git_08_a_planted_gitfile_does_not_open_another_repository(
    make_worker: MakeWorker, project: Path, tmp_path: Path, planted: str
) -> None:
    private = _private_repo(tmp_path)
    if planted == "after start":
        worker = make_worker()
    (project / ".git").write_text(f"gitdir: {private / '.git'}\n")
    if planted == "before start":
        worker = make_worker()
    for tool in ("git_log", "git_diff", "git_status", "git_add"):
        args = {"paths": ["secret.txt"]} if tool == "git_add" else {}
        _, result = run_one(worker, tool, **args)
        assert not result["ok"], result
        assert result["error"]["details"]["code"] == "E_GIT"
        assert "private" not in str(result.get("result"))
        assert "history-subject" not in str(result)
    message = result["error"]["message"]
    assert "not the project's own" in message or "when forj started" in message
    assert result["error"]["details"]["rule"] == "git.own_git_dir"
    assert "A " not in git(private, "status", "--porcelain")


def test_sec_git_08_a_linked_worktree_is_still_the_projects_own(
    make_worker: MakeWorker, project: Path, tmp_path: Path
) -> None:
    git(project, "init", "-q", "-b", "main")
    git(project, "add", "-A")
    git(project, "commit", "-qm", "a")
    linked = tmp_path / "linked"
    git(project, "worktree", "add", "-q", "-b", "side", str(linked))
    _, result = run_one(make_worker(linked), "git_status")
    assert result["ok"], result
    assert result["result"]["branch"] == "side"


def test_sec_git_09_the_push_review_names_where_the_push_really_goes(
    make_worker: MakeWorker, project: Path, tmp_path: Path
) -> None:
    shown = tmp_path / "shown.git"
    elsewhere = tmp_path / "elsewhere.git"
    for bare in (shown, elsewhere):
        git(tmp_path, "init", "-q", "--bare", str(bare))
    git(project, "init", "-q", "-b", "main")
    git(project, "add", "-A")
    git(project, "commit", "-qm", "a")
    git(project, "remote", "add", "origin", str(shown))
    git(project, "config", "remote.origin.pushurl", str(elsewhere))
    plan, result = run_one(make_worker(), "git_push", refspec="main")
    preview = plan["items"][0]["preview"]
    assert f"push to: {elsewhere}" in preview, preview
    assert str(shown) not in preview
    assert result["ok"], result
    assert git(elsewhere, "rev-parse", "main") == git(project, "rev-parse", "main")


def test_sec_git_09_a_push_url_on_the_network_forces_the_network_review(
    make_worker: MakeWorker, project: Path, tmp_path: Path
) -> None:
    bare = tmp_path / "r.git"
    git(tmp_path, "init", "-q", "--bare", str(bare))
    git(project, "init", "-q", "-b", "main")
    git(project, "add", "-A")
    git(project, "commit", "-qm", "a")
    git(project, "remote", "add", "origin", str(bare))
    git(project, "config", "remote.origin.pushurl", VICTIM_URL)
    user_config('[permissions]\nallow = ["git_push"]\n')
    plan = make_worker().plan({"calls": [call("c", "git_push", refspec="main")]})
    item = plan["items"][0]
    assert item["disposition"] == "confirm", item
    assert "reaches the network" in item["warnings"][0]
    assert VICTIM_URL in item["warnings"][0]


def test_sec_git_06_a_partial_clone_fetches_nothing_through_a_repository_set_proxy(
    make_worker: MakeWorker, project: Path, tmp_path: Path, proxy: _Proxy
) -> None:
    _store_credentials(tmp_path)
    source = tmp_path / "source"
    source.mkdir()
    git(source, "init", "-q", "-b", "main")
    for body in ("one\n", "two\n"):
        (source / "f.txt").write_text(body)
        git(source, "add", "-A")
        git(source, "commit", "-qm", body.strip())
    git(source, "config", "uploadpack.allowFilter", "true")
    clone = tmp_path / "clone"
    git(tmp_path, "clone", "-q", "--filter=blob:none", f"file://{source}", str(clone))
    # The promisor remote now names the victim's host, through a proxy the
    # repository sets: a diff of the old commit would fetch its blobs there.
    git(clone, "remote", "set-url", "origin", VICTIM_URL)
    git(clone, "config", "http.proxy", f"http://127.0.0.1:{proxy.port}")
    _, result = run_one(make_worker(clone), "git_diff", rev="HEAD~1")
    assert not proxy.saw(_basic("victim", TOKEN))
    assert not proxy.seen
    assert not result["ok"]
    assert result["error"]["details"]["code"] == "E_GIT"
    assert "http.proxy" in result["error"]["message"]


def test_sec_git_06_a_partial_clones_lazy_fetch_runs_no_program_of_the_repository(
    make_worker: MakeWorker, tmp_path: Path
) -> None:
    source = tmp_path / "source"
    source.mkdir()
    git(source, "init", "-q", "-b", "main")
    for body in ("one\n", "two\n"):
        (source / "f.txt").write_text(body)
        git(source, "add", "-A")
        git(source, "commit", "-qm", body.strip())
    git(source, "config", "uploadpack.allowFilter", "true")
    clone = tmp_path / "clone"
    git(tmp_path, "clone", "-q", "--filter=blob:none", f"file://{source}", str(clone))
    marker = tmp_path / "RAN"
    evil = tmp_path / "evil.sh"
    evil.write_text(f'#!/bin/sh\ntouch {marker}\nexec git-upload-pack "$@"\n')
    evil.chmod(0o755)
    git(clone, "config", "remote.origin.uploadpack", str(evil))
    _, result = run_one(make_worker(clone), "git_diff", rev="HEAD~1")
    assert not marker.exists()
    assert not result["ok"]
    assert result["error"]["details"]["rule"] == "git.network_config"
    assert "remote.origin.uploadpack" in result["error"]["message"]
