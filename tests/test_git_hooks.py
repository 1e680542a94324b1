"""Repository hooks: skipped, unless the user's own file opts in; then only inside the sandbox."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from conftest import MakeWorker, call, project_config, user_config

from forj_py.safety.commands import probe
from forj_py.service import Worker

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")
needs_bwrap = pytest.mark.skipif(
    not probe("auto").sandboxed, reason="bubblewrap cannot create namespaces here"
)
SECRET_VALUE = "hunter2-secret-value-0123456789"


@pytest.fixture(autouse=True)
def _identity(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = tmp_path / "gitconfig"
    config.write_text("[user]\n\tname = T\n\temail = t@example.com\n")
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(config))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    monkeypatch.setenv("FORJ_TEST_API_TOKEN", SECRET_VALUE)


def git(root: Path, *args: str) -> str:
    env = {k: v for k, v in os.environ.items() if k not in ("GIT_DIR", "GIT_WORK_TREE")}
    done = subprocess.run(["git", *args], cwd=root, env=env, capture_output=True, check=False)
    assert done.returncode == 0, done.stderr.decode()
    return done.stdout.decode()


@pytest.fixture
def repo(project: Path) -> Path:
    git(project, "init", "-q", "-b", "main")
    git(project, "add", "-A")
    git(project, "commit", "-qm", "start")
    return project


def plant(repo: Path, name: str, script: str) -> Path:
    hook = repo / ".git" / "hooks" / name
    hook.write_text("#!/bin/sh\n" + script)
    hook.chmod(0o755)
    return hook


def commit(worker: Worker, repo: Path, text: str = "change\n") -> dict[str, Any]:
    (repo / "README.md").write_text(text)
    git(repo, "add", "README.md")
    plan = worker.plan({"calls": [call("c", "git_commit", message="a change")]})
    done = worker.execute({"batch_id": plan["batch_id"], "approved": ["c"]}, lambda e: None)
    return dict(done["results"][0])


def test_sec_git_hooks_are_skipped_by_default_and_the_result_says_so(
    make_worker: MakeWorker, repo: Path, tmp_path: Path
) -> None:
    marker = tmp_path / "HOOKRAN"
    plant(repo, "pre-commit", f"touch {marker}\n")
    entry = commit(make_worker(), repo)
    assert entry["ok"], entry
    assert entry["result"]["hooks_skipped"] == ["pre-commit"]
    assert "run_hooks" in entry["result"]["note"]
    assert not marker.exists()


def test_sec_git_a_repository_config_cannot_turn_hooks_on(
    make_worker: MakeWorker, repo: Path, tmp_path: Path
) -> None:
    """Even a trusted project's file cannot: hooks are programs the repository's author wrote."""
    marker = tmp_path / "HOOKRAN"
    plant(repo, "pre-commit", f"touch {marker}\n")
    user_config(f'[trust]\nprojects = ["{repo}"]\n')
    project_config(repo, "[tools.git]\nrun_hooks = true\n")
    w = make_worker()
    assert w.config.tools.git.run_hooks is False
    assert any("run_hooks" in warning for warning in w.loaded.warnings)
    entry = commit(w, repo)
    assert entry["ok"] and entry["result"]["hooks_skipped"] == ["pre-commit"]
    assert not marker.exists()
    # Nor can the repository's own git config point hooks elsewhere.
    elsewhere = tmp_path / "hooks"
    elsewhere.mkdir()
    (elsewhere / "pre-commit").write_text(f"#!/bin/sh\ntouch {marker}\n")
    (elsewhere / "pre-commit").chmod(0o755)
    git(repo, "config", "core.hooksPath", str(elsewhere))
    assert commit(make_worker(), repo, "again\n")["ok"]
    assert not marker.exists()


@needs_bwrap
def test_sec_git_opted_in_hooks_run_inside_the_command_sandbox(
    make_worker: MakeWorker, repo: Path, tmp_path: Path
) -> None:
    outside = tmp_path / "OUTSIDE"
    plant(
        repo,
        "pre-commit",
        # Proof it ran (inside the project), then three escapes that must fail.
        'echo "ran token=${FORJ_TEST_API_TOKEN:-none}" > hook-ran.txt\n'
        f"touch {outside} 2>/dev/null\n"
        "touch .git/planted 2>/dev/null && echo wrote-git >> hook-ran.txt\n"
        "cat /proc/1/cmdline 2>/dev/null | tr '\\0' ' ' >> hook-ran.txt; echo >> hook-ran.txt\n",
    )
    plant(repo, "commit-msg", 'grep -q "a change" "$1" && echo msg-ok >> hook-ran.txt\n')
    user_config("[tools.git]\nrun_hooks = true\n")
    entry = commit(make_worker(), repo)
    assert entry["ok"], entry
    assert entry["result"]["hooks_run"] == ["pre-commit", "commit-msg"]
    assert "inside the command sandbox" in entry["result"]["note"]
    proof = (repo / "hook-ran.txt").read_text()
    assert proof.startswith("ran token=none")  # the worker's secrets are not in its env
    assert SECRET_VALUE not in proof
    assert "msg-ok" in proof  # git handed the hook its arguments
    # Outside the project the hook sees private scratch space, never the host's files.
    assert not outside.exists()
    assert "wrote-git" not in proof and not (repo / ".git" / "planted").exists()
    # Its own PID namespace: process 1 is the sandbox itself, not the host's init.
    pid1 = proof.splitlines()[1]
    assert os.path.basename(pid1.split(" ", 1)[0]) == "bwrap"


@needs_bwrap
def test_sec_git_a_failing_hook_stops_the_commit_with_its_output(
    make_worker: MakeWorker, repo: Path
) -> None:
    plant(repo, "pre-commit", "echo 'lint failed: fix src/main.py' >&2\nexit 1\n")
    user_config("[tools.git]\nrun_hooks = true\n")
    before = git(repo, "rev-parse", "HEAD")
    entry = commit(make_worker(), repo)
    assert not entry["ok"]
    assert "lint failed: fix src/main.py" in entry["error"]["message"]
    assert git(repo, "rev-parse", "HEAD") == before


def test_sec_git_hooks_never_run_unsandboxed(
    make_worker: MakeWorker, repo: Path, tmp_path: Path
) -> None:
    marker = tmp_path / "HOOKRAN"
    plant(repo, "pre-commit", f"touch {marker}\n")
    user_config('[tools.git]\nrun_hooks = true\n[tools.shell]\nsandbox = "none"\n')
    entry = commit(make_worker(), repo)
    assert entry["ok"], entry
    assert entry["result"]["hooks_skipped"] == ["pre-commit"]
    assert "never runs outside it" in entry["result"]["note"]
    assert not marker.exists()


@needs_bwrap
def test_sec_git_a_pre_push_hook_gets_its_input_and_the_remotes_hooks_still_never_run(
    make_worker: MakeWorker, repo: Path, tmp_path: Path
) -> None:
    bare = tmp_path / "r.git"
    git(tmp_path, "init", "-q", "--bare", str(bare))
    remote_marker = tmp_path / "REMOTE-HOOK-RAN"
    (bare / "hooks" / "pre-receive").write_text(f"#!/bin/sh\ntouch {remote_marker}\n")
    (bare / "hooks" / "pre-receive").chmod(0o755)
    git(repo, "remote", "add", "origin", str(bare))
    plant(repo, "pre-push", 'echo "args: $1 $2" > pushed.txt\ncat >> pushed.txt\n')
    user_config("[tools.git]\nrun_hooks = true\n")
    w = make_worker()
    plan = w.plan({"calls": [call("c", "git_push", remote="origin", refspec="main")]})
    done = w.execute({"batch_id": plan["batch_id"], "approved": ["c"]}, lambda e: None)
    entry = done["results"][0]
    assert entry["ok"], entry
    assert entry["result"]["hooks_run"] == ["pre-push"]
    pushed = (repo / "pushed.txt").read_text()
    head = git(repo, "rev-parse", "main").strip()
    assert pushed.startswith(f"args: origin {bare}")
    assert f"refs/heads/main {head} refs/heads/main" in pushed  # git's stdin reached the hook
    assert not remote_marker.exists()
